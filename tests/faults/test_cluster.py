"""torchrun's restarts and several nodes, on one machine: a worker killed under `--max-restarts 1 ... --auto-resume`
and the run ends equal to an uninterrupted one with no second dataset written; two launchers as two nodes (a c10d
rendezvous on 127.0.0.1) train the same parameters as one launcher of two processes, with the cache folder shared
and with one per node."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from seqxduce.corpus import binarized
from tests.fault_tools import HANG_GUARD_S, wait_for
from tests.faults.cluster_tools import equal, free_port, steps, torchrun, train_args, weights


def _datasets(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if binarized.exists(p)) if cache.is_dir() else []


def test_max_restarts_survives_a_killed_worker_and_ends_equal_to_an_uninterrupted_run(tmp_path, two_rank_run):
    out, log, marker, cache = tmp_path / "run", tmp_path / "log", tmp_path / "slow", tmp_path / "cache"
    # rank 1 holds step 4 for 600 s once (its marker), after step 2's checkpoint: the moment of the kill is known
    slow = {"SLOW_MARKER": str(marker), "SLOW_STEP": "4", "SLOW_RANK": "1", "SEQXDUCE_CACHE": str(cache)}
    args = train_args(out, "--set", "train.checkpoint_every=2")
    launcher = torchrun(args, log, slowed=True, max_restarts=1, extra_env=slow)
    wait_for(lambda: Path(f"{marker}.rank1").exists(), launcher)
    assert steps(out) == [2]
    prepared = _datasets(cache)
    os.kill(int(Path(f"{marker}.rank1").read_text()), signal.SIGKILL)  # as an out-of-memory kill does
    assert launcher.wait(timeout=HANG_GUARD_S) == 0, log.read_text()
    text = log.read_text()
    assert "resumed from" in text, text  # the restarted workers continued the run, not started it anew
    assert steps(out)[-1] == 6 and equal(weights(out), weights(two_rank_run))
    assert _datasets(cache) == prepared and len(prepared) == 1  # the restart mapped the dataset, wrote none


@pytest.mark.parametrize("caches", ["shared", "one per node"])
def test_two_launchers_as_two_nodes_train_what_one_launcher_of_two_processes_does(tmp_path, caches, two_rank_run):
    out, port = tmp_path / "run", free_port()
    launchers = []
    for node in (0, 1):
        cache = tmp_path / ("cache" if caches == "shared" else f"cache-node{node}")
        launchers.append(torchrun(train_args(out), tmp_path / f"node{node}.log", nproc=1, nodes=(node, 2),
                                  port=port, extra_env={"SEQXDUCE_CACHE": str(cache)}))
    for node, launcher in enumerate(launchers):
        assert launcher.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / f"node{node}.log").read_text()
    assert equal(weights(out), weights(two_rank_run))
    if caches == "shared":
        assert len(_datasets(tmp_path / "cache")) == 1
    else:
        assert all(len(_datasets(tmp_path / f"cache-node{node}")) == 1 for node in (0, 1))
