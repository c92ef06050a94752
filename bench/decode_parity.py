"""Parity of seqxduce's fast decoding path with a float64 reference of the same search (issue #40).

    python bench/decode_parity.py runs/quickstart --split test
    python bench/decode_parity.py runs/m30k --split test --precision int8 --beam 4 [--set decode.alpha=1.0 ...]

The run decodes the split as `seqxduce decode` does (its decoder and beam, the fast path: logits ranked within a
row, one-query attention, the first step once per source; in fp32, or --precision bf16 / int8), and again with
the same search over the same model held in float64 (its weights and every activation in double precision; the
search itself still ranks float32 scores, as it always does). Printed, one markdown row: how many best outputs
are equal, the largest score difference of an equal output, and the task's metric (BLEU, accuracy, ...) of both.
A differing output is a "tie" when both scores agree to 1e-3 (an order decided by rounding), else "search".
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from pathlib import Path

TIE = 1e-3


def compare(run: Path, split: str, limit: int | None = None, overrides: list[str] | None = None,
            precision: str = "fp32", beam: int | None = None) -> dict:
    """Decode `split` (its first `limit` examples) with the fast path and with the float64 reference."""
    from seqxduce import components
    from seqxduce.decoding import decode as decoding
    from seqxduce.decoding.changes import flag_changes

    overrides = overrides or []
    fast = decoding.load_run(run, overrides, changes=flag_changes(precision=precision, beam=beam))
    exact = decoding.load_run(run, overrides, changes=flag_changes(precision="fp32", beam=beam))
    reference = dataclasses.replace(exact, model=copy.deepcopy(exact.model).double())
    examples = fast.task.examples(split, components.data_dir(fast.recipe))[:limit]
    a = decoding.decode_sources(fast, examples)
    b = decoding.decode_sources(reference, examples)
    equal, gap, differ = 0, 0.0, []
    for i, (x, y) in enumerate(zip(a, b)):
        hx, hy = x.nbest[0][1], y.nbest[0][1]
        if hx.tokens == hy.tokens:
            equal += 1
            gap = max(gap, abs(hx.score - hy.score))
        else:
            differ.append({"index": i, "fast": x.nbest[0][0], "reference": y.nbest[0][0], "fast_score": hx.score,
                           "reference_score": hy.score,
                           "why": "tie" if abs(hx.score - hy.score) < TIE else "search"})
    metric = {"fast": decoding.score_outputs(fast.task, a, examples),
              "reference": decoding.score_outputs(fast.task, b, examples)}
    return {"sources": len(examples), "equal": equal, "max_score_diff": gap, "differ": differ,
            "precision": precision, "metric": {k: {"primary": r.primary, **r.metrics} for k, r in metric.items()}}


def row(found: dict) -> str:
    """One markdown row: precision, equal outputs, largest score difference, the metric of both."""
    primary = found["metric"]["fast"]["primary"]
    fast, reference = found["metric"]["fast"][primary], found["metric"]["reference"][primary]
    ties = sum(d["why"] == "tie" for d in found["differ"])
    return (f"| {found['precision']} | {found['equal']}/{found['sources']} "
            f"({len(found['differ'])} differ, {ties} of them ties) | {found['max_score_diff']:.2g} | "
            f"{primary} {fast:.4f} / {reference:.4f} |")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "int8"),
                        help="what the fast path computes in (the reference is always float64)")
    parser.add_argument("--beam", type=int, help="beam size (default the recipe's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", help="also write every figure and differing output here")
    args = parser.parse_args(argv)
    found = compare(args.run, args.split, args.limit, args.overrides, args.precision, args.beam)
    print("| fast path | equal best outputs | largest score difference (equal outputs) | metric fast / float64 |")
    print("|---|---|---|---|")
    print(row(found))
    for d in found["differ"][:10]:
        print(f"  #{d['index']} ({d['why']}): fast {d['fast']!r} ({d['fast_score']:.6g}) / "
              f"float64 {d['reference']!r} ({d['reference_score']:.6g})")
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1, default=str))
    return found


if __name__ == "__main__":
    main()
