"""Decoding speed of a distilled student beside its teacher: sentences/s with each run's own search (beam 4 in the
Multi30k recipes), in this one process, on the same sources (a split's, test by default), through seqxduce's engine
and CTranslate2's (an ensemble through seqxduce's alone: CTranslate2 decodes one model). The systems decode in
turns, one call each per round, so that a change of the machine's load hits them all alike; each figure is the
median of --repeats rounds, after one warm-up call each, and the ratios are read within a round.

    python bench/distill_speed.py --teacher runs/m30k --student runs/m30k_student --split test --repeats 3

Systems: the teacher run as it decodes (the ensemble of its members), the teacher's first member alone
(`--set train.members=1`), and the student; each with seqxduce's engine, and the member and the student with
CTranslate2 (exported on the fly, float32). The model load is not timed.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import cpu_name, git_commit, load_average  # noqa: E402

from seqxduce.decoding.decode import split_examples  # noqa: E402
from seqxduce.decoding.jobs import RunSpec  # noqa: E402
from seqxduce.decoding.options import decode_precision  # noqa: E402
from seqxduce.export.engine_choice import engine_named  # noqa: E402


def systems(teacher: str, student: str, ct2: bool) -> list[tuple[str, str, RunSpec]]:
    """(name, engine, what it loads) of each system measured; with ct2, CTranslate2's too (each exported on the fly:
    `train.members=1` exports the teacher's first member, as seqxduce's engine decodes it alone)."""
    member = RunSpec(teacher, ("train.members=1",))
    found = [("teacher ensemble", "seqxduce", RunSpec(teacher)), ("teacher member 1", "seqxduce", member),
             ("student", "seqxduce", RunSpec(student))]
    if ct2:
        found += [("teacher member 1", "ctranslate2", member), ("student", "ctranslate2", RunSpec(student))]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", required=True, help="the teacher's run directory")
    parser.add_argument("--student", required=True, help="the student's run directory")
    parser.add_argument("--split", default="test", help="whose sources are decoded (the student's task's split)")
    parser.add_argument("--sentences", type=int, default=1000, help="the first N sources of the split")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (the median is reported)")
    parser.add_argument("--no-ct2", action="store_true", help="leave out CTranslate2")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        measured = systems(args.teacher, args.student, not args.no_ct2)
        loaded = []
        for _name, engine_name, spec in measured:
            engine = engine_named(engine_name)
            loaded.append((engine, stack.enter_context(engine.open(spec))))
        run = loaded[2][1]  # the student as seqxduce loads it: its task and split
        sources = [ex.source for ex in split_examples(run.task, run.recipe, args.split)][: args.sentences]
        for engine, model in loaded:  # warm-up: the first call allocates what later ones reuse
            engine.decode(model, sources[:32])
        seconds: list[list[float]] = [[] for _ in measured]
        for _ in range(args.repeats):
            for k, (engine, model) in enumerate(loaded):
                start = time.perf_counter()
                engine.decode(model, sources)
                seconds[k].append(time.perf_counter() - start)

    print(f"# {len(sources)} sources of {args.split}; {torch.get_num_threads()} torch threads; commit "
          f"{git_commit()}; {cpu_name()}; load {load_average()}; median of {args.repeats} rounds")
    print("| system | engine | computes in | sentences/s | x the ensemble (seqxduce) | x one member (seqxduce) |")
    print("|---|---|---|---|---|---|")
    for (name, engine_name, _), (_, model), times in zip(measured, loaded, seconds):
        median = statistics.median(times)
        # seqxduce's engine decodes in the run's [decode] precision (recipe: its [train] precision, bf16 autocast
        # for the Multi30k recipes); the CTranslate2 export is float32
        computes = decode_precision(model.recipe) if engine_name == "seqxduce" else "float32"
        print(f"| {name} | {engine_name} | {computes} | {len(sources) / median:.1f} | "
              f"{within_rounds(seconds[0], times):.2f} | {within_rounds(seconds[1], times):.2f} |")


def within_rounds(base: list[float], times: list[float]) -> float:
    """How many times faster than `base` a system decodes: the median over rounds of the ratio read within each
    round, so that a change of the machine's load between rounds cancels."""
    return statistics.median(b / t for b, t in zip(base, times))


if __name__ == "__main__":
    main()
