"""Fault injection: one of two gloo processes hangs (SIGSTOP) or dies (SIGKILL) mid-run. The other stops with
one error line once [train] collective_timeout runs out (at once for a death), and the run resumes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.fault_tools import HANG_GUARD_S, QUIET, REPO, command, env, wait_for
from tests.tiny import TINY_RECIPE as TINY

# the collective timeout is also how far apart the two healthy ranks may drift before the fault (start-up, rank 0
# saving a checkpoint while rank 1 waits in the next step's all-reduce): 15 s, not 5, leaves a loaded machine room
TIMEOUT_S = 15


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_world(out: Path, logs: Path, *args: str) -> list[subprocess.Popen]:
    """Two processes of `seqxduce train` in the environment torchrun gives its workers (no agent to kill the
    survivor: what stops it is its own collective timeout)."""
    port = str(_free_port())
    processes = []
    for rank in (0, 1):
        world = {**env(), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        handle = (logs / f"rank{rank}.log").open("w")
        processes.append(subprocess.Popen(command("train", TINY, "--out", out, *args), stdout=handle,
                                          stderr=subprocess.STDOUT, text=True, env=world, cwd=REPO))
    return processes


def _steps(out: Path) -> list[int]:
    return [int(p.stem.split("_")[1]) for p in sorted((out / "checkpoints").glob("step_*.pt"))]


@pytest.mark.parametrize("fault", ["hang", "death"])
def test_a_lost_process_stops_the_other_with_one_line_and_the_run_resumes(tmp_path, fault):
    out = tmp_path / "run"
    ranks = _start_world(out, tmp_path, "--set", 'train.device="cpu"', "--set", "train.max_steps=100000",
                         "--set", "train.checkpoint_every=2", "--set", f"train.collective_timeout={TIMEOUT_S}",
                         *QUIET)
    try:
        wait_for(lambda: len(_steps(out)) >= 1, ranks[0])
        ranks[1].send_signal(signal.SIGSTOP if fault == "hang" else signal.SIGKILL)
        assert ranks[0].wait(timeout=HANG_GUARD_S) == 1
    finally:
        for process in ranks:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=HANG_GUARD_S)
    log = (tmp_path / "rank0.log").read_text()
    errors = [line for line in log.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in log, log
    assert "process 0 of 2 lost the others during step" in errors[0]
    assert f"collective_timeout = {TIMEOUT_S} s" in errors[0] and "continue with --resume" in errors[0]
    if fault == "hang":
        assert f"Timed out waiting {TIMEOUT_S * 1000}ms" in errors[0]
    if fault == "death":
        return  # resuming is the same as after a hang
    last = _steps(out)[-1]
    resumed = _start_world(out, tmp_path, "--resume", "--set", f"train.max_steps={last + 2}")
    for process in resumed:
        assert process.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "rank0.log").read_text()
    assert f"trained to step {last + 2}" in (tmp_path / "rank0.log").read_text()
