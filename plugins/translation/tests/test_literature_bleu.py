"""The Multi30k literature's BLEU ([task] literature_bleu): lowercased, Moses-tokenized, sacreBLEU tokenize none."""

from pathlib import Path

import pytest
import sacrebleu
from click.testing import CliRunner
from seqxduce_translation import build_translation_task
from seqxduce_translation.metrics import moses_lowercase
from seqxduce_translation.settings import TranslationSettings

from seqxduce.cli import add_plugin_commands
from seqxduce.testing import repository_root

RECIPES = repository_root(Path(__file__)) / "recipes"

# cased, untokenized, as a decoder writes them and as the references come
HYPS = ["Ein Mann's Hund, (braun) läuft.", "Zwei Kinder spielen im Park!", "Eine Frau \"lächelt\"."]
REFS = ["Der Hund eines Mannes (braun) läuft.", "Zwei Kinder spielen im Park.", "Eine Frau lächelt."]
# the same lowercased and tokenized by hand with Moses' rules for German: punctuation split off, brackets and
# quotes apart, and (a language other than en, fr, it) the apostrophe a token of its own
HYPS_TOKENIZED = ["ein mann ' s hund , ( braun ) läuft .", "zwei kinder spielen im park !",
                  "eine frau \" lächelt \" ."]
REFS_TOKENIZED = ["der hund eines mannes ( braun ) läuft .", "zwei kinder spielen im park .",
                  "eine frau lächelt ."]


def invoke(*args) -> object:
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def test_lowercasing_and_moses_tokenization_by_hand():
    assert moses_lowercase(HYPS, "de") == HYPS_TOKENIZED
    assert moses_lowercase(REFS, "de") == REFS_TOKENIZED
    # English keeps "'s" whole, as tokenizer.perl -l en does; "--" and the final period stand apart
    assert moses_lowercase(["A man's dog, (brown) runs -- fast."], "en") == ["a man 's dog , ( brown ) runs -- fast ."]


def test_the_figure_is_sacrebleu_with_tokenize_none_on_the_pretokenized_text():
    report = build_translation_task(TranslationSettings(literature_bleu=True)).score(HYPS, REFS)
    expected = sacrebleu.corpus_bleu(HYPS_TOKENIZED, [REFS_TOKENIZED], tokenize="none").score
    assert report.metrics["bleu_moses_lc"] == pytest.approx(expected, abs=1e-9)
    assert report.metrics["bleu_moses_lc"] != pytest.approx(report.metrics["bleu"])  # another figure
    assert "literature BLEU (lowercased, Moses-tokenized" in report.text and "NOT sacreBLEU" in report.text
    assert report.primary == "bleu"  # the cased sacreBLEU stays the primary figure


def test_off_by_default():
    report = build_translation_task(TranslationSettings()).score(HYPS, REFS)
    assert "bleu_moses_lc" not in report.metrics and "literature" not in report.text


def test_evaluate_reports_it_in_one_command(tmp_path: Path):
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("".join(line + "\n" for line in HYPS), encoding="utf-8")
    ref.write_text("".join(line + "\n" for line in REFS), encoding="utf-8")
    expected = sacrebleu.corpus_bleu(HYPS_TOKENIZED, [REFS_TOKENIZED], tokenize="none").score
    for naming in (["--task", "translation"], ["--recipe", RECIPES / "multi30k_en_de.toml"]):
        result = invoke("evaluate", hyp, ref, *naming, "--set", "task.literature_bleu=true")
        assert result.exit_code == 0, result.output
        line = next(x for x in result.output.splitlines() if x.startswith("literature BLEU"))
        assert line.endswith(f"= {expected:.2f}")
        assert "BLEU|" in result.output  # the sacreBLEU figures with their signatures, as before


def test_evaluate_with_a_task_refuses_other_sections_and_unknown_keys(tmp_path: Path):
    hyp = tmp_path / "hyp.de"
    hyp.write_text("a\n", encoding="utf-8")
    other = invoke("evaluate", hyp, hyp, "--task", "translation", "--set", "train.seed=2")
    assert other.exit_code != 0 and "with --task only task settings apply" in other.output
    unknown = invoke("evaluate", hyp, hyp, "--task", "translation", "--set", "task.literature_blue=true")
    assert unknown.exit_code != 0 and "no setting 'literature_blue'" in unknown.output
    wrong = invoke("evaluate", hyp, hyp, "--task", "translation", "--set", "task.literature_bleu=maybe")
    assert wrong.exit_code != 0 and "--set task.literature_bleu" in wrong.output
    assert "Traceback" not in other.output + unknown.output + wrong.output


def test_the_setting_is_shown_with_its_help():
    shown = invoke("recipe", "show", RECIPES / "multi30k_en_de.toml")
    assert shown.exit_code == 0, shown.output
    assert "literature_bleu = false" in shown.output and "Moses-tokenized" in shown.output
    assert "task.literature_bleu" in invoke("evaluate", "--help").output
