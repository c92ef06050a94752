"""Helpers the benchmarks in bench/ share: where they ran, the machine's measured peak, peak memory, timing, and
the printed table. Standard library and torch only (the benchmarks' optional peers are imported where used).

Peak figures are measured in the benchmark's own process, at its thread count, so that a fraction of peak
compares like with like on a machine whose clock or load changes between runs.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ where it ran


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    """The 1/5/15-minute load average, so a figure from a busy machine says so."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def git_commit() -> str:
    """The checkout's short commit, with '+' when it has uncommitted changes; '?' outside git."""
    try:
        run = lambda *a: subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True,  # noqa: E731
                                        timeout=10)
        commit = run("rev-parse", "--short", "HEAD").stdout.strip()
        dirty = run("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return (commit + ("+" if dirty else "")) if commit else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def environment(device: torch.device) -> dict[str, Any]:
    """Date, machine, device, versions and threads of this run."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "device": f"{device} ({name})",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "commit": git_commit(),
        "load_average": load_average(),
    }


# ------------------------------------------------------------------ measured peak


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_gemm_peak(size: int = 4096, repeats: int = 3) -> float:
    """FLOP/s of the best of `repeats` fp32 (size x size) @ (size x size) products at the current thread count."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    out = torch.empty(size, size)
    torch.mm(a, b, out=out)  # warm-up: first-touch of `out`, BLAS thread start
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def cuda_matmul_peak(device: torch.device, dtype: torch.dtype = torch.bfloat16, size: int = 8192,
                     iters: int = 20) -> float:
    """FLOP/s of (size x size) @ (size x size) products in `dtype` on a CUDA device, timed with CUDA events."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    torch.cuda.synchronize(device)
    return 2 * size**3 * iters / (start.elapsed_time(end) / 1000)


# ------------------------------------------------------------------ memory


def _status_kib(field: str) -> int | None:
    """A 'VmXXX:   123 kB' line of /proc/self/status, in KiB (None where there is none: not Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window (Linux: writing 5 to /proc/self/clear_refs resets VmHWM); False if it cannot,
    and peak_rss_mb() then gives the process's peak since it started."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident memory (MiB) since the last reset_peak_rss(), else since the process started."""
    kib = _status_kib("VmHWM")
    if kib is None:  # ru_maxrss: KiB on Linux, bytes on macOS
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        kib = kib / 1024 if platform.system() == "Darwin" else kib
    return kib / 1024


def rss_mb() -> float:
    """Resident memory now (MiB); the peak where the current figure cannot be read."""
    kib = _status_kib("VmRSS")
    return kib / 1024 if kib is not None else peak_rss_mb()


# ------------------------------------------------------------------ timing


class StepTimer:
    """Wall-clock times of consecutive steps. On CUDA, events recorded between steps time them on the GPU's own
    clock, so timing adds no host-device synchronization inside the window (one synchronize at its end)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.marks: list[Any] = []

    def start(self) -> None:
        synchronize(self.device)
        self.marks = [self._mark()]

    def step(self) -> None:
        """Call after each step."""
        self.marks.append(self._mark())

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def times(self) -> list[float]:
        """Seconds of each step since start()."""
        synchronize(self.device)
        pairs = zip(self.marks, self.marks[1:])
        if self.cuda:
            return [a.elapsed_time(b) / 1000 for a, b in pairs]
        return [b - a for a, b in pairs]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ------------------------------------------------------------------ output


def si(value: float | None, unit: str = "") -> str:
    """1.23G-style figure (None: '-')."""
    if value is None or value != value:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    return f"{value:.3g}{unit}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (pastes into bench/RESULTS.md as it is)."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def write_json(path: str | Path, record: dict[str, Any]) -> None:
    """Write the run's figures as one JSON document ('-' prints it)."""
    text = json.dumps(record, indent=2, sort_keys=True, default=str)
    if str(path) == "-":
        print(text)
    else:
        Path(path).write_text(text + "\n")
