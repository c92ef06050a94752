"""bench/train_start.py runs end to end on a tiny corpus and model: the dataset of a size is written where
`seqxduce train` finds it prepared, and a training process reports its time to the first step and its memory. No
timing is checked, only that the figures are there."""

from __future__ import annotations

from seqxduce.corpus import binarized
from tests.bench_scripts import load_bench


def test_a_tiny_size_is_written_prepared_and_its_start_reported(tmp_path, capsys):
    bench = load_bench("train_start.py")
    rows = bench.main(["--model", "tiny", "--vocab", "120", "--base-pairs", "300", "--sample", "600",
                       "--max-tokens", "2000", "--update-freq", "1", "--sizes", "2000", "--ranks", "1",
                       "--keep", "--work", str(tmp_path)])
    (row,) = rows
    assert row["pairs"] == 2000 and row["ranks"] == 1
    assert row["first_step_s"] > 0 and row["peak_rss"][0] > 0 and row["anonymous"][0] > 0
    assert row["command"].startswith("python bench/train_start.py --worker")
    # the dataset train found is the one written: 2000 pairs, in the folder `prepare` would have made
    (folder,) = (tmp_path / "2000" / "cache").glob("prepared-*")
    assert binarized.read_meta(folder)["pairs"] == 2000
    assert "| 2,000 | 1 |" in capsys.readouterr().out
