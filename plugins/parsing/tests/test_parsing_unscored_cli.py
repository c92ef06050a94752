"""`evaluate --task ptb` and `decode --split` keep EVALB's figures, name the error sentences on stderr, and exit 3
unless --allow-errors: a broken parser never scores a silent 100."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from seqxduce.cli import EXIT_UNSCORED, cli
from seqxduce.testing import tiny_recipe

GOLD = "(S (NP-SBJ (PRP He)) (VP (VBD left)) (. .))"
# keep_pos_tags with outputs cut after one token: the repaired trees tag every word XX, the period too, so EVALB
# finds one word more than in the gold tree (whose period it deletes) in every sentence: an error sentence
def recipe(data) -> str:
    return tiny_recipe({"name": "ptb", "data_dir": str(data), "layout": "flat", "train_files": "0001",
                        "valid_files": "0160", "test_files": "0160", "keep_pos_tags": True},
                       {"name": "word", "shared": False},
                       {"max_tokens": 400, "max_steps": 1, "warmup_steps": 1, "validate_every": 100,
                        "checkpoint_every": 1},
                       {"name": "greedy", "max_len_a": 0.0, "max_len_b": 1})


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def ptb_run(tmp_path_factory, ptb_sample):
    where = tmp_path_factory.mktemp("ptb")
    (where / "tiny_ptb.toml").write_text(recipe(ptb_sample))
    result = invoke("train", where / "tiny_ptb.toml", "--out", where / "run")
    assert result.exit_code == 0, result.output
    return where / "run"


def test_decode_split_writes_everything_then_exits_3_naming_the_error_sentences(ptb_run, tmp_path):
    result = invoke("decode", ptb_run, "--split", "valid", "--output", tmp_path / "out.txt")
    assert result.exit_code == EXIT_UNSCORED, result.output
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 5  # the decode is kept
    assert "Number of Error sentence  =      5" in result.stdout  # EVALB's figures, unchanged
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warning == ["warning: 5 error sentences (lines 1, 2, 3, 4, 5): EVALB leaves them out of the figures "
                       "above (its messages say why); pass --allow-errors to accept this (exit 0)"]


def test_decode_split_with_allow_errors_exits_0_and_still_warns(ptb_run, tmp_path):
    result = invoke("decode", ptb_run, "--split", "valid", "--output", tmp_path / "out.txt", "--allow-errors")
    assert result.exit_code == 0, result.output
    assert "warning: 5 error sentences (lines 1, 2, 3, 4, 5)" in result.stderr
    assert "pass --allow-errors" not in result.stderr


def test_evaluate_exits_3_on_error_sentences_unless_allowed(tmp_path):
    (tmp_path / "ref").write_text(f"{GOLD}\n" * 3)
    other_word, unbalanced = "(S (NP (PRP She)) (VP (VBD left)))", "(S (NP (PRP He)) (VP (VBD left)) (. .)"
    (tmp_path / "hyp").write_text(f"{GOLD}\n{other_word}\n{unbalanced}\n")
    result = invoke("evaluate", tmp_path / "hyp", tmp_path / "ref", "--task", "ptb")
    assert result.exit_code == EXIT_UNSCORED
    # EVALB scores the valid sentence alone: F1 100, which is why the warning matters
    assert "Bracketing FMeasure       = 100.00" in result.stdout
    assert "Number of Error sentence  =      2" in result.stdout
    assert "warning: 2 error sentences (lines 2, 3):" in result.stderr
    allowed = invoke("evaluate", tmp_path / "hyp", tmp_path / "ref", "--task", "ptb", "--allow-errors")
    assert allowed.exit_code == 0 and allowed.stdout == result.stdout
    assert "warning: 2 error sentences" in allowed.stderr


def test_evaluate_of_clean_trees_exits_0_without_a_warning(tmp_path):
    (tmp_path / "ref").write_text(f"{GOLD}\n")
    (tmp_path / "hyp").write_text("(S (NP (PRP He)) (VP (VBD left)))\n")  # no period: EVALB deletes it anyway
    result = invoke("evaluate", tmp_path / "hyp", tmp_path / "ref", "--task", "ptb")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr and "Bracketing FMeasure       = 100.00" in result.stdout


def test_evaluate_names_lines_without_a_partner(tmp_path):
    (tmp_path / "ref").write_text(f"{GOLD}\n{GOLD}\n")
    (tmp_path / "hyp").write_text(f"{GOLD}\n")
    result = invoke("evaluate", tmp_path / "hyp", tmp_path / "ref", "--task", "ptb")
    assert result.exit_code == EXIT_UNSCORED
    assert "2 : Number of lines unmatch (too many lines in gold file)" in result.stdout
    assert "warning: 1 line without a partner (1 outputs for 2 references: line 2)" in result.stderr
