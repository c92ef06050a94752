"""Fault injection: training processes signalled and killed for real, then resumed."""

from __future__ import annotations

import signal

import pytest
import torch

from seqxduce import engine
from tests.fault_tools import HANG_GUARD_S, QUIET, run, start, train_lines, wait_for
from tests.tiny import TINY_RECIPE as TINY

LONG = ("--set", "train.max_steps=100000", "--set", "train.checkpoint_every=100000", "--set", "train.log_every=1",
        *QUIET)


def test_sigterm_finishes_the_step_saves_it_exits_143_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    process = start("train", TINY, "--out", out, *LONG, log=tmp_path / "log")
    wait_for(lambda: train_lines(out) >= 1, process)
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=300)
    log = (tmp_path / "log").read_text()
    assert code == 143, log[-1500:]
    saved = sorted((out / "checkpoints").glob("step_*.pt"))
    assert len(saved) == 1, log
    step = int(saved[0].stem.split("_")[1])
    assert f"SIGTERM: interrupted at step {step}; saved {saved[0]}; continue with --resume" in log
    assert "Error" not in log and "Traceback" not in log
    assert torch.load(saved[0], weights_only=True)["step"] == step
    resumed = run("train", TINY, "--out", out, "--resume", "--set", f"train.max_steps={step + 2}")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {saved[0]} at step {step}" in resumed.stderr
    assert f"trained to step {step + 2}" in resumed.stdout


def test_sigkill_at_any_moment_then_resume_finishes_and_clears_the_cut_off_save(tmp_path):
    out = tmp_path / "run"
    process = start("train", TINY, "--out", out, *LONG, "--set", "train.checkpoint_every=1", log=tmp_path / "log")
    wait_for(lambda: len(list((out / "checkpoints").glob("step_*.pt"))) >= 2, process)
    process.kill()
    process.wait(timeout=300)
    # what a kill inside atomic_save leaves (it may or may not have happened above)
    (out / "checkpoints" / ".step_00099999.pt.0badf00d.tmp").write_bytes(b"PK\x03\x04half")
    latest = sorted((out / "checkpoints").glob("step_*.pt"))[-1]
    step = int(latest.stem.split("_")[1])
    resumed = run("train", TINY, "--out", out, "--resume", "--set", f"train.max_steps={step + 2}")
    assert resumed.returncode == 0, resumed.stderr
    assert "left by a save that was cut off" in resumed.stderr
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    assert f"trained to step {step + 2}" in resumed.stdout


def test_a_killed_resume_of_a_finished_run_keeps_its_average(tmp_path):
    out = tmp_path / "run"
    engine.train(TINY, out, overrides=["train.max_steps=4", "train.average_last=2", "train.validate_every=0"])
    average = (out / "average.pt").read_bytes()
    process = start("train", TINY, "--out", out, "--resume", log=tmp_path / "log")
    wait_for(lambda: (tmp_path / "log").stat().st_size > 0 or process.poll() is not None)
    process.kill()
    process.wait(timeout=300)
    assert (out / "average.pt").read_bytes() == average
    again = run("train", TINY, "--out", out, "--resume")
    assert again.returncode == 0, again.stderr
    assert "the run already finished at step 4" in again.stderr and "nothing to train" in again.stderr
    assert (out / "average.pt").read_bytes() == average
    assert engine.checkpoint_for(out) == out / "average.pt"


@pytest.mark.parametrize("resumed", [False, True], ids=["new", "resumed"])
def test_a_stop_between_the_prepared_data_and_the_first_step_says_so_in_one_line(tmp_path, resumed):
    """A signal while the model is built (held there by tests/faults/slowed.py, after the data are prepared) ends the
    command at once in one line saying how to start or go on, not silently; nothing is trained or lost."""
    out, log = tmp_path / "run", tmp_path / "log"
    flags = ("--set", "train.max_steps=2")
    if resumed:
        assert run("train", TINY, "--out", out, *QUIET, *flags).returncode == 0
        flags = ("--resume", "--set", "train.max_steps=4")
    saved = sorted((out / "checkpoints").glob("step_*.pt")) if resumed else []
    process = start("train", TINY, "--out", out, *QUIET, *flags, log=log, module=("tests.faults.slowed", "building"))
    wait_for(lambda: "building the model (slowed)" in log.read_text(), process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=HANG_GUARD_S) == 143, log.read_text()[-1500:]
    said = log.read_text()
    assert "Traceback" not in said and "Error" not in said, said
    if resumed:
        assert ("SIGTERM: stopped while setting up the run, before training went on; its checkpoints are as they "
                "were: continue with --resume") in said, said
    else:
        assert ("SIGTERM: stopped while setting up the run, before its first step; nothing was trained: run the same "
                "command again to start it") in said, said
    assert sorted((out / "checkpoints").glob("step_*.pt")) == saved
    again = run("train", TINY, "--out", out, *QUIET, *flags)  # what the line says
    assert again.returncode == 0, again.stderr
