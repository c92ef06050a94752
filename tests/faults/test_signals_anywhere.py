"""A scheduler's signal stops a run within seconds wherever it arrives: during validation and the final
validation the validation is abandoned and the last step done is saved, named in the message. A signal lands in a
validation for sure only when the test waits for the validation to be under way: the fault tests' injection
(`python -m tests.faults.slowed validation`) prints "validating (slowed)" there and holds it, since the step's
log line comes before the step's own check for a signal (a signal just after it is a signal between steps)."""

from __future__ import annotations

import json
import signal

import torch

from tests.fault_tools import run, start, wait_for
from tests.tiny import TINY_RECIPE as TINY

# a valid split whose validation (loss, then decoding every example) lasts far longer than a signal takes to
# stop it, held besides by the injection; the training steps stay the tiny recipe's
LONG_VALIDATION = ("--set", "task.valid_size=20000", "--set", "task.valid_max_len=6",
                   "--set", "train.valid_decode_examples=20000", "--set", "train.log_every=1",
                   "--set", "train.checkpoint_every=100000", "--set", "train.average_last=0")
SLOWED_VALIDATION = ("tests.faults.slowed", "validation")


def _lines(run_dir, kind: str) -> list[dict]:
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [row for row in rows if row.get("kind") == kind]


def _stopped(process, log, code: int) -> str:
    assert process.wait(timeout=300) == code, log.read_text()[-2000:]
    text = log.read_text()
    assert "Traceback" not in text and "Error" not in text, text[-2000:]
    return text


def test_a_signal_during_validation_abandons_it_and_saves_the_step_done(tmp_path):
    out, log = tmp_path / "run", tmp_path / "log"
    process = start("train", TINY, "--out", out, *LONG_VALIDATION, "--set", "train.max_steps=100000",
                    "--set", "train.validate_every=2", log=log, module=SLOWED_VALIDATION)
    wait_for(lambda: "validating (slowed)" in log.read_text(), process)
    process.send_signal(signal.SIGTERM)  # validation of step 2 is under way (the first validation)
    text = _stopped(process, log, 143)
    saved = out / "checkpoints" / "step_00000002.pt"
    assert f"SIGTERM: interrupted at step 2 (its validation abandoned); saved {saved}; continue with --resume" in text
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*.pt")) == [saved.name]
    assert torch.load(saved, weights_only=True)["step"] == 2
    assert not _lines(out, "valid")  # abandoned, not finished
    assert max(row["step"] for row in _lines(out, "train")) == 2  # no step after the signal


def test_a_signal_during_the_final_validation_saves_the_last_step_and_resume_finishes(tmp_path):
    out, log = tmp_path / "run", tmp_path / "log"
    process = start("train", TINY, "--out", out, *LONG_VALIDATION, "--set", "train.max_steps=2",
                    "--set", "train.validate_every=0", log=log, module=SLOWED_VALIDATION)
    wait_for(lambda: "validating (slowed)" in log.read_text(), process)  # the final validation, after step 2
    process.send_signal(signal.SIGUSR1)  # SLURM's --signal=USR1@SECONDS
    text = _stopped(process, log, 128 + signal.SIGUSR1)
    saved = out / "checkpoints" / "step_00000002.pt"
    assert (f"SIGUSR1: interrupted at step 2 (the run's last, its final validation abandoned); saved {saved}; "
            "--resume writes what the end of the run writes") in text
    assert "interrupted during step 3" not in text
    assert torch.load(saved, weights_only=True)["step"] == 2
    again = run("train", TINY, "--out", out, "--resume")
    assert again.returncode == 0, again.stderr
    assert "the run already finished at step 2" in again.stderr


def test_a_signal_during_a_training_step_saves_that_step(tmp_path):
    out, log = tmp_path / "run", tmp_path / "log"
    process = start("train", TINY, "--out", out, "--set", "train.max_steps=100000", "--set", "train.log_every=1",
                    "--set", "train.validate_every=0", "--set", "train.valid_decode_examples=0",
                    "--set", "train.checkpoint_every=100000", log=log)
    wait_for(lambda: len(_lines(out, "train")) >= 3, process)
    process.send_signal(signal.SIGINT)
    text = _stopped(process, log, 130)
    saved = sorted((out / "checkpoints").glob("step_*.pt"))
    assert len(saved) == 1
    step = torch.load(saved[0], weights_only=True)["step"]
    assert f"Ctrl-C: interrupted at step {step}; saved {saved[0]}; continue with --resume" in text


def test_a_signal_during_the_final_average_abandons_it_and_resume_writes_it(tmp_path):
    """The average of the last checkpoints is the run's last work: a signal drops it where it is (slowed here by
    the fault tests' injection so that the signal lands inside it), every step being saved already."""
    out, log = tmp_path / "run", tmp_path / "log"
    process = start("train", TINY, "--out", out, "--set", "train.max_steps=4", "--set", "train.checkpoint_every=2",
                    "--set", "train.average_last=2", "--set", "train.validate_every=0",
                    "--set", "train.valid_decode_examples=0", log=log, module=("tests.faults.slowed", "averaging"))
    wait_for(lambda: "averaging (slowed)" in log.read_text(), process)
    process.send_signal(signal.SIGTERM)
    text = _stopped(process, log, 143)  # within the hang guard, not after the 60 s the injection waits
    saved = out / "checkpoints" / "step_00000004.pt"
    assert f"SIGTERM: stopped at step 4, the run's last, while averaging; saved {saved}; --resume writes the " \
           "average" in text
    assert not (out / "average.pt").exists()
    again = run("train", TINY, "--out", out, "--resume")
    assert again.returncode == 0, again.stderr
    assert (out / "average.pt").is_file()
