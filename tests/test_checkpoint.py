"""Atomic saves, safe loading with clear errors, pruning and averaging."""

import pytest
import torch

from seqxduce import checkpoint as ckpt
from seqxduce import rundir
from seqxduce.api import UserError


def state(value: float, step: int):
    return {"model": {"w": torch.full((2, 2), value), "n": torch.tensor(step)}, "step": step}


def test_atomic_save_then_load(tmp_path):
    path = tmp_path / "c" / "step_00000001.pt"
    ckpt.atomic_save(state(1.0, 1), path)
    loaded = ckpt.load(path)
    assert torch.equal(loaded["model"]["w"], torch.ones(2, 2))
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "step_00000001.pt"
    ckpt.atomic_save(state(1.0, 1), path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(UserError, match="not a readable checkpoint.*earlier"):
        ckpt.load(path)


class Evil:
    """Any class: unpickling it would run arbitrary code paths."""


def test_loading_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": Evil()}, path)
    with pytest.raises(UserError, match="not a readable checkpoint"):
        ckpt.load(path)


def test_prune_keeps_newest(tmp_path):
    for step in (1, 2, 3, 10):
        ckpt.atomic_save(state(float(step), step), rundir.step_path(tmp_path, step))
    rundir.prune(tmp_path, 2)
    assert [p.name for p in rundir.step_checkpoints(tmp_path)] == ["step_00000003.pt", "step_00000010.pt"]


def test_average_is_the_mean_and_keeps_integer_buffers_of_the_last(tmp_path):
    paths = []
    for i, value in enumerate((1.0, 2.0, 6.0)):
        paths.append(rundir.step_path(tmp_path, i + 1))
        ckpt.atomic_save(state(value, i + 1), paths[-1])
    avg = ckpt.average(paths)
    assert torch.allclose(avg["model"]["w"], torch.full((2, 2), 3.0))
    assert int(avg["model"]["n"]) == 3
    assert avg["step"] == 3
