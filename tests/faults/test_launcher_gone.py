"""A torchrun launcher that dies never leaves its workers training: SIGKILLed (the out-of-memory killer, a node
agent) or ended by a signal it does not handle (SIGUSR1: torchrun handles SIGTERM, SIGINT, SIGHUP and SIGQUIT
only), while rank 1 holds step 4 for 600 s. Its workers, in sessions of their own, notice within seconds
(seqxduce.torchrun's watcher), save step 3 as a stop does, and exit; the same command continues the run to what
an uninterrupted one ends with. The launcher runs without OMP_NUM_THREADS, so that its default of 1 for the
workers is torchrun's, not the user's, and the workers divide the node's CPUs instead."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.fault_tools import HANG_GUARD_S, wait_for
from tests.faults.cluster_tools import descendants, equal, gone_within, steps, torchrun, train_args, weights

# the bound: every worker gone this long after its launcher died
GONE_BOUND_S = 30


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGUSR1])
def test_workers_of_a_dead_launcher_save_the_last_step_and_exit(tmp_path, signum, two_rank_run):
    out, log, marker = tmp_path / "run", tmp_path / "log", tmp_path / "slow"
    slow = {"SLOW_MARKER": str(marker), "SLOW_STEP": "4", "SLOW_RANK": "1"}
    launcher = torchrun(train_args(out), log, slowed=True, extra_env=slow, omp=False)
    wait_for(lambda: Path(f"{marker}.rank1").exists(), launcher)  # step 4 under way on rank 1, for 600 s
    workers = descendants(launcher.pid)
    assert len(workers) >= 2
    sent = time.monotonic()
    os.kill(launcher.pid, signum)
    print(f"gone {gone_within([launcher], workers, sent, GONE_BOUND_S):.1f} s after the launcher")  # with -s
    text = log.read_text()
    assert launcher.returncode == -signum if signum == signal.SIGKILL else launcher.returncode != 0
    assert "torchrun's launcher" in text and "ended and left this process running" in text, text
    assert steps(out) == [3], text
    assert "interrupted at step 3" in text, text
    # torchrun's OMP_NUM_THREADS=1 was its default: the workers divided the CPUs and said so
    assert "torchrun's default OMP_NUM_THREADS=1 overridden" in text, text
    again = torchrun(train_args(out), tmp_path / "again", slowed=True, extra_env=slow)
    assert again.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "again").read_text()
    assert "resumed from" in (tmp_path / "again").read_text()
    assert equal(weights(out), weights(two_rank_run))
