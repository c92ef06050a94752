"""Two gloo processes under torchrun, each accumulating 2 batches: identical parameters on both ranks, equal to one
process with the same global batch (update_freq 4), and one gradient all-reduce per step, not per batch."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from seqxduce.recipe import load_recipe
from seqxduce.training.run import assemble
from seqxduce.training.trainer import Trainer

HERE = Path(__file__).resolve().parent
RECIPE = HERE / "fixtures" / "tiny.toml"
# Attention key biases have a gradient that is zero in exact arithmetic (softmax ignores a constant shift), so
# in floating point it is rounding noise that differs with summation order; Adam with eps 1e-9 would blow that
# noise up to full-size updates. A larger eps keeps the comparison about the gradients that exist.
NO_DROPOUT = ["model.dropout=0.0", "train.max_steps=4", "train.validate_every=0", "train.valid_decode_examples=0",
              "train.eps=1e-3"]


def test_two_process_gloo_matches_single_process(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "ddp_worker.py"), str(RECIPE), str(tmp_path / "ddp"), "train.device=\"cpu\"", *NO_DROPOUT,
           "train.update_freq=2", "train.max_tokens=100"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=HERE.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    rank0 = torch.load(tmp_path / "ddp" / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "ddp" / "rank1.pt", weights_only=True)
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name

    # the tiny model's gradients fill one DDP bucket: one all-reduce per step means none on the first batch
    assert (tmp_path / "ddp" / "reduces0.txt").read_text() == (tmp_path / "ddp" / "reduces1.txt").read_text() == "4"

    single = Trainer(assemble(load_recipe(RECIPE, [*NO_DROPOUT, "train.update_freq=4", "train.max_tokens=100"]),
                              tmp_path / "single"))
    single.run()
    state = single.parts.model.state_dict()
    initial = assemble(load_recipe(RECIPE, [*NO_DROPOUT, "train.max_steps=0", "train.max_tokens=100"]),
                       tmp_path / "init").model.state_dict()
    moved = 0
    for name in rank0:
        assert torch.allclose(rank0[name], state[name], atol=1e-5, rtol=1e-4), name
        moved += int(not torch.equal(state[name], initial[name]))
    assert moved > 0  # training changed the parameters, so the comparison means something


def _torchrun(out: Path, *overrides: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "ddp_worker.py"), str(RECIPE), str(out), "train.device=\"cpu\"", *overrides]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=HERE.parent)
    assert result.returncode == 0, result.stderr[-3000:]


def test_fsdp_over_two_gloo_processes_matches_one_process_and_resumes(tmp_path):
    """fully_shard over 2 ranks, 2 batches accumulated each, stopped after 2 steps and resumed to 4: the gathered
    weights equal those of one process at update_freq 4 (the checkpoint holds full weights; validation ran on a
    gathered copy)."""
    settings = [*NO_DROPOUT, "train.fsdp=true", "train.update_freq=2", "train.max_tokens=100",
                "train.checkpoint_every=2"]
    _torchrun(tmp_path / "fsdp", *settings, "train.max_steps=2")
    _torchrun(tmp_path / "fsdp", *settings, "--resume")
    sharded = torch.load(tmp_path / "fsdp" / "rank0.pt", weights_only=True)
    saved = torch.load(tmp_path / "fsdp" / "checkpoints" / "step_00000004.pt", weights_only=True)
    single = Trainer(assemble(load_recipe(RECIPE, [*NO_DROPOUT, "train.update_freq=4", "train.max_tokens=100"]),
                              tmp_path / "single"))
    single.run()
    state = single.parts.model.state_dict()
    assert sharded.keys() == state.keys() == saved["model"].keys()
    for name in state:
        assert torch.allclose(sharded[name], state[name], atol=1e-5, rtol=1e-4), name
        assert torch.equal(saved["model"][name], sharded[name]), name
    records = (tmp_path / "fsdp" / "metrics.jsonl").read_text()
    assert '"kind": "valid"' in records


def test_fsdp_in_one_process_is_one_line(tmp_path):
    import pytest

    from seqxduce.api import UserError

    with pytest.raises(UserError, match=r"\[train\] fsdp = true shards the model over several processes; start "
                                        r"the run with torchrun --nproc_per_node N"):
        Trainer(assemble(load_recipe(RECIPE, ["train.fsdp=true"]), tmp_path / "run"))
    assert not (tmp_path / "run").exists()
