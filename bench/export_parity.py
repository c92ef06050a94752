"""Parity of a CTranslate2 export with seqxduce's own decoding: on how many sources the best outputs are equal,
how far the scores of equal outputs are apart, and why the others differ.

    python bench/export_parity.py runs/quickstart --split test [--limit 500] [--set decode.beam=4 ...]

Exports the run into a temporary folder (float32), decodes the split with both engines through the task's
pipeline (seqxduce.decoding.decode and seqxduce.export.ct2_decoding) under greedy search, beam 4 without length
penalty, and the recipe's own [decode], and prints one markdown row each. A differing output is a "tie" when both scores
agree to 1e-3 (equal model scores, order decided by float rounding), else a "search" difference (the two
searches kept different hypotheses, e.g. CTranslate2 stops a source once its best hypothesis has ended, or
GNMT's penalty, which CTranslate2 lacks, is applied to its n-best only).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

SEARCHES = {
    "greedy": ["decode.name=greedy"],
    "beam 4, alpha 0": ["decode.name=beam", "decode.beam=4", "decode.alpha=0"],
    "recipe's [decode]": [],
}
TIE = 1e-3


def compare(run: Path, export: Path, split: str, limit: int | None, overrides: list[str]) -> dict:
    """Decode `split` (its first `limit` examples) with both engines; equal outputs, score gaps, differences."""
    from seqxduce import components
    from seqxduce.decoding import decode as decoding
    from seqxduce.export import ct2_decoding

    ours = decoding.load_run(run, overrides)
    theirs = ct2_decoding.load_export(export, overrides)
    examples = ours.task.examples(split, components.data_dir(ours.recipe))[:limit]
    a = decoding.decode_sources(ours, examples)
    b = ct2_decoding.decode_sources(theirs, examples)
    equal, gap, differ = 0, 0.0, []
    for i, (x, y) in enumerate(zip(a, b)):
        hx, hy = x.nbest[0][1], y.nbest[0][1]
        if hx.tokens == hy.tokens:
            equal += 1
            gap = max(gap, abs(hx.score - hy.score))
        else:
            differ.append({"index": i, "ours": x.nbest[0][0], "theirs": y.nbest[0][0], "our_score": hx.score,
                           "their_score": hy.score, "why": "tie" if abs(hx.score - hy.score) < TIE else "search"})
    return {"sources": len(examples), "equal": equal, "max_score_diff": gap, "differ": differ}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    from seqxduce.export.exporting import export_run

    with tempfile.TemporaryDirectory(prefix="export-parity-") as work:
        export = export_run(args.run, Path(work) / "ct2").directory
        print("| search | sources | equal | differ (tie / search) | max score diff of equal |")
        print("|---|---|---|---|---|")
        for name, overrides in SEARCHES.items():
            found = compare(args.run, export, args.split, args.limit, overrides + args.overrides)
            ties = sum(d["why"] == "tie" for d in found["differ"])
            print(f"| {name} | {found['sources']} | {found['equal']} | {len(found['differ'])} ({ties} / "
                  f"{len(found['differ']) - ties}) | {found['max_score_diff']:.1e} |")
            for d in found["differ"][:3]:
                print(f"  {d}", file=sys.stderr)


if __name__ == "__main__":
    main()
