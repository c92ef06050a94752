"""Checkpoint files: atomic save, safe load (no arbitrary unpickling), parameter averaging."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save through seqxduce.atomic: a crash never leaves half a checkpoint."""
    with atomic_write(path) as handle:
        torch.save(obj, handle)


ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive


def load(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint with weights_only=True (no arbitrary objects are unpickled); a file that is not a
    checkpoint, a truncated one or one without model weights is a UserError naming the cause. With mmap the
    tensors are mapped, not read: a cheap look at what a checkpoint holds."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such checkpoint")
    if not path.is_file():
        raise UserError(f"{path}: not a file; name a checkpoint file")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(ZIP_MAGIC))
    except OSError as err:
        raise UserError(f"{path}: cannot be read ({err.strerror or err})") from None
    size = path.stat().st_size
    if size == 0:
        raise UserError(f"{path}: empty (0 bytes): its save was cut off; use an earlier checkpoint from {path.parent}")
    if head != ZIP_MAGIC:
        raise UserError(f"{path}: not a checkpoint (not a file torch.save wrote)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:
        raise UserError(f"{path}: not a seqxduce checkpoint: it holds objects other than tensors and plain "
                        "values, which are not loaded because unpickling them could run code") from None
    except Exception:  # torch raises several types for a damaged archive
        raise UserError(f"{path}: truncated or damaged ({size} bytes; a save cut off by a full disk or a kill?); "
                        f"use an earlier checkpoint from {path.parent}") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise UserError(f"{path}: not a seqxduce checkpoint (no 'model' entry)")
    return state


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: str | Path, fix: str) -> None:
    """model.load_state_dict(weights); weights of a model of another shape are a UserError naming the first
    tensor that differs, with both shapes, then the fix."""
    expected = model.state_dict()
    problem = ""
    for name, tensor in expected.items():
        if name not in weights:
            problem = f"it has no tensor {name} (shape {_shape(tensor)} in the model)"
        elif tuple(weights[name].shape) != tuple(tensor.shape):
            problem = f"{name} is {_shape(weights[name])} in it but {_shape(tensor)} in the model"
        if problem:
            break
    else:
        extra = [name for name in weights if name not in expected]
        if extra:
            problem = f"it has a tensor {extra[0]} (shape {_shape(weights[extra[0]])}) that the model has not"
    if problem:
        raise UserError(f"{source}: does not fit the model, it comes from a model of another shape: {problem}; {fix}")
    model.load_state_dict(weights)


def _shape(tensor: torch.Tensor) -> str:
    return "(" + ", ".join(str(n) for n in tensor.shape) + ")"


def nonfinite_tensor(weights: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor holding a NaN or an infinity, if any."""
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def check_same_shapes(paths: Sequence[Path]) -> None:
    """Checkpoints whose model tensors differ in name or shape (from different models) as one UserError naming
    the first difference; only the archives' tables are read, not the tensors."""
    first = load(paths[0], mmap=True)["model"]
    for path in paths[1:]:
        model = load(path, mmap=True)["model"]
        for name in list(first) + [n for n in model if n not in first]:
            if name not in model or name not in first:
                owner, other = (paths[0], path) if name in first else (path, paths[0])
                raise UserError(f"{other}: has no tensor {name}, which {owner} has; average checkpoints of one "
                                "model only")
            if tuple(model[name].shape) != tuple(first[name].shape):
                raise UserError(f"{path}: {name} is {_shape(model[name])} in it but {_shape(first[name])} in "
                                f"{paths[0]}; average checkpoints of one model only")


def average(paths: Sequence[Path], show: bool = True) -> dict[str, Any]:
    """Average model parameters of several checkpoints (Vaswani et al. 2017, section 6.1).

    Floating-point tensors are averaged in float64 and cast back; integer buffers are taken from the last
    checkpoint. The result keeps the last checkpoint's step, carries no optimizer state, and records what it
    averages (files, steps, and the run they come from when they share one) so that decoding can tell a
    stale average from a current one. show: progress on stderr (a bar, or in a log file a first line and then
    one at a steady pace: reading 20 checkpoints of a large model takes minutes).
    """
    from seqxduce.console import PairsProgress, console

    if not paths:
        raise UserError("average: name at least one checkpoint")
    check_same_shapes(paths)
    total: dict[str, torch.Tensor] = {}
    last: dict[str, Any] = {}
    steps: list[int] = []
    run_ids: set[Any] = set()
    with PairsProgress("averaging", len(paths), enabled=show, unit="checkpoints") as progress:
        if progress.plain:
            console.print(f"averaging {len(paths)} checkpoint(s), {paths[0].name} to {paths[-1].name}",
                          markup=False, highlight=False)
        for path in paths:
            state = load(path)
            for name, tensor in state["model"].items():
                if tensor.is_floating_point():
                    total[name] = total.get(name, 0) + tensor.double()
                else:
                    total[name] = tensor
            steps.append(int(state.get("step", 0)))
            run_ids.add(state.get("run_id"))
            last = state
            progress.advance(1)
    averaged = {
        name: (t / len(paths)).to(last["model"][name].dtype) if t.is_floating_point() else t
        for name, t in total.items()
    }
    return {"model": averaged, "step": last.get("step", 0), "averaged_from": [str(p) for p in paths],
            "averaged_steps": steps, "run_id": run_ids.pop() if len(run_ids) == 1 else None}
