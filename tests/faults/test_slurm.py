"""docs/cluster.md's SLURM job script, as written, on a real SLURM (tests/faults/slurm.py: slurmctld, slurmd and
munged on this machine), ended each way SLURM ends a job: the time limit's warning signal (`--signal=B:USR1@90`),
`scancel` with `--signal=TERM` and without a signal, `scontrol requeue`, and preemption by a job of a higher
priority tier (PreemptMode=REQUEUE). Each time the stop lands in step 4, which rank 1 holds for 600 s (the fault
tests' injection, tests/faults/inject, in the workers torchrun starts), and each time: step 3, the last completed,
is saved at the stop; the job that continues (SLURM's requeue, or the same script submitted again after a cancel)
runs the same command and ends with the parameters of an uninterrupted run, bit for bit.

The job asks for what the script's #SBATCH lines ask, but one node, this machine's CPUs and no GPU (sbatch's
options over the script's lines, as a user tries a script on a small allocation); NPROC=2 processes of the tiny
recipe (tests.faults.cluster_tools.short_recipe_file)."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fault_tools import HANG_GUARD_S, REPO, env
from tests.faults.cluster_tools import equal, short_recipe_file, steps, weights
from tests.faults.slurm import Slurm, rendezvous_port


def job_script() -> str:
    """docs/cluster.md's SLURM batch script, as the page shows it."""
    return re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "cluster.md").read_text(), re.S)[0]


class Job:
    """The script submitted from tmp_path, its log (the script's --open-mode=append: every run of the job in one
    file), and the moment the test waits for."""

    def __init__(self, slurm: Slurm, folder: Path):
        self.slurm, self.folder = slurm, folder
        self.script = folder / "train.sbatch"
        self.script.write_text(job_script())
        self.log = folder / "job.log"
        self.marker = folder / "slow"
        self.env = {**env(), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                    "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "faults" / "inject"), str(REPO)]),
                    "SEQXDUCE_TEST_SLOWED": "step", "SLOW_MARKER": str(self.marker), "SLOW_STEP": "4",
                    "SLOW_RANK": "1", "NPROC": "2", "RDZV_PORT": str(rendezvous_port()),
                    "RECIPE": str(short_recipe_file(folder)), "RUN": str(folder / "run"),
                    "SEQXDUCE_CACHE": str(folder / "cache")}

    def submit(self, *options: str) -> int:
        return self.slurm.sbatch(self.script, "--nodes=1", f"--cpus-per-task={self.slurm.cpus}",
                                 "--gpus-per-node=0", f"--output={self.log}", *options, env=self.env,
                                 cwd=REPO)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_in_step_4(self, job: int) -> None:
        """Until rank 1 holds step 4 (steps 1-3 done, none saved yet: checkpoint_every is 100)."""
        deadline = time.monotonic() + HANG_GUARD_S
        while not Path(f"{self.marker}.rank1").exists():
            state = self.slurm.job(job).get("JobState")
            assert state in ("PENDING", "RUNNING", "CONFIGURING"), f"job {job} {state}: {self.text()}"
            assert time.monotonic() < deadline, f"step 4 never came: {self.text()}"
            time.sleep(0.1)
        assert steps(self.folder / "run") == []

    def stopped_with_step_3_saved(self) -> None:
        """The stop saved the last completed step: nothing completed is lost."""
        text = self.text()
        assert "interrupted at step 3" in text, text
        # srun answers a SIGTERM of its own by forwarding SIGKILL ("forcing job termination"), which reaches the
        # training only where the step is not already ending (docs/cluster.md)
        assert ": Killed" not in text, text
        assert steps(self.folder / "run") == [3], text


def _time_limit(slurm: Slurm, job: int) -> None:
    # the limit brought within the warning's 90 s: slurmctld sends `--signal=B:USR1@90` at its next check (it
    # checks time limits every 30 s); the trap stops the training, requeues the job and ends it
    slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=2")


def _scancel_term(slurm: Slurm, job: int) -> None:
    slurm.run("scancel", "--signal=TERM", str(job))


def _scancel(slurm: Slurm, job: int) -> None:
    slurm.run("scancel", str(job))


def _requeue(slurm: Slurm, job: int) -> None:
    slurm.run("scontrol", "requeue", str(job))


def _preempt(slurm: Slurm, job: int) -> None:
    # a job of the higher tier that needs every CPU of the node: SLURM requeues the training job to run it
    slurm.run("sbatch", "--partition=high", f"--cpus-per-task={slurm.cpus}", f"--output={os.devnull}",
              "--wrap=sleep 1")


# each ending: how it is done, and whether SLURM (or the script) puts the job back in the queue; a job not
# requeued (a cancel) is continued by submitting the same script again
ENDINGS: dict[str, tuple[Callable[[Slurm, int], None], bool]] = {
    "time limit (--signal=B:USR1@90)": (_time_limit, True),
    "scancel --signal=TERM": (_scancel_term, False),
    "scancel": (_scancel, False),
    "scontrol requeue": (_requeue, True),
    "preemption (PreemptMode=REQUEUE)": (_preempt, True),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_the_job_script_saves_the_last_completed_step_and_its_next_run_ends_as_an_uninterrupted_one(
        slurm: Slurm, tmp_path: Path, ending: str, two_rank_run: Path) -> None:
    end, requeued = ENDINGS[ending]
    job = Job(slurm, tmp_path)
    first = job.submit()
    job.wait_in_step_4(first)
    end(slurm, first)
    if requeued:
        fields = slurm.wait_state(first, "PENDING")
        assert int(fields["Restarts"]) == 1
        job.stopped_with_step_3_saved()
        slurm.run("scontrol", "update", f"JobId={first}", "TimeLimit=UNLIMITED")  # the time limit's test
        slurm.start_when_eligible(first)
        last = first
    else:
        slurm.wait_state(first, "COMPLETED", "CANCELLED", "FAILED")
        job.stopped_with_step_3_saved()
        last = job.submit()  # the user submits the same script again
    fields = slurm.wait_state(last, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    text = job.text()
    assert fields["JobState"] == "COMPLETED", f"{fields}\n{text[-4000:]}"
    assert "resumed from" in text and "step_00000003.pt" in text, text
    assert equal(weights(tmp_path / "run"), weights(two_rank_run)), text
