"""`train --auto-resume`: one command line that starts a run, continues it bit-exactly after a stop (what a requeued
job and torchrun's restarts run again), says in one line that a finished run is finished, and refuses a folder that
holds another recipe's run."""

from __future__ import annotations

import shutil

import torch

from tests.fault_tools import QUIET, run
from tests.tiny import TINY_RECIPE as TINY

SETTINGS = (*QUIET, "--set", "train.max_steps=6", "--set", "train.checkpoint_every=1")


def _weights(out) -> dict:
    return torch.load(out / "checkpoints" / "step_00000006.pt", weights_only=True)["model"]


def test_auto_resume_starts_continues_bit_exactly_and_ends_in_one_line(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    first = run("train", TINY, "--out", whole, "--auto-resume", *SETTINGS)  # an empty folder: a new run
    assert first.returncode == 0, first.stderr
    assert "trained to step 6" in first.stdout and "resumed" not in first.stderr
    # a run stopped after saving step 3, as a kill leaves it: the later steps' checkpoints never came
    shutil.copytree(whole, cut)
    for late in sorted((cut / "checkpoints").glob("step_*.pt"))[3:]:
        late.unlink()
    again = run("train", TINY, "--out", cut, "--auto-resume", *SETTINGS)
    assert again.returncode == 0, again.stderr
    assert "at step 3" in again.stderr and "trained to step 6" in again.stdout
    mine, theirs = _weights(cut), _weights(whole)
    assert all(torch.equal(mine[name], theirs[name]) for name in theirs)
    finished = run("train", TINY, "--out", cut, "--auto-resume", *SETTINGS)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout == ""
    said = [line for line in finished.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "the run already finished at step 6" in said[0], finished.stderr


def test_auto_resume_refuses_another_recipes_run_and_replaces_a_start_that_saved_nothing(tmp_path):
    out = tmp_path / "run"
    assert run("train", TINY, "--out", out, *SETTINGS).returncode == 0
    other = run("train", TINY, "--out", out, "--auto-resume", *SETTINGS, "--set", "train.seed=7")
    assert other.returncode == 1
    lines = [line for line in other.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds a run of another recipe ([train] seed" in lines[0], other.stderr
    assert "--resume" in lines[0] and "--overwrite" in lines[0]
    # an attempt killed before its first checkpoint left its recipe, tokenizers and metrics: start it again
    shutil.rmtree(out / "checkpoints")
    again = run("train", TINY, "--out", out, "--auto-resume", *SETTINGS)
    assert again.returncode == 0, again.stderr
    assert "trained to step 6" in again.stdout
    contradiction = run("train", TINY, "--out", out, "--auto-resume", "--overwrite")
    assert contradiction.returncode == 1 and "not both" in contradiction.stderr


def test_auto_resume_takes_a_finished_run_further_as_resume_does(tmp_path):
    """The finished line's advice ("raise them with --set") works with --auto-resume: a raised max_steps continues
    the run, to the weights `--resume` reaches with the same --set; a lowered one, or a limit of epochs where the run
    had none, is another recipe and refused."""
    first, second = tmp_path / "first", tmp_path / "second"
    assert run("train", TINY, "--out", first, "--auto-resume", *SETTINGS).returncode == 0
    shutil.copytree(first, second)
    further = ("--set", "train.max_steps=8")
    auto = run("train", TINY, "--out", first, "--auto-resume", *SETTINGS, *further)
    assert auto.returncode == 0, auto.stderr
    assert "at step 6" in auto.stderr and "trained to step 8" in auto.stdout
    resumed = run("train", TINY, "--out", second, "--resume", *further)
    assert resumed.returncode == 0, resumed.stderr
    mine, theirs = (torch.load(out / "checkpoints" / "step_00000008.pt", weights_only=True)["model"]
                    for out in (first, second))
    assert all(torch.equal(mine[name], theirs[name]) for name in theirs)
    for lower in ("train.max_steps=7", "train.max_epochs=3"):
        refused = run("train", TINY, "--out", first, "--auto-resume", *SETTINGS, *further, "--set", lower)
        assert refused.returncode == 1, refused.stderr
        assert f"holds a run of another recipe ([train] {lower.split('=')[0][6:]}" in refused.stderr, refused.stderr
