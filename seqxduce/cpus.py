"""How many CPUs this process may use, and torch's thread count fitted to them.

A container or a scheduler's cgroup often grants fewer CPUs than the machine shows (`os.cpu_count()`), and torch
starts a thread per core it sees: threads that spin on an oversubscribed machine cost far more than they give (the
quick start trained 10 times slower with two threads on a loaded 2-core machine than with one, issue #50). The
figure is the smallest of the CPU affinity (taskset, SLURM's --cpus-per-task through cpusets) and the cgroup's CPU
quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`: Docker's --cpus, Kubernetes' CPU limit),
rounded up, at least 1. Torch-free: the decode command reads it before torch loads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from seqxduce.torchrun import omp_default_of_torchrun

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class CpuShare:
    """The CPUs this process may use (`cpus`), what decided it (`source`), and what the machine shows."""

    cpus: int
    visible: int
    source: str  # "cgroup cpu.max", "cgroup cpu.cfs_quota_us", "CPU affinity" or "all CPUs"
    quota: float | None = None  # the cgroup's quota in CPUs, None without one

    def describe(self) -> str:
        """'cgroup cpu.max 2.0 CPUs of 16 visible', 'CPU affinity 4 of 16 visible', 'all 8 CPUs'."""
        if self.quota is not None and self.source.startswith("cgroup"):
            return f"{self.source} {round(self.quota, 2)} CPUs of {self.visible} visible"
        if self.source == "CPU affinity":
            return f"CPU affinity {self.cpus} of {self.visible} visible"
        return f"all {self.visible} CPUs"


def cpu_share(affinity: int | None = None, visible: int | None = None, cgroup_root: Path = CGROUP_ROOT,
              self_cgroup: Path = SELF_CGROUP) -> CpuShare:
    """The CPUs this process may use: min(affinity, the cgroup's quota rounded up), at least 1. affinity and
    visible default to this process's (os.sched_getaffinity, os.cpu_count); the cgroup files are read under
    cgroup_root for the groups self_cgroup (/proc/self/cgroup) names, so that tests can give fake ones."""
    visible = visible or os.cpu_count() or 1
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else visible
    quota, source = cgroup_quota(cgroup_root, self_cgroup)
    if quota is not None and math.ceil(quota) < affinity:
        return CpuShare(max(1, math.ceil(quota)), visible, source, quota)
    if affinity < visible:
        return CpuShare(max(1, affinity), visible, "CPU affinity", quota)
    return CpuShare(max(1, affinity), visible, "all CPUs", quota)


def usable_cpus() -> int:
    """The CPUs this process may use (cpu_share().cpus): decoding's and preparing's worker count, torch's threads."""
    return cpu_share().cpus


def cgroup_quota(cgroup_root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> tuple[float | None, str]:
    """The CPU quota of this process's cgroup in CPUs (quota / period; the smallest along the group's ancestors,
    since a parent's limit binds its children), and the file it came from; (None, "") without one."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None, ""
    v1 = v2 = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = (controllers, path)
    if v1 is not None:  # a hybrid host mounts the cpu controller as v1: its quota is the one that binds
        mount = _v1_mount(cgroup_root, v1[0])
        if mount is not None:
            found = _smallest(mount, v1[1], _v1_quota)
            if found is not None:
                return found, "cgroup cpu.cfs_quota_us"
    if v2 is not None:
        found = _smallest(cgroup_root, v2, _v2_quota)
        if found is not None:
            return found, "cgroup cpu.max"
    return None, ""


def _v1_mount(root: Path, controllers: str) -> Path | None:
    """Where the v1 cpu controller is mounted: cpu, cpu,cpuacct or cpuacct,cpu under the root."""
    for name in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (root / name).is_dir():
            return root / name
    return None


def _smallest(mount: Path, group: str, read) -> float | None:
    """The smallest quota of the group's folder and its ancestors under mount. Inside a container the group's
    path names the host's hierarchy while the mount is the container's own group: then the mount's root is read."""
    folder = mount / group.strip("/")
    if not folder.is_dir():
        folder = mount
    found = []
    while True:
        quota = read(folder)
        if quota is not None:
            found.append(quota)
        if folder == mount or mount not in folder.parents:
            break
        folder = folder.parent
    return min(found) if found else None


def _v2_quota(folder: Path) -> float | None:
    """cgroup v2 cpu.max: 'QUOTA PERIOD' in microseconds, or 'max PERIOD' for no limit."""
    try:
        fields = (folder / "cpu.max").read_text().split()
    except OSError:
        return None
    if not fields or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1]) if len(fields) > 1 else 100_000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(folder: Path) -> float | None:
    """cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us; a quota of -1 is no limit."""
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text().strip())
        period = int((folder / "cpu.cfs_period_us").read_text().strip())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def threads_for(share: CpuShare, environ: Mapping[str, str] | None = None,
                given: tuple[int, str] | None = None, torchrun_default: bool | None = None) -> tuple[int, str]:
    """Torch's intra-op threads for this process and why: a count the user gave (given: (count, the option that
    gave it), e.g. serve's --threads), else OMP_NUM_THREADS, else the usable CPUs divided among torchrun's ranks on
    this node (LOCAL_WORLD_SIZE), at least 1. torchrun_default: whether OMP_NUM_THREADS=1 is torchrun's default
    rather than the user's (None: read from the launcher, seqxduce.torchrun); such a 1 is not obeyed, since torchrun
    sets it for every node whatever its CPUs (8 processes of a 32-CPU task would each get one thread)."""
    environ = os.environ if environ is None else environ
    if given is not None:
        return given
    if torchrun_default is None:
        torchrun_default = omp_default_of_torchrun(environ)
    omp = environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0 and not torchrun_default:
        return int(omp), "OMP_NUM_THREADS"
    ranks = int(environ.get("LOCAL_WORLD_SIZE", "1") or 1) if environ.get("WORLD_SIZE") else 1
    count, why = share.cpus, share.describe()
    if ranks > 1:
        count, why = max(1, share.cpus // ranks), f"{why}, shared by {ranks} ranks on this node"
    if torchrun_default:
        why += "; torchrun's default OMP_NUM_THREADS=1 overridden: export it to choose"
    return count, why


def per_worker_threads(processes: int, environ: Mapping[str, str] | None = None) -> int:
    """Threads of each of `processes` worker processes: OMP_NUM_THREADS when the user set it, else the usable
    CPUs divided among them, at least 1."""
    environ = os.environ if environ is None else environ
    omp = environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    return max(1, usable_cpus() // max(processes, 1))


def fit_threads(given: tuple[int, str] | None = None) -> str:
    """Set torch's intra-op threads to what this process may use (threads_for) and return the line that says how
    many and why, e.g. 'threads: 2 (cgroup cpu.max 2.0 CPUs of 16 visible)'. Called by the commands that own
    their process (train, decode, score, serve), not by the library functions: a program that imports seqxduce
    keeps the threads it set."""
    import torch

    count, why = threads_for(cpu_share(), given=given)
    torch.set_num_threads(count)
    return f"threads: {count} ({why})"
