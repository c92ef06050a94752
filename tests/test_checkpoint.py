"""Atomic saves, safe loading with clear errors, pruning and averaging."""

import os
import stat

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
    with pytest.raises(UserError, match=r"step_00000001.pt: truncated or damaged \(100 bytes.*use an earlier"):
        ckpt.load(path)


class Evil:
    """Any class: unpickling it would run arbitrary code paths."""


def test_loading_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": Evil()}, path)
    with pytest.raises(UserError, match="not a seqxduce checkpoint: it holds objects other than tensors"):
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


@pytest.mark.parametrize("content, cause", [(b"", r"empty \(0 bytes\)"),
                                            (b"step 1\nloss 2.3\n", r"not a checkpoint \(not a file torch.save wrote")])
def test_a_file_that_is_no_checkpoint_names_the_cause(tmp_path, content, cause):
    path = tmp_path / "step_00000001.pt"
    path.write_bytes(content)
    with pytest.raises(UserError, match=cause):
        ckpt.load(path)


def test_a_folder_in_place_of_a_checkpoint_is_named(tmp_path):
    (tmp_path / "step_00000001.pt").mkdir()
    with pytest.raises(UserError, match="step_00000001.pt: not a file"):
        ckpt.load(tmp_path / "step_00000001.pt")


def test_weights_of_another_shape_name_the_first_differing_tensor_and_both_shapes():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 5)).state_dict()
    with pytest.raises(UserError, match=r"^ck.pt: does not fit the model, it comes from a model of another shape: "
                                        r"1.weight is \(5, 3\) in it but \(2, 3\) in the model; fix it$"):
        ckpt.load_weights(model, other, "ck.pt", "fix it")
    missing = {k: v for k, v in model.state_dict().items() if k != "1.bias"}
    with pytest.raises(UserError, match=r"it has no tensor 1.bias \(shape \(2\) in the model\)"):
        ckpt.load_weights(model, missing, "ck.pt", "fix it")


def test_averaging_checkpoints_of_different_shapes_is_one_line_naming_the_tensor(tmp_path):
    ckpt.atomic_save(state(1.0, 1), tmp_path / "a.pt")
    ckpt.atomic_save({"model": {"w": torch.ones(3, 2), "n": torch.tensor(2)}, "step": 2}, tmp_path / "b.pt")
    with pytest.raises(UserError, match=r"b.pt: w is \(3, 2\) in it but \(2, 2\) in .*a.pt; average checkpoints "
                                        "of one model only"):
        ckpt.average([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_an_average_records_what_it_averages(tmp_path):
    paths = [tmp_path / "a.pt", tmp_path / "b.pt"]
    for i, path in enumerate(paths):
        ckpt.atomic_save({**state(float(i), i + 4), "run_id": "r1"}, path)
    avg = ckpt.average(paths)
    assert (avg["averaged_steps"], avg["run_id"], avg["averaged_from"]) == ([4, 5], "r1", [str(p) for p in paths])


def test_a_checkpoint_gets_the_mode_of_any_new_file(tmp_path):
    previous = os.umask(0o022)
    try:
        ckpt.atomic_save(state(1.0, 1), tmp_path / "a.pt")
        (tmp_path / "other").write_text("x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "a.pt").stat().st_mode) == stat.S_IMODE((tmp_path / "other").stat().st_mode)
    assert stat.S_IMODE((tmp_path / "a.pt").stat().st_mode) == 0o644


def test_nonfinite_weights_are_found():
    assert ckpt.nonfinite_tensor({"a": torch.ones(2), "b": torch.tensor([1.0, float("nan")])}) == "b"
    assert ckpt.nonfinite_tensor({"a": torch.ones(2), "n": torch.tensor(3)}) is None
