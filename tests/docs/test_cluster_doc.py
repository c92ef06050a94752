"""docs/cluster.md's two scripts, run as written on one machine: the SLURM batch script with SLURM's variables, its
`srun` (one node: the task runs here) and `scontrol` (the node list; `requeue` recorded) and its signal
(`--signal=B:USR1@90`: SIGUSR1 to the batch shell) simulated, the signal landing in a step the fault tests' injection
holds for 600 s (the simulated srun runs `tests.faults.slowed step` in place of `seqxduce`); then the requeued job
(the same script again) ends equal to an uninterrupted run, and a job after the end says the run is finished. The
plain torchrun script trains the same run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fault_tools import HANG_GUARD_S, REPO, env, wait_for
from tests.faults.cluster_tools import LAUNCHER_ENV, STOP_BOUND_S, equal, free_port, steps, weights
from tests.tiny import TINY_RECIPE

SRUN = """#!/bin/bash
# one node: the task runs here, the fault tests' slowed step in place of the seqxduce CLI
args=(); prev=""
for a in "$@"; do
  if [ "$a" = seqxduce ] && [ "$prev" = -m ]; then args+=(tests.faults.slowed step); else args+=("$a"); fi
  prev=$a
done
exec "${args[@]}"
"""
SCONTROL = """#!/bin/bash
case "$1" in
  show) echo 127.0.0.1 ;;
  requeue) echo "$2" >> "$REQUEUED" ;;
esac
"""
# the run of tests.faults.cluster_tools.SHORT, as a recipe file (a job script names a recipe, no --set)
TRAIN = {"max_steps": "6", "checkpoint_every": "100", "log_every": "1", "validate_every": "0",
         "valid_decode_examples": "0", "collective_timeout": "60"}


def _scripts() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "cluster.md").read_text(), re.S)


def _recipe(folder: Path) -> Path:
    text = TINY_RECIPE.read_text()
    for key, value in TRAIN.items():
        text, found = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        if not found:
            text = text.replace("[train]\n", f"[train]\n{key} = {value}\n")
    text = text.replace("[task]\n", f'[task]\ndata_dir = "{TINY_RECIPE.parent / "data"}"\n')
    (folder / "recipe.toml").write_text(text)
    return folder / "recipe.toml"


def _job_env(tmp_path: Path, tools: Path) -> dict[str, str]:
    return {**env(), "PATH": f"{tools}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "SLURM_JOB_ID": "4242", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "node001",
            "SLURM_GPUS_ON_NODE": "2", "NPROC": "2", "RDZV_PORT": str(free_port()),
            "RECIPE": str(_recipe(tmp_path)), "RUN": str(tmp_path / "run"), "SEQXDUCE_CACHE": str(tmp_path / "cache"),
            "REQUEUED": str(tmp_path / "requeued"), "SLOW_MARKER": str(tmp_path / "slow"), "SLOW_STEP": "4",
            "SLOW_RANK": "1"}


def _job(script: Path, environment: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(script)], stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=REPO,
                            env=environment)


def test_the_slurm_script_stops_on_slurms_signal_requeues_and_the_requeued_job_ends_the_run(tmp_path, two_rank_run):
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    script = tmp_path / "train.sbatch"
    script.write_text(_scripts()[0])
    environment = _job_env(tmp_path, tools)
    job = _job(script, environment, tmp_path / "job1.log")
    wait_for(lambda: (tmp_path / "slow.rank1").exists(), job)  # step 4 under way, held for 600 s
    sent = time.monotonic()
    job.send_signal(signal.SIGUSR1)  # what `--signal=B:USR1@90` sends, 90 s before the limit
    assert job.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "job1.log").read_text()
    assert time.monotonic() - sent < STOP_BOUND_S
    log = (tmp_path / "job1.log").read_text()
    assert (tmp_path / "requeued").read_text().split() == ["4242"], log
    assert steps(tmp_path / "run") == [3] and "interrupted at step 3" in log, log
    requeued = _job(script, environment, tmp_path / "job2.log")  # SLURM runs the same script again
    assert requeued.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "job2.log").read_text()
    assert "resumed from" in (tmp_path / "job2.log").read_text()
    assert equal(weights(tmp_path / "run"), weights(two_rank_run))
    after = _job(script, environment, tmp_path / "job3.log")  # a job after the end: one line, exit 0
    assert after.wait(timeout=HANG_GUARD_S) == 0
    assert "the run already finished at step 6" in (tmp_path / "job3.log").read_text()
    assert (tmp_path / "requeued").read_text().split() == ["4242"]


def test_the_plain_torchrun_script_prepares_once_and_trains_the_same_run(tmp_path, two_rank_run):
    script = tmp_path / "train.sh"
    script.write_text(_scripts()[1])
    environment = {**_job_env(tmp_path, tmp_path), **LAUNCHER_ENV}
    job = _job(script, environment, tmp_path / "job.log")
    assert job.wait(timeout=HANG_GUARD_S) == 0, (tmp_path / "job.log").read_text()
    assert equal(weights(tmp_path / "run"), weights(two_rank_run))
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]) == 1
