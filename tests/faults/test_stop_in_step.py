"""A stop within the grace whatever a step's length: a step made to last 600 s (tests.faults.slowed step) is
signalled once it has written its marker; every process must be gone within the issue's bound with the last
completed step saved, and the same command line then continues to what an uninterrupted run ends with."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.fault_tools import HANG_GUARD_S, start, wait_for
from tests.faults.cluster_tools import (
    STOP_BOUND_S,
    descendants,
    equal,
    gone_within,
    steps,
    torchrun,
    train_args,
    weights,
)


def _lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.strip()]


def _dropped_line(name: str, out: Path) -> str:
    return (f"{name}: interrupted at step 3; saved {out / 'checkpoints' / 'step_00000003.pt'}; continue with "
            "--resume; step 4, under way, was dropped and runs again")


def test_one_process_drops_a_long_step_saves_the_last_done_and_the_same_command_continues(tmp_path):
    out, log, marker = tmp_path / "run", tmp_path / "log", tmp_path / "slow"
    slow = {"SLOW_MARKER": str(marker), "SLOW_STEP": "4"}
    process = start(*train_args(out), log=log, module=("tests.faults.slowed", "step"), extra_env=slow)
    wait_for(lambda: Path(f"{marker}.rank0").exists(), process)  # step 4 is under way, for 600 s
    sent = time.monotonic()
    process.send_signal(signal.SIGUSR1)
    print(f"gone {gone_within([process], [], sent, STOP_BOUND_S):.1f} s after the signal")  # shown with -s
    assert process.returncode == 128 + signal.SIGUSR1, log.read_text()
    assert _lines(log)[-1] == _dropped_line("SIGUSR1", out), log.read_text()
    assert "Traceback" not in log.read_text() and steps(out) == [3]
    again = start(*train_args(out), log=tmp_path / "again", module=("tests.faults.slowed", "step"), extra_env=slow)
    assert again.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "again").read_text()
    whole = start(*train_args(tmp_path / "whole"), log=tmp_path / "whole.log")
    assert whole.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "whole.log").read_text()
    assert equal(weights(out), weights(tmp_path / "whole"))


@pytest.mark.parametrize("slow_rank, target, signum", [
    ("1", "launcher", signal.SIGTERM),  # rank 0 waits inside the gradient all-reduce, where no handler runs
    ("0", "workers", signal.SIGINT),  # signalled directly, rank 0 sleeping in its step, rank 1 waiting for it
])
def test_two_torchrun_ranks_drop_a_long_step_within_the_bound(tmp_path, slow_rank, target, signum, two_rank_run):
    out, log, marker = tmp_path / "run", tmp_path / "log", tmp_path / "slow"
    slow = {"SLOW_MARKER": str(marker), "SLOW_STEP": "4", "SLOW_RANK": slow_rank}
    launcher = torchrun(train_args(out), log, slowed=True, extra_env=slow)
    wait_for(lambda: Path(f"{marker}.rank{slow_rank}").exists(), launcher)
    time.sleep(1.0)  # not a bound: lets the other rank reach the step's all-reduce, the harder case
    workers = descendants(launcher.pid)
    sent = time.monotonic()
    for pid in [launcher.pid] if target == "launcher" else _workers(workers):
        subprocess.run(["kill", f"-{signum}", str(pid)], check=True)
    print(f"gone {gone_within([launcher], workers, sent, STOP_BOUND_S):.1f} s after the signal")  # shown with -s
    text = log.read_text()
    assert _dropped_line(signal_name(signum), out) in text, text
    assert f"{signal_name(signum)}: process 1 of 2 stopped at step 3" in text, text
    assert steps(out) == [3]
    assert len([line for line in text.splitlines() if line.startswith(signal_name(signum))]) == 2  # one a rank
    _no_worker_traceback(text)
    if target != "launcher":
        return
    again = torchrun(train_args(out), tmp_path / "again", slowed=True, extra_env=slow)
    assert again.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "again").read_text()
    assert "resumed from" in (tmp_path / "again").read_text()
    assert equal(weights(out), weights(two_rank_run))


def test_fsdp_ranks_agree_between_micro_batches_and_save_the_last_step_together(tmp_path):
    """Under FSDP the full state is a gather over every process: the stop waits for the micro-batch in hand (held
    8 s here, of a step of 4), then every process drops the step at the same point and they save step 3 together."""
    out, log, marker = tmp_path / "run", tmp_path / "log", tmp_path / "slow"
    fsdp = ["--set", "train.fsdp=true", "--set", "train.update_freq=4", "--set", "train.max_tokens=100"]
    slow = {"SLOW_MARKER": str(marker), "SLOW_STEP": "13", "SLOW_RANK": "all", "SLOW_SECONDS": "8"}
    launcher = torchrun(train_args(out, *fsdp), log, slowed=True, extra_env=slow)
    wait_for(lambda: all(Path(f"{marker}.rank{r}").exists() for r in (0, 1)), launcher)  # step 4's first batch
    workers = descendants(launcher.pid)
    sent = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    print(f"gone {gone_within([launcher], workers, sent, STOP_BOUND_S):.1f} s after the signal")  # shown with -s
    text = log.read_text()
    assert _dropped_line("SIGTERM", out) in text, text
    assert steps(out) == [3]
    _no_worker_traceback(text)
    again = torchrun(train_args(out, *fsdp), tmp_path / "again", slowed=True, extra_env=slow)
    assert again.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "again").read_text()
    assert "resumed from" in (tmp_path / "again").read_text() and steps(out)[-1] == 6


def signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _workers(pids: list[int]) -> list[int]:
    """The worker processes among a launcher's descendants: those running the slowed CLI."""
    found = []
    for pid in pids:
        try:
            if b"tests.faults.slowed" in (Path("/proc") / str(pid) / "cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _no_worker_traceback(text: str) -> None:
    """The launcher's own traceback aside (torchrun ends with one on a signal or a failed worker), none."""
    head, _, launcher = text.partition("Traceback")
    assert "Traceback" not in launcher and "seqxduce/" not in launcher, text
    assert not launcher or "torch/distributed/run.py" in launcher, text
