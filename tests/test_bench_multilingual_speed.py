"""bench/multilingual_speed.py runs end to end on generated data and a tiny model: both roads (one pair, three
tagged corpora) prepared once, trained in turns, and their tokens/s and ratio reported. No timing is checked, only
that the figures are there."""

from __future__ import annotations

import math

from tests.bench_scripts import load_bench

TINY = ["--tiny", "--tiny-pairs", "200", "--steps", "4", "--window", "2", "--repeats", "1", "--threads", "1",
        "--set", "model.d_model=16", "--set", "model.d_ff=32", "--set", "model.heads=2", "--set", "model.layers=1",
        "--set", "tokenizer.vocab_size=80", "--set", "train.max_tokens=200", "--set", "train.warmup_steps=2"]


def test_both_roads_train_and_their_speeds_and_ratio_are_reported(tmp_path, capsys):
    rows = load_bench("multilingual_speed.py").main([*TINY, "--work", str(tmp_path)])
    assert [row["road"] for row in rows] == ["one pair (en-de)", "3 corpora, tagged"]
    for row in rows:
        assert len(row["runs"]) == 1 and all(math.isfinite(v) and v > 0 for v in row["runs"])
        assert row["command"].startswith("python bench/multilingual_speed.py --tiny")
    assert rows[1]["ratio"] > 0
    printed = capsys.readouterr().out
    assert "ratio to one pair" in printed and "generated (200 pairs a language)" in printed
    # each road's data prepared once, before the timed runs found them
    assert len([p for p in (tmp_path / "cache").glob("prepared-*") if p.is_dir()]) == 2
