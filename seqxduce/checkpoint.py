"""Checkpoint files: atomic save, safe load (no arbitrary unpickling), parameter averaging."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seqxduce.api import UserError


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save to a temporary file beside path, fsync, then rename: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in directory durable: without this a power cut can lose the new name (POSIX only)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows, where directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: str | Path, fix: str) -> None:
    """model.load_state_dict(weights); weights of another model are a UserError naming source and the fix."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise UserError(f"{source}: does not fit the model ({str(err).splitlines()[0]}); {fix}") from None
