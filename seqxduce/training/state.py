"""What a checkpoint holds beyond the weights, and how a run resumes from it exactly: the training position, the
optimizer and loss scaler, the random generators and the run's id; and how a run's end settles its average."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqxduce.api import UserError
from seqxduce.console import console
from seqxduce.rundir import RunDir
from seqxduce.settings import TrainSettings
from seqxduce.training.optim import keep_implementation, restore_optimizer


@dataclass
class TrainState:
    """The position in training (optimizer steps taken, the epoch and step within it) and early stopping's
    record: the best validation value so far, its step, and the validations since without a better one."""

    step: int = 0
    epoch: int = 1
    step_in_epoch: int = 0
    best_value: float | None = None
    best_step: int = 0
    bad_validations: int = 0


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    metrics: dict[str, float]
    finished_before: bool = False  # a resume of a run that had finished: nothing trained, one line said so


def set_step_seed(seed: int, rank: int, step: int) -> None:
    """Reseed per optimizer step (as fairseq does) so dropout is reproducible across resume and distinct per rank."""
    value = (seed * 1_000_003 + rank * 7_919 + step) % (2**63)
    torch.manual_seed(value)
    random.seed(value)


def full_states(model: torch.nn.Module, optimizer: torch.optim.Optimizer, fsdp: bool, is_main: bool
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's and the optimizer's state dicts as a checkpoint holds them: under FSDP gathered from the
    shards onto rank 0's CPU (a collective: every rank calls it), the others get empty ones."""
    if not fsdp:
        return (model.state_dict(), optimizer.state_dict()) if is_main else ({}, {})
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def checkpoint_state(weights: dict[str, Any], optimizer: dict[str, Any], scaler: torch.amp.GradScaler,
                     state: TrainState, run_id: str) -> dict[str, Any]:
    """A step checkpoint's contents: everything an exact --resume needs."""
    return {
        "model": weights,
        "optimizer": optimizer,
        "scaler": scaler.state_dict(),
        "step": state.step,
        "epoch": state.epoch,
        "step_in_epoch": state.step_in_epoch,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "run_id": run_id,
        "best": {"value": state.best_value, "step": state.best_step, "bad_validations": state.bad_validations},
    }


def restore(latest: Path, saved: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            fused: bool, scaler: torch.amp.GradScaler, fsdp: bool) -> TrainState:
    """The optimizer, scaler and RNG of a checkpoint restored in place (its weights were loaded before wrapping);
    returns its training position."""
    if fsdp:
        _restore_sharded_optimizer(latest, saved["optimizer"], model, optimizer, fused)
    else:
        restore_optimizer(optimizer, saved["optimizer"], fused)
    scaler.load_state_dict(saved["scaler"])
    best = saved.get("best") or {}  # absent from checkpoints written before early stopping
    state = TrainState(int(saved["step"]), int(saved["epoch"]), int(saved["step_in_epoch"]), best.get("value"),
                       int(best.get("step", 0)), int(best.get("bad_validations", 0)))
    torch.set_rng_state(saved["rng"]["torch"])
    random.setstate(_as_random_state(saved["rng"]["python"]))
    return state


def _restore_sharded_optimizer(latest: Path, saved: dict[str, Any], model: torch.nn.Module,
                               optimizer: torch.optim.Optimizer, fused: bool) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    if not all(isinstance(key, str) for key in saved["state"]):
        raise UserError(f"--resume: {latest} was written without [train] fsdp; resume it with fsdp = false")
    set_optimizer_state_dict(model, optimizer, saved, options=StateDictOptions(full_state_dict=True))
    keep_implementation(optimizer, fused)


def _as_random_state(value: Any) -> tuple:
    """random.setstate needs tuples; a checkpoint may give lists back."""
    version, internal, gauss = value
    return (version, tuple(internal), gauss)


def settle_average(rundir: RunDir, settings: TrainSettings) -> None:
    """At the end of a run: average its last checkpoints when asked; otherwise an average left from before a
    resume no longer stands for the run, and goes now that the final checkpoint (which replaces it) is written."""
    if settings.average_last > 1:
        console.print(averaged_message(rundir.step_checkpoints()[-settings.average_last:], settings.average_last,
                                       rundir.write_average(settings.average_last)))
    elif rundir.average_file.exists():
        rundir.average_file.unlink()
        console.print(f"removed {rundir.average_file}: it averaged checkpoints the run has gone past")


def averaged_message(paths: list[Path], asked: int, average: Path) -> str:
    """What the end of a run says of its average: the checkpoints it really averaged (an early-stopped or short run
    has fewer than average_last), by step."""
    steps = ", ".join(str(int(p.stem.split("_")[-1])) for p in paths)
    short = f"; average_last = {asked}, but the run has {len(paths)}" if len(paths) < asked else ""
    what = "checkpoint (step" if len(paths) == 1 else f"{len(paths)} checkpoints (steps"
    return f"averaged the last {what} {steps}{short}) into {average}"


def finished_already(rundir: RunDir, settings: TrainSettings, step: int, is_main: bool) -> TrainResult:
    """A --resume of a finished run trains nothing and deletes nothing; it makes only an average the run asks
    for and lacks (one a kill at the very end left unwritten)."""
    if is_main:
        console.drop_notes()  # nothing is trained: no threads line before the one line a finished run says
        console.print(f"{rundir.path}: the run already finished at step {step} (max_steps = {settings.max_steps}, "
                      f"max_epochs = {settings.max_epochs}); nothing to train: raise them with --set to go on")
        if settings.average_last > 1 and not _average_current(rundir):
            settle_average(rundir, settings)
    return TrainResult(rundir.path, step, {}, finished_before=True)


def _average_current(rundir: RunDir) -> bool:
    try:
        rundir.check_average()
    except UserError:
        return False
    return rundir.average_file.is_file()
