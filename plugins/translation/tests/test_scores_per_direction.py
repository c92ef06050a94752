"""Scores per direction (issue #77, item 4): two pairs with tags on tiny data give BLEU and chrF for each
direction and their mean in validation, metrics.jsonl, the progress line and `decode --split test`; early stopping
and best.pt follow a direction `[train] best_group` names; a one-pair recipe scores its split as one set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from test_multilingual import RECIPE, two_pairs, write_data  # noqa: F401 - two_pairs is a fixture

from seqxduce import engine
from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands

FIGURES = ("bleu", "chrf", "bleu_bp", "bleu_lc")


def valid_records(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "valid"]


def cli(*args: object) -> str:
    result = CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def trained(two_pairs: Path) -> tuple[Path, str]:  # noqa: F811 - the fixture imported above
    (two_pairs / "r.toml").write_text(RECIPE.format(tag="source"), encoding="utf-8")
    output = cli("train", two_pairs / "r.toml", "--out", two_pairs / "run")
    return two_pairs / "run", output


def test_validation_logs_each_direction_and_their_mean(trained):
    run, output = trained
    records = valid_records(run)
    assert [r["step"] for r in records] == [3, 6]
    for record in records:
        assert record["primary"] == "valid_bleu"
        for figure in FIGURES:
            each = [record[f"valid_{figure}[{d}]"] for d in ("en-de", "en-fr")]
            assert record[f"valid_{figure}"] == pytest.approx(sum(each) / 2), figure
    # the progress line folds the directions beside the mean, the other figures left to metrics.jsonl
    (line,) = [line for line in output.splitlines() if line.startswith("valid step 6 |")]
    mean, de, fr = (records[-1][k] for k in ("valid_bleu", "valid_bleu[en-de]", "valid_bleu[en-fr]"))
    assert f"valid_bleu {mean:.2f} (en-de {de:.2f}, en-fr {fr:.2f})" in line and "[" not in line
    assert f"valid_bleu={mean:.2f} (en-de {de:.2f}, en-fr {fr:.2f})" in output.splitlines()[-1]  # trained to step
    folded = f"valid_bleu {mean:.2f} (en-de {de:.2f}, en-fr {fr:.2f})"
    assert folded in (run / "README.md").read_text() and folded in cli("info", run)  # the run's README, info


def test_decode_split_test_prints_a_table_per_direction(trained):
    run, _ = trained
    output = cli("decode", run, "--split", "test", "--output", run / "test.hyp")
    lines = output.splitlines()
    header, de, fr, mean = lines[lines.index(next(x for x in lines if x.startswith("direction"))):][:4]
    assert header.split() == ["direction", "BLEU", "chrF", "sentences"]
    assert [row.split()[0] for row in (de, fr, mean)] == ["en-de", "en-fr", "mean"]
    assert [row.split()[-1] for row in (de, fr, mean)] == ["12", "12", "24"]
    bleus = [float(row.split()[1]) for row in (de, fr, mean)]
    assert bleus[2] == pytest.approx((bleus[0] + bleus[1]) / 2, abs=0.011)
    # each direction's sacreBLEU lines with their signatures
    assert "en-de:\n  BLEU|nrefs:1" in output and "en-fr:\n  BLEU|" in output and "  chrF2|" in output
    assert len((run / "test.hyp").read_text().splitlines()) == 24
    result = engine.decode_split(run, "test")[1]  # the Python API's report holds every figure
    assert set(result.metrics) >= {"bleu", "chrf", "bleu[en-de]", "chrf[en-fr]"}


def test_early_stopping_and_best_pt_follow_the_direction_named(two_pairs):  # noqa: F811
    (two_pairs / "r.toml").write_text(RECIPE.format(tag="target"), encoding="utf-8")
    overrides = ["train.best_group=en-fr", "train.validate_every=1", "train.patience=2"]
    engine.train(two_pairs / "r.toml", two_pairs / "run", overrides=overrides)
    records = valid_records(two_pairs / "run")
    watched = [r["valid_bleu[en-fr]"] for r in records]
    best = torch.load(two_pairs / "run" / "best.pt", weights_only=True)
    assert best["metric"] == "valid_bleu[en-fr]" and best["value"] == max(watched)
    assert best["step"] == records[watched.index(max(watched))]["step"]
    # the run stops where en-fr, not the mean, has gone `patience` validations without a better value
    last = max(r["step"] for r in records)
    assert last == 6 or last - best["step"] == 2


def test_an_unknown_direction_is_refused_in_one_line(two_pairs):  # noqa: F811
    (two_pairs / "r.toml").write_text(RECIPE.format(tag="source"), encoding="utf-8")
    with pytest.raises(UserError) as err:
        engine.train(two_pairs / "r.toml", two_pairs / "run", overrides=["train.best_group=en-cs"])
    message = str(err.value)
    assert "[train] best_group = 'en-cs'" in message and "en-de, en-fr" in message and "\n" not in message


def test_a_one_pair_split_is_scored_as_one_set(tmp_path, monkeypatch):
    """One [[task.corpus]] direction, or none: no groups, the figures as they always were."""
    from seqxduce_translation import build_translation_task
    from seqxduce_translation.settings import TranslationSettings

    write_data(tmp_path, {"valid": 5})
    for corpus in ([], [{"src_lang": "en", "tgt_lang": "de"}]):
        task = build_translation_task(TranslationSettings(dataset="files", corpus=corpus))
        assert {ex.group for ex in task.examples("valid", tmp_path)} == {""}
    two = build_translation_task(TranslationSettings(dataset="files", lang_tag="source", corpus=[
        {"src_lang": "en", "tgt_lang": "de"}, {"src_lang": "en", "tgt_lang": "fr"}]))
    assert [ex.group for ex in two.examples("valid", tmp_path)] == ["en-de"] * 5 + ["en-fr"] * 5
    assert two.for_group("en-fr").settings.tgt_lang == "fr" and two.group_name == "direction"
