"""Every GPU figure of the speed issue in one command, printed as one Markdown table.

    python bench/gpu_suite.py                          # on a CUDA device: the whole grid (not yet run on a GPU)
    python bench/gpu_suite.py --only train --sizes base --tokens 32768
    python bench/gpu_suite.py --tiny                   # tiny sizes on the CPU (automatic without CUDA): seconds
    python bench/gpu_suite.py --json figures.json      # every figure as JSON as well

A GPU is lent only now and then, so this measures and prepares nothing: run it first, paste its table. Rows:

- train: Trainer.train_step of the Transformer at small / base / big, --tokens target tokens per batch
  (synthetic sentences of --length tokens, shared vocabulary of --vocab), bf16 autocast, [train] compile on and
  off. bench/train_speed.py does the timing: FLOPs of one real step counted by torch.utils.flop_counter.
  FlopCounterMode, MFU = counted FLOPs per second / the peak measured once here (a large bf16 matmul); peak
  memory = torch.cuda.max_memory_allocated of the window.
- decode: base, greedy and beam 4 target tokens/s on --sources synthetic sources forced to 30 tokens
  (bench/decode_speed.py's protocol), native in fp32 and under bf16 autocast, and CTranslate2 float16 when
  ctranslate2 and transformers are installed (a random HF Marian model of the same shape converted by
  CTranslate2's own converter: the engine's speed on the same architecture without a trained run, as
  bench/decode_speed.py does; `seqxduce export` converts a trained run, and bench/export_parity.py compares its
  outputs); peak memory of the call.
- ut: the Universal Transformer at the paper's size (recipes/ut_copy.toml, ut_reverse.toml: d512, ACT up to 8
  depth steps) trained --ut-steps steps in bf16, compile off: target tokens/s, MFU, peak memory, and the
  training loss per target token over the first and the last 10 steps (it must fall).

A row that fails prints its error in the table and the suite goes on. --tiny uses tiny dimensions and a few
steps everywhere (compile off only), so that a test runs the whole path on the CPU in CI and it cannot rot;
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package

import bench_common as bc  # noqa: E402
import decode_speed  # noqa: E402
import torch  # noqa: E402
import train_speed  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TINY_MODEL = {"layers": 1, "d_model": 32, "d_ff": 64, "heads": 2}
HEADERS = ["measurement", "model", "batch", "compile", "target tok/s", "MFU", "peak mem MiB", "notes"]


def model_overrides(size: str) -> list[str]:
    """--set overrides of one train_speed size (or the tiny one)."""
    dims = TINY_MODEL if size == "tiny" else train_speed.SIZES[size]
    return [f"model.{k}={v}" for k, v in {**dims, "encoder_layers": 0, "decoder_layers": 0}.items()]


def measured_peak(device: torch.device, tiny: bool) -> tuple[float, str]:
    """FLOP/s to take MFU against: a bf16 matmul on CUDA, an fp32 GEMM on the CPU, measured in this process."""
    if device.type == "cuda":
        return bc.cuda_matmul_peak(device, torch.bfloat16), "bf16 8192^3 matmul, this process"
    size = 256 if tiny else 4096
    return bc.cpu_gemm_peak(size), f"fp32 {size}^3 GEMM, this process"


def quietly(call, *args, **kwargs):
    """call(...) with its own printing kept out of the suite's output (returned with the result)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = call(*args, **kwargs)
    return result, out.getvalue()


def guarded(rows: list[list[str]], figures: dict, key: str, label: list[str], call) -> None:
    """Run one measurement; a failure becomes a row saying why, and the suite goes on."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - one failed row must not cost the rest of a lent GPU's time
        rows.append(label + ["-", "-", "-", f"failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}"])
        figures[key] = {"error": traceback.format_exc()}


def train_rows(args, device: torch.device, peak: float, rows: list, figures: dict) -> None:
    """MFU of Trainer.train_step per size, tokens per batch and compile setting (bench/train_speed.py)."""
    for size in args.sizes:
        for tokens in args.tokens:
            for compile_mode in args.compile:
                key = f"train/{size}/{tokens}/{compile_mode}"
                label = ["train bf16", size, f"{tokens:,} tok", compile_mode]

                def run(size=size, tokens=tokens, compile_mode=compile_mode, key=key, label=label) -> None:
                    argv = ["--synthetic", "--models", "seqxduce", "--length", str(args.length),
                            "--target-tokens", str(tokens), "--vocab", str(args.vocab),
                            "--batches", str(args.batches), "--steps", str(args.steps), "--warmup",
                            str(args.warmup), "--repeats", "1", "--peak", str(peak),
                            "--set", f"train.device={device.type}", "--set", "train.precision=bf16",
                            "--set", f"train.compile={compile_mode}"]
                    for override in model_overrides(size):
                        argv += ["--set", override]
                    record, _ = quietly(train_speed.main, argv)
                    result = record["results"]["seqxduce"]
                    figures[key] = result
                    rows.append(label + [f"{result['tok_s']:,.0f}", f"{100 * result['fraction_of_peak']:.1f}%",
                                         f"{result['peak_memory_mb']:,.0f}",
                                         f"{result['step_ms']:.1f} ms/step, {bc.si(result['achieved_flops'])}FLOP/s"])

                guarded(rows, figures, key, label, run)


def decode_rows(args, device: torch.device, rows: list, figures: dict) -> None:
    """Base (tiny with --tiny) greedy and beam 4, native and CTranslate2 float16 (bench/decode_speed.py)."""
    size = "tiny" if args.tiny else "base"
    key = f"decode/{size}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "decode.json"
        argv = ["--sizes", size, "--device", device.type, "--no-torch", "--sources", str(args.sources),
                "--out-len", str(args.out_len), "--repeats", str(args.decode_repeats), "--json", str(out),
                "--threads", str(torch.get_num_threads()), "--autocast", "bf16"]
        argv += ["--ct2-compute", "float16"] if device.type == "cuda" else ["--no-ct2"]

        def run() -> None:
            results, printed = quietly(decode_speed.main, argv)
            figures[key] = results
            skipped = [line for line in printed.splitlines() if "CTranslate2 skipped" in line]
            for beam in (1, 4):
                for system, engine in (("seqxduce", "native fp32"), ("seqxduce-bf16", "native bf16 autocast"),
                                       ("ct2-float16", "CTranslate2 fp16")):
                    result = results.get(f"{size}/beam{beam}/{system}")
                    label = [f"decode {'greedy' if beam == 1 else 'beam 4'}", size, f"{args.sources} sources", "off"]
                    if result is None:
                        if system.startswith("ct2"):
                            why = skipped[0].split(": ", 1)[-1] if skipped else "CPU run (CTranslate2 on CUDA only)"
                            rows.append(label + ["-", "-", "-", f"{engine}: skipped ({why})"])
                        continue
                    memory = result.get("cuda_max_allocated_mb", result["peak_rss_mb"])
                    rows.append(label + [f"{result['tok_s']:,.0f}", "-", f"{memory:,.0f}",
                                         f"{engine}, {args.out_len} tokens per output"])

        guarded(rows, figures, key, ["decode", size, f"{args.sources} sources", "off"], run)


def ut_rows(args, device: torch.device, peak: float, rows: list, figures: dict) -> None:
    """A few hundred steps of the Universal Transformer at the paper's size on copy and reverse."""
    for kind in ("copy", "reverse"):
        key = f"ut/{kind}"
        label = [f"UT {kind}, {args.ut_steps} steps", "tiny" if args.tiny else "paper (d512, ACT 8)",
                 "8,192 tok" if not args.tiny else "256 tok", "off"]
        guarded(rows, figures, key, label, lambda kind=kind, key=key, label=label: ut_row(
            args, device, peak, kind, key, label, rows, figures))


def ut_recipe_overrides(args, device: torch.device) -> list[str]:
    keys = [f"train.device={device.type}", "train.precision=bf16", "train.compile=off", "train.validate_every=0",
            "train.valid_decode_examples=0"]
    if args.tiny:
        keys += model_overrides("tiny")[:4] + ["model.act_max_steps=2", "model.max_positions=64",
                                               "task.train_size=200", "task.valid_size=10", "task.test_size=10",
                                               "task.train_max_len=12", "task.test_min_len=12",
                                               "task.test_max_len=12", "train.max_tokens=256"]
        keys = [k for k in keys if not k.startswith("model.layers")]
    return keys


def ut_row(args, device: torch.device, peak: float, kind: str, key: str, label: list[str], rows: list,
           figures: dict) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from seqxduce.corpus.arrays import collate_indices, token_batches
    from seqxduce.recipe import load_recipe
    from seqxduce.training.in_memory import in_memory_run
    from seqxduce.training.trainer import Trainer

    recipe = load_recipe(REPO / "recipes" / f"ut_{kind}.toml", ut_recipe_overrides(args, device))
    with contextlib.redirect_stdout(io.StringIO()):
        torch.manual_seed(0)
        trainer = Trainer(in_memory_run(recipe))
        pairs = trainer.parts.plan.train_pairs
        batches = [collate_indices(pairs, group, trainer.parts.tokenizers.vocab())
                   for group in token_batches(pairs, recipe.train.max_tokens, 1, 1)]
        random.Random(0).shuffle(batches)
        with FlopCounterMode(display=False) as counter:  # one step's FLOPs (an untimed first step)
            first = trainer.train_step([batches[0]])
        first_tokens = float(first["tokens"])
        flops_per_token = counter.get_total_flops() / first_tokens
        trainer.state.step += 1
        bc.synchronize(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        losses, tokens = [], []
        started = time.perf_counter()
        for step in range(args.ut_steps):
            out = trainer.train_step([batches[(step + 1) % len(batches)]])
            trainer.state.step += 1
            losses.append(out["loss"].detach() if torch.is_tensor(out["loss"]) else torch.tensor(out["loss"]))
            tokens.append(out["tokens"])
        bc.synchronize(device)
        seconds = time.perf_counter() - started
    per_token = [float(loss) / float(n) for loss, n in zip(losses, tokens)]
    total = sum(float(n) for n in tokens)
    tok_s = total / seconds
    memory = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else bc.peak_rss_mb()
    window = min(10, len(per_token))
    first_loss, last_loss = statistics.mean(per_token[:window]), statistics.mean(per_token[-window:])
    figures[key] = {"tok_s": tok_s, "seconds": seconds, "steps": args.ut_steps, "flops_per_token": flops_per_token,
                    "mfu": flops_per_token * tok_s / peak, "peak_memory_mb": memory, "loss_per_token": per_token}
    rows.append(label + [f"{tok_s:,.0f}", f"{100 * flops_per_token * tok_s / peak:.1f}%", f"{memory:,.0f}",
                         f"loss/token {first_loss:.3f} (first {window}) -> {last_loss:.3f} (last {window}), "
                         f"{seconds:.0f} s"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny sizes and few steps (automatic without CUDA)")
    p.add_argument("--device", default="", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--only", default="train,decode,ut", help="comma-separated sections: train, decode, ut")
    p.add_argument("--sizes", nargs="+", default=None, help="train sizes (default small base big; tiny: tiny)")
    p.add_argument("--tokens", nargs="+", type=int, default=None,
                   help="target tokens per training batch (default 16384 32768 65536)")
    p.add_argument("--compile", nargs="+", default=None, choices=("on", "off"),
                   help="[train] compile settings to measure (default on off; tiny: off)")
    p.add_argument("--length", type=int, default=0, help="synthetic sentence length, eos included (default 32)")
    p.add_argument("--vocab", type=int, default=0, help="synthetic shared vocabulary (default 32000)")
    p.add_argument("--batches", type=int, default=4, help="distinct training batches, cycled")
    p.add_argument("--steps", type=int, default=0, help="timed training steps per row (default 20)")
    p.add_argument("--warmup", type=int, default=0, help="untimed steps before them (default 5; compile's too)")
    p.add_argument("--sources", type=int, default=0, help="sources per decoding call (default 256)")
    p.add_argument("--out-len", type=int, default=0, help="decoded tokens per output, eos included (default 30)")
    p.add_argument("--decode-repeats", type=int, default=3, help="timed decoding calls (median)")
    p.add_argument("--ut-steps", type=int, default=0, help="Universal Transformer training steps (default 300)")
    p.add_argument("--json", help="also write every figure to this file as JSON")
    args = p.parse_args(argv)
    if not args.device:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.tiny = args.tiny or args.device == "cpu"
    tiny = args.tiny
    defaults = {"sizes": ["tiny"] if tiny else ["small", "base", "big"],
                "tokens": [256, 512] if tiny else [16384, 32768, 65536], "compile": ["off"] if tiny else ["on", "off"],
                "length": 8 if tiny else 32, "vocab": 64 if tiny else 32000, "steps": 2 if tiny else 20,
                "warmup": 1 if tiny else 5, "sources": 2 if tiny else 256, "out_len": 4 if tiny else 30,
                "ut_steps": 3 if tiny else 300}
    for name, value in defaults.items():
        if not getattr(args, name):
            setattr(args, name, value)
    if tiny:
        args.decode_repeats = min(args.decode_repeats, 1)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the sections asked for; print one Markdown table; return every figure."""
    args = parse_args(argv)
    device = torch.device(args.device)
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = sections - {"train", "decode", "ut"}
    if unknown:
        raise SystemExit(f"gpu_suite.py: --only: unknown {', '.join(sorted(unknown))}; use train, decode, ut")
    env = bc.environment(device)
    peak, peak_how = measured_peak(device, args.tiny)
    rows: list[list[str]] = []
    figures: dict[str, Any] = {}
    if "train" in sections:
        train_rows(args, device, peak, rows, figures)
    if "decode" in sections:
        decode_rows(args, device, rows, figures)
    if "ut" in sections:
        ut_rows(args, device, peak, rows, figures)
    print(f"gpu_suite | {env['date']} | {env['device']} | torch {env['torch']} | seqxduce {env['commit']} | "
          f"peak {bc.si(peak, 'FLOP/s')} ({peak_how}){' | TINY: figures mean nothing' if args.tiny else ''}")
    print(f"train: synthetic {args.length}-token sentences, vocabulary {args.vocab:,}, bf16 autocast, "
          f"{args.warmup} warm-up + {args.steps} timed steps; decode: {args.sources} sources, {args.out_len} "
          f"tokens forced, median of {args.decode_repeats}; memory: "
          f"{'torch.cuda.max_memory_allocated' if device.type == 'cuda' else 'peak RSS'}\n")
    print(bc.table(HEADERS, rows), flush=True)
    record = {"environment": env, "peak_flops": peak, "peak_how": peak_how, "tiny": args.tiny, "rows": rows,
              "figures": figures}
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1, default=str) + "\n")
    return record


if __name__ == "__main__":
    main()
