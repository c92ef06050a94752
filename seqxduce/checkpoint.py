"""Checkpoints: atomic save, safe load (no arbitrary unpickling), keep-last-K, parameter averaging."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write

STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save through seqxduce.atomic: a crash never leaves half a checkpoint."""
    with atomic_write(path) as handle:
        torch.save(obj, handle)


def load(path: Path) -> dict[str, Any]:
    """Load a checkpoint with weights_only=True; a damaged file is a UserError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for truncated or foreign files
        raise UserError(
            f"{path}: not a readable checkpoint ({type(err).__name__}: {str(err).splitlines()[0][:120]}); "
            f"it may be truncated: use an earlier one from {path.parent}"
        ) from None
    if not isinstance(state, dict) or "model" not in state:
        raise UserError(f"{path}: not a seqxduce checkpoint (no 'model' entry)")
    return state


def load_latest(directory: Path) -> tuple[Path, dict[str, Any]]:
    """The newest readable step checkpoint in directory and its state; a damaged newer one (a crash while
    the disk was full, say) is reported and passed over, so a resume never depends on it."""
    from seqxduce.console import console

    found = step_checkpoints(directory)
    if not found:
        raise UserError(f"{directory}: holds no step checkpoint")
    for path in reversed(found):
        try:
            return path, load(path)
        except UserError as err:
            console.print(f"warning: skipping {err}")
    raise UserError(f"{directory}: none of its {len(found)} checkpoints is readable; train into a new --out")


def step_checkpoints(directory: Path) -> list[Path]:
    """Step checkpoints in a directory, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := STEP_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def step_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step_{step:08d}.pt"


def prune(directory: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` step checkpoints; returns what was removed."""
    removed = step_checkpoints(directory)[:-keep] if keep > 0 else []
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def average(paths: Sequence[Path]) -> dict[str, Any]:
    """Average model parameters of several checkpoints (Vaswani et al. 2017, section 6.1).

    Floating-point tensors are averaged in float64 and cast back; integer buffers are taken from the last
    checkpoint. The result keeps the last checkpoint's step and carries no optimizer state.
    """
    if not paths:
        raise UserError("average: name at least one checkpoint")
    total: dict[str, torch.Tensor] = {}
    last: dict[str, Any] = {}
    for path in paths:
        state = load(path)
        model = state["model"]
        if total and set(model) != set(total):
            raise UserError(f"{path}: its parameters differ from {paths[0]}'s; average checkpoints of one run only")
        for name, tensor in model.items():
            if tensor.is_floating_point():
                total[name] = total.get(name, 0) + tensor.double()
            else:
                total[name] = tensor
        last = state
    averaged = {
        name: (t / len(paths)).to(last["model"][name].dtype) if t.is_floating_point() else t
        for name, t in total.items()
    }
    return {"model": averaged, "step": last.get("step", 0), "averaged_from": [str(p) for p in paths]}
