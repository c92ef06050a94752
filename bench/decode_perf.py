"""Where each engine's search spends its CPU time, CTranslate2's included: Linux perf samples of seqxduce's and
CTranslate2's searches of bench/decode_speed.py's synthetic protocol, grouped by what the sampled code does.

    python bench/decode_perf.py                                   # small, greedy, 1 thread, both engines
    python bench/decode_perf.py --beam 4 --seconds 10
    python bench/decode_perf.py --size base --quantize int8       # seqxduce int8 against CTranslate2 int8

bench/decode_profile.py (torch.profiler) sees torch's operators only; CTranslate2 runs its whole search in C++,
which only a sampling profiler of the process sees. So each engine warms up (two searches), then searches in a
loop for --seconds while `perf record` samples this process at --frequency; its samples are grouped by symbol
(GROUPS: MKL's GEMM kernels, its GEMV kernel (a one-query attention product is a batched GEMV), the Python
interpreter, torch's dispatch and other code, softmax, top-k, copies, LayerNorm, the kernel's page faults...;
code generated at run time, oneDNN's int8 GEMM kernels and MKL's JIT GEMMs, counts as GEMM)
and each group's share of the samples times the engine's process CPU time per search gives its milliseconds per
search. Both engines go through the same grouping, so a group's two figures compare what each engine spends on
that kind of work; the groups follow the symbols' names, and a kernel whose name says nothing lands in "other".

Needs `perf` (Debian: linux-perf) allowed to sample its own processes (kernel.perf_event_paranoid <= 2);
without it the script says so and exits 2. CTranslate2 is skipped, with a message, when not installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_speed  # noqa: E402

GEMM = "GEMM (Linear layers, attention products)"
# (group, substrings of a symbol): the first group with a substring in the symbol takes the sample; order matters
# ("softmax<" before top-k's "max<", MKL's "sgemv" before "gemm")
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GEMV (one-query attention products)", ("gemv",)),
    ("int8: quantizing activations", ("FindMinMax", "ctranslate2::cpu::quantize", "fbgemm::Quantize")),
    (GEMM, ("gemm", "_mkl_linear", "bmm_out", "scopy_", "mkl_blas", "dnnl::", "brgemm", "linear_dynamic")),
    ("softmax / log-softmax", ("softmax", "Sleef_", "expf", "vsExp")),
    ("top-k / max", ("TopK", "topk", "::max<", "amax", "max_kernel", "reduce")),
    ("LayerNorm", ("layer_norm", "LayerNorm", "RowwiseMoments")),
    ("copies", ("memmove", "memcpy", "memset", "copy_", "_copy", "Copy", "index_select", "gather", "transpose")),
    ("elementwise (add, mul, relu)", ("VectorizedLoop", "vsAdd", "sAdd", "BiasAdd", "add_kernel", "relu")),
    ("malloc / free", ("malloc", "free", "_int_", "unlink_chunk", "Allocator", "allocate")),
)
PYTHON, KERNEL, TORCH, OTHER = ("Python interpreter", "kernel (page faults, scheduling)",
                                "torch dispatch and other torch code", "other")
# "  12.34%  1234  libtorch_cpu.so  [.] symbol" (perf report -n: percent, samples); code made at run time
# (oneDNN's and MKL's JIT kernels) has "[JIT] tid N" for its library
# (matched against the line without its trailing blanks: perf pads every line to the longest symbol's width, and a
# lazy symbol group before "\s*$" rescanned those thousands of blanks at every position)
SAMPLE = re.compile(r"\s*[\d.]+%\s+(\d+)\s+(\[JIT\] tid \d+|\S+)\s+\[(.)\]\s+(.*)")


def group_of(symbol: str, dso: str, kernel: bool = False) -> str:
    """The group (GROUPS, or the interpreter, the kernel, torch, other) of a sampled symbol in library `dso`."""
    if kernel:
        return KERNEL
    if dso.startswith("[JIT]"):  # kernels generated at run time: oneDNN's int8 GEMMs (AMX), MKL's small GEMMs
        return GEMM
    for group, parts in GROUPS:
        if any(part in symbol for part in parts):
            return group
    if "python" in dso:
        return PYTHON
    if "torch" in dso or "c10" in dso:
        return TORCH
    return OTHER


def grouped(report: str) -> Counter:
    """{group: percent of samples} from `perf report -n --no-children --sort dso,symbol --stdio` output.

    From the sample counts, not the printed percentages: those are rounded to 0.01 each, and thousands of small
    entries (int8's run-time kernels) summed up to 105%."""
    counts: Counter = Counter()
    for line in report.splitlines():
        sample = SAMPLE.match(line.rstrip())
        if sample and not line.lstrip().startswith("#"):
            samples, dso, where, symbol = sample.groups()
            counts[group_of(symbol, dso, kernel=where == "k")] += int(samples)
    total = sum(counts.values()) or 1
    return Counter({group: 100 * n / total for group, n in counts.items()})


def perf_usable() -> str:
    """'' when `perf record` can sample this machine's processes, else why not."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: apt install linux-perf)"
    probe = subprocess.run(["perf", "record", "-q", "-o", os.devnull, "--", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"perf record cannot sample here: {probe.stderr.strip()[:200]}"
    return ""


def sampled(search: Callable[[], int], seconds: float, frequency: int, work: Path) -> tuple[Counter, float, int]:
    """(group shares in percent, process CPU seconds per search, searches) of searching in a loop for `seconds`
    while perf samples this process."""
    data = work / "perf.data"
    recorder = subprocess.Popen(["perf", "record", "-q", "-F", str(frequency), "-p", str(os.getpid()),
                                 "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # perf attaches
    searches, cpu_started, started = 0, time.process_time(), time.perf_counter()
    while searches == 0 or time.perf_counter() - started < seconds:
        search()
        searches += 1
    cpu = (time.process_time() - cpu_started) / searches
    recorder.send_signal(signal.SIGINT)
    _, errors = recorder.communicate()
    report = subprocess.run(["perf", "report", "-n", "-i", str(data), "--no-children", "--sort", "dso,symbol",
                             "--stdio", "--percent-limit", "0"], capture_output=True, text=True)
    if report.returncode != 0:
        raise SystemExit(f"perf report failed: {report.stderr.strip()[:300] or errors.decode()[:300]}")
    return grouped(report.stdout), cpu, searches


def searches(args) -> dict[str, Callable[[], int]]:
    """The engines' searches of the protocol: seqxduce (as `decode` prepares it) and CTranslate2 when installed."""
    src = decode_speed.synthetic_sources(args.sources, args.src_len)
    calls: dict[str, Callable[[], int]] = {}
    if "seqxduce" in args.engines:
        torch.manual_seed(0)
        model = decode_speed.quantized(decode_speed.build_seqxduce(args.size, torch.device("cpu")), args.quantize)
        settings = decode_speed.forced(args.beam, args.out_len)
        calls["seqxduce"] = lambda: decode_speed.seqxduce_search(model, src, args.beam, settings)
    if "ctranslate2" in args.engines:
        ct2_args = argparse.Namespace(out_len=args.out_len, quantize=args.quantize, ct2_compute="")
        systems = dict(decode_speed.ct2_systems(args.size, src, ct2_args))
        name = "ct2" if args.quantize == "none" else f"ct2-{args.quantize}"
        if name in systems:
            calls["ctranslate2"] = lambda: systems[name](args.beam)
    return calls


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=["seqxduce", "ctranslate2"],
                        choices=["seqxduce", "ctranslate2"])
    parser.add_argument("--size", default="small", choices=sorted(decode_speed.SIZES))
    parser.add_argument("--beam", type=int, default=1, help="beam size (1: greedy)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of both engines")
    parser.add_argument("--quantize", default="none", choices=("none", "int8"),
                        help="int8: seqxduce as `decode --precision int8`, CTranslate2 with compute_type int8")
    parser.add_argument("--seconds", type=float, default=8.0, help="sampled search time per engine")
    parser.add_argument("--frequency", type=int, default=1999, help="perf samples per second")
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=25, help="source length, eos included")
    parser.add_argument("--out-len", type=int, default=30, help="output length, eos included")
    args = parser.parse_args(argv)
    why = perf_usable()
    if why:
        print(f"bench/decode_perf.py: {why}", file=sys.stderr)
        raise SystemExit(2)
    torch.set_num_threads(args.threads)
    calls = searches(args)
    for search in calls.values():  # warm-up: first-call allocations and packing are not sampled
        search(), search()
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="decode_perf_") as work:
        for name, search in calls.items():
            shares, cpu, count = sampled(search, args.seconds, args.frequency, Path(work))
            figures[name] = {group: share * cpu * 10 for group, share in shares.items()}  # percent x s -> ms
            figures[name]["CPU per search"] = cpu * 1000
            print(f"{name}: {count} searches, {cpu * 1000:.0f} ms process CPU each")
    print(f"{args.size} {args.quantize}, beam {args.beam}, {args.threads} thread(s), {args.sources} sources, "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M')}; ms of CPU per search:")
    names = list(figures)
    order = sorted({g for f in figures.values() for g in f} - {"CPU per search"},
                   key=lambda g: -max(f.get(g, 0.0) for f in figures.values()))
    print(f"{'group':44s}" + "".join(f"{n:>14s}" for n in names))
    for group in order + ["CPU per search"]:
        print(f"{group:44s}" + "".join(f"{figures[n].get(group, 0.0):14.0f}" for n in names))
    return figures


if __name__ == "__main__":
    main()
