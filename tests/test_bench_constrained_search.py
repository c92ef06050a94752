"""bench/constrained_search.py runs end to end on a small trained run and reports its figures: coverage, BLEU with
and without phrases, the speeds and the forbidden word's count. No timing is checked, only that the figures are
there and that every output held its phrases."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from tests.bench_scripts import load_bench


def test_the_benchmark_reports_coverage_bleu_speed_and_the_forbidden_word(trained_copy_run: Path, tmp_path: Path):
    rng = random.Random(0)
    sources = [" ".join(str(rng.randint(0, 9)) for _ in range(rng.randint(2, 6))) for _ in range(30)]
    # references the copy lacks words of, so that every sentence gets phrases
    references = [f"{s} {rng.randint(0, 9)} {rng.randint(0, 9)}" for s in sources]
    (tmp_path / "test.en").write_text("\n".join(sources) + "\n")
    (tmp_path / "test.de").write_text("\n".join(references) + "\n")
    out = tmp_path / "figures.json"
    assert load_bench("constrained_search.py").main(
        [str(trained_copy_run), "--data", str(tmp_path), "--split", "test", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["sentences"] == 30 and figures["constrained_sentences"] > 0
    assert figures["coverage"] == 1.0
    assert figures["outputs_with_forbidden_word"] == 0 < figures["outputs_with_it_unconstrained"]
    for key in ("bleu_free", "bleu_constrained", "free_sentences_per_s", "two_phrases_per_s"):
        assert math.isfinite(figures[key]) and figures[key] >= 0
