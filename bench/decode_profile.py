"""Where a search's CPU time goes: torch.profiler's self CPU time per operator over bench/decode_speed.py's
synthetic protocol (the same untrained model, 64 sources of 25 tokens, outputs forced to 30 tokens).

    python bench/decode_profile.py                          # small, beam 4, 1 thread, 2 profiled searches
    python bench/decode_profile.py --size base --beam 1 --threads 2
    python bench/decode_profile.py --quantize int8          # the int8 path of `decode --precision int8`

One unprofiled search warms up, then --searches searches run under the profiler; each operator's self CPU time is
printed with its share of all operators' and its calls, largest first, and the GEMM share (addmm, mm, bmm,
matmul, and the int8 and MKL-packed Linear kernels: the Linear layers, the output projection and the attention
products) on a line of its own. Shares are steadier than times on a
loaded machine; the total is wall time under the profiler, which adds a little per operator.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_speed  # noqa: E402

GEMMS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "quantized::linear_dynamic", "mkl::_mkl_linear")


def profile(size: str, beam: int, searches: int, sources: int, src_len: int, out_len: int,
            quantize: str = "none") -> dict[str, dict]:
    """{operator: {"self_ms", "calls"}} of `searches` searches of the synthetic protocol, after a warm-up one."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    src = decode_speed.synthetic_sources(sources, src_len)
    torch.manual_seed(0)
    model = decode_speed.quantized(decode_speed.build_seqxduce(size, torch.device("cpu")), quantize)
    settings = decode_speed.forced(beam, out_len)
    decode_speed.seqxduce_search(model, src, beam, settings)
    with profiler(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(searches):
            decode_speed.seqxduce_search(model, src, beam, settings)
    return {e.key: {"self_ms": e.self_cpu_time_total / 1000, "calls": e.count} for e in prof.key_averages()}


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", choices=sorted(decode_speed.SIZES))
    parser.add_argument("--beam", type=int, default=4, help="beam size (1: greedy)")
    parser.add_argument("--searches", type=int, default=2, help="searches profiled")
    parser.add_argument("--sources", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=25, help="source length, eos included")
    parser.add_argument("--out-len", type=int, default=30, help="output length, eos included")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--top", type=int, default=12, help="operators printed")
    parser.add_argument("--quantize", default="none", choices=("none", "int8"),
                        help="int8: the model's Linear layers dynamically quantized, as `decode --precision int8`")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ops = profile(args.size, args.beam, args.searches, args.sources, args.src_len, args.out_len, args.quantize)
    total = sum(o["self_ms"] for o in ops.values())
    print(f"{args.size} {args.quantize}, beam {args.beam}, {args.threads} thread(s), {args.searches} searches of "
          f"{args.sources} sources, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M')}: "
          f"{total:.0f} ms self CPU in all")
    for name, o in sorted(ops.items(), key=lambda item: -item[1]["self_ms"])[:args.top]:
        print(f"{name:40s} {o['self_ms']:9.1f} ms {100 * o['self_ms'] / total:5.1f}% {o['calls']:7d} calls")
    gemm = sum(o["self_ms"] for name, o in ops.items() if name in GEMMS)
    print(f"GEMMs ({', '.join(GEMMS)}): {gemm:.0f} ms, {100 * gemm / total:.1f}%")
    return ops


if __name__ == "__main__":
    main()
