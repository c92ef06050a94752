"""Parity of the CTranslate2 export with seqxduce's own decoding (bench/export_parity.py): the best outputs are
equal on at least 99% of sources under greedy and beam search, and the scores of equal outputs agree to 1e-3."""

from __future__ import annotations

import pytest

from seqxduce.export.exporting import export_run
from tests.bench_scripts import load_bench

pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install -e '.[ctranslate2]')")

SEARCHES = {
    "greedy": ["decode.name=greedy"],
    "beam 4": ["decode.name=beam", "decode.beam=4", "decode.alpha=0"],
    "beam 3, 2-best": ["decode.name=beam", "decode.beam=3", "decode.alpha=0", "decode.nbest=2"],
}


def check_parity(run, tmp_path, split: str) -> None:
    parity = load_bench("export_parity.py")
    export = export_run(run, tmp_path / "ct2").directory
    for name, overrides in SEARCHES.items():
        found = parity.compare(run, export, split, None, overrides)
        assert found["sources"] > 0
        assert found["equal"] >= 0.99 * found["sources"], (name, found["differ"][:3])
        assert found["max_score_diff"] <= 1e-3, name


def test_a_trained_copy_model_decodes_alike_in_ctranslate2(trained_copy_run, tmp_path):
    """A model that has learned its task (its outputs end by themselves)."""
    check_parity(trained_copy_run, tmp_path, "test")


def test_a_barely_trained_model_decodes_alike_in_ctranslate2(tiny_run, tmp_path):
    """Six steps: outputs run into the length limit, where our search forces eos and CTranslate2 stops."""
    check_parity(tiny_run, tmp_path, "test")
