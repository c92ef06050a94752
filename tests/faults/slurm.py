"""A real SLURM on this machine for the cluster tests: munged, slurmctld and slurmd started as root without systemd
(proctrack/linuxproc, task/none, one node of this machine's CPUs, JobRequeue=1; two partitions, `low` the default
and `high` of a higher priority tier, so that a job in `high` preempts one in `low` with PreemptMode=REQUEUE), all
in a folder of the test's own, on ports of its own. Where it cannot start (Debian's slurm-wlm and munge not
installed, not root), the tests that need it skip, saying why; .ci/run installs both."""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fault_tools import HANG_GUARD_S

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "scancel", "squeue", "sinfo")
# a guard against a daemon that never comes up, not a measure: a node was idle within seconds here
START_GUARD_S = 60

CONF = """\
ClusterName=seqxduce-tests
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: how long a node refuses a killed job's credential, and so how long a requeued job waits before it
# may start again (SLURM's default 120 s; a requeued job started sooner is killed, 'Job credential revoked')
AuthInfo=socket={folder}/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobRequeue=1
ReturnToService=2
# SLURM's defaults, written out because the tests rely on them: 30 s between a job's SIGTERM and its SIGKILL
KillWait=30
MinJobAge=600
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=low Nodes={host} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes={host} MaxTime=INFINITE State=UP PriorityTier=10
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rendezvous_port() -> int:
    """A free port below the kernel's ephemeral range, as torchrun's 29500 is: srun, torchrun and gloo bind
    ephemeral ports of their own while a job starts, and one of them may take a port that was free when the test
    chose it (a requeued job's srun listened on the rendezvous port the test had given the job)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def why_not() -> str | None:
    """Why a SLURM cannot start here, or None."""
    missing = [name for name in DAEMONS + CLIENTS if shutil.which(name) is None
               and not Path(f"/usr/sbin/{name}").exists()]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test SLURM's daemons run as root, and the tests do not"
    return None


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class Slurm:
    """A running test cluster: its configuration, and the commands of its clients."""

    folder: Path
    conf: Path
    cpus: int

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> str:
        done = subprocess.run(list(args), capture_output=True, text=True, env=self.env(), timeout=HANG_GUARD_S)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, script: Path, *options: str, env: dict[str, str], cwd: Path) -> int:
        """Submit script (its #SBATCH lines, then options over them) with env as the job's environment."""
        done = subprocess.run(["sbatch", "--parsable", *options, str(script)], capture_output=True, text=True,
                              env=self.env(env), cwd=cwd, timeout=HANG_GUARD_S)
        if done.returncode != 0:
            raise AssertionError(f"sbatch failed: {done.stderr.strip()}")
        return int(done.stdout.strip().split(";")[0])

    def job(self, job: int) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...)."""
        text = self.run("scontrol", "show", "job", "-o", str(job))
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_state(self, job: int, *states: str, guard: float = HANG_GUARD_S) -> dict[str, str]:
        """Poll until the job is in one of states; fail past the guard."""
        deadline = time.monotonic() + guard
        while True:
            fields = self.job(job)
            if fields.get("JobState") in states:
                return fields
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job} is {fields.get('JobState')}, not {' or '.join(states)}, after "
                                     f"{guard} s: {fields}")
            time.sleep(0.2)

    def start_when_eligible(self, job: int) -> None:
        """A requeued job may start once its node has forgotten the killed run's credential (cred_expire): SLURM
        sets its EligibleTime so. Once that time has come, the job is scheduled at once rather than at the
        scheduler's next periodic pass."""
        eligible = self.wait_state(job, "PENDING").get("EligibleTime", "")
        while True:
            now = self.run("date", "+%Y-%m-%dT%H:%M:%S").strip()
            if not eligible or eligible in ("Unknown", "None") or now > eligible:
                break
            time.sleep(0.5)
        done = subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True,
                              text=True, env=self.env(), timeout=HANG_GUARD_S)
        # the scheduler may have started it in the meantime: then there is nothing to hurry
        if done.returncode != 0 and self.job(job).get("JobState") == "PENDING":
            raise AssertionError(f"scontrol update JobId={job} StartTime=now failed: {done.stderr.strip()}")

    def idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env(),
                              timeout=HANG_GUARD_S)
        return done.returncode == 0 and done.stdout.strip() == "idle"


def _write_conf(folder: Path) -> Path:
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    conf = folder / "slurm.conf"
    conf.write_text(CONF.format(host=socket.gethostname(), ctld_port=_free_port(), slurmd_port=_free_port(),
                                folder=folder, cpus=os.cpu_count() or 1))
    return conf


def _start(folder: Path, conf: Path) -> list[subprocess.Popen]:
    logs = (folder / "daemons.log").open("a")
    munged = subprocess.Popen([_daemon("munged"), "--foreground", "--force", f"--socket={folder}/munge.socket",
                               f"--key-file={folder}/munge.key", f"--pid-file={folder}/munged.pid",
                               f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed"],
                              stdout=logs, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_GUARD_S
    while not (folder / "munge.socket").exists():
        if munged.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"munged did not start: {(folder / 'daemons.log').read_text()[-2000:]}")
        time.sleep(0.1)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = [munged]
    for name in ("slurmctld", "slurmd"):
        daemons.append(subprocess.Popen([_daemon(name), "-D", "-f", str(conf)], stdout=logs,
                                        stderr=subprocess.STDOUT, env=env))
    return daemons


def _stop(slurm: Slurm | None, daemons: list[subprocess.Popen]) -> None:
    if slurm is not None:
        subprocess.run(["scancel", "--user=root"], env=slurm.env(), capture_output=True, timeout=HANG_GUARD_S)
    for daemon in reversed(daemons):
        daemon.terminate()
    for daemon in reversed(daemons):
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[Slurm]:
    """A SLURM of one node, started for the module's tests and stopped after them; a skip, saying why, where it
    cannot start."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm")
    conf = _write_conf(folder)
    daemons: list[subprocess.Popen] = []
    cluster = None
    try:
        daemons = _start(folder, conf)
        cluster = Slurm(folder, conf, os.cpu_count() or 1)
        deadline = time.monotonic() + START_GUARD_S
        while not cluster.idle():
            if any(d.poll() is not None for d in daemons) or time.monotonic() > deadline:
                logs = "".join(p.read_text()[-1500:] for p in sorted(folder.glob("*.log")))
                pytest.skip(f"the test SLURM did not come up (no idle node within {START_GUARD_S} s): {logs}")
            time.sleep(0.2)
        yield cluster
    finally:
        _stop(cluster, daemons)
