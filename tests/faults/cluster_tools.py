"""Tools of the cluster tests: torchrun launchers (one, or two as two nodes on one machine) running `seqxduce
train` (or the fault tests' slowed stretch of it), the processes under a launcher, and a run's final weights."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.fault_tools import HANG_GUARD_S, QUIET, REPO, env
from tests.tiny import TINY_RECIPE as TINY

# a run of a few steps, saved only at its end or by a stop (so that the checkpoint a stop leaves names its step)
SHORT = (*QUIET, "--set", "train.max_steps=6", "--set", "train.checkpoint_every=100", "--set", "train.log_every=1",
         "--set", 'train.device="cpu"', "--set", "train.collective_timeout=60")
STOP_BOUND_S = 20  # the bound: every process gone, the last step saved, this long after the signal
# torchrun's restarts need no setting of the launcher's (seqxduce.torchrun): the launchers here run without
# TORCH_DISABLE_SHARE_RDZV_TCP_STORE, whatever the environment the tests run in holds
UNSET = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE",)

# SHORT's [train] settings, written into a recipe file by short_recipe_file
TRAIN = {"max_steps": "6", "checkpoint_every": "100", "log_every": "1", "validate_every": "0",
         "valid_decode_examples": "0", "collective_timeout": "60"}


def short_recipe_file(folder: Path) -> Path:
    """SHORT as a recipe file in folder (a job script names a recipe and no --set)."""
    text = TINY.read_text()
    for key, value in TRAIN.items():
        text, found = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        if not found:
            text = text.replace("[train]\n", f"[train]\n{key} = {value}\n")
    text = text.replace("[task]\n", f'[task]\ndata_dir = "{TINY.parent / "data"}"\n')
    (folder / "recipe.toml").write_text(text)
    return folder / "recipe.toml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train_args(out: Path, *extra: str) -> list[str]:
    return ["train", str(TINY), "--out", str(out), "--auto-resume", *SHORT, *extra]


def torchrun(args: list[str], log: Path, nproc: int = 2, nodes: tuple[int, int] | None = None, port: int = 0,
             slowed: bool = False, max_restarts: int = 0, extra_env: dict[str, str] | None = None,
             omp: bool = True) -> subprocess.Popen:
    """A torchrun launcher of nproc workers running `seqxduce ARGS` (or `tests.faults.slowed step ARGS`); nodes =
    (node_rank, nnodes) makes it one of several launchers meeting at a c10d rendezvous on 127.0.0.1:port; without
    omp the launcher's environment lacks OMP_NUM_THREADS (torchrun then sets its default for the workers)."""
    if nodes is None:
        where = ["--standalone"]
    else:
        where = ["--nnodes", str(nodes[1]), "--node-rank", str(nodes[0]), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "seqxduce-test"]
    module = ["tests.faults.slowed", "step"] if slowed else ["seqxduce"]
    command = [sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(nproc),
               "--max-restarts", str(max_restarts), "--monitor-interval", "0.1", "-m", *module, *args]
    handle = log.open("w")
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env=launcher_env(extra_env, omp))


def launcher_env(extra: dict[str, str] | None = None, omp: bool = True) -> dict[str, str]:
    """A launcher's environment: the CLI's (env()), without the settings of UNSET (and without OMP_NUM_THREADS
    unless omp: torchrun then sets its default of 1 for the workers), with extra added."""
    base = {k: v for k, v in env().items() if k not in UNSET and (omp or k != "OMP_NUM_THREADS")}
    return {**base, **(extra or {})}


def descendants(pid: int) -> list[int]:
    """The processes below pid (its workers), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone_within(processes: list[subprocess.Popen], pids: list[int], since: float, bound: float) -> float:
    """Seconds from `since` until every process (launchers, and the pids below them) has ended; fails past bound
    (the processes are then killed)."""
    while time.monotonic() - since < bound:
        for process in processes:
            process.poll()
        if all(p.returncode is not None for p in processes) and not any(alive(pid) for pid in pids):
            return time.monotonic() - since
        time.sleep(0.05)
    for pid in pids + [p.pid for p in processes]:
        if alive(pid):
            os.kill(pid, 9)
    raise AssertionError(f"processes still running {bound} s after the signal")


def weights(out: Path, step: int = 6) -> dict[str, torch.Tensor]:
    return torch.load(out / "checkpoints" / f"step_{step:08d}.pt", weights_only=True)["model"]


def steps(out: Path) -> list[int]:
    return [int(p.stem.split("_")[1]) for p in sorted((out / "checkpoints").glob("step_*.pt"))]


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory) -> Path:
    """An uninterrupted run of two torchrun ranks (SHORT), to compare with."""
    folder = tmp_path_factory.mktemp("two-ranks")
    launcher = torchrun(train_args(folder / "run"), folder / "log")
    assert launcher.wait(timeout=HANG_GUARD_S) == 0, (folder / "log").read_text()
    return folder / "run"
