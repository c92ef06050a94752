"""The `ptb` task: examples from the sample, postprocessing with repair counts, scoring, files, CLI, recipes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from seqxduce_parsing.settings import PtbSettings
from seqxduce_parsing.task import PLACEHOLDER_NOTE, PtbTask

from seqxduce import components
from seqxduce.api import UserError
from seqxduce.cli import cli
from seqxduce.plugins import registry
from seqxduce.recipe import load_recipe

SHARED = Path(__file__).resolve().parents[2] / "shared"
SAMPLE = SHARED / "data" / "ptb_sample"
REFERENCE = SHARED / "evalb_reference"
RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture(scope="module")
def valid_examples():
    return PtbTask(PtbSettings()).examples("valid", SAMPLE)


def test_examples_of_the_sample(valid_examples):
    assert len(valid_examples) == 273
    first = valid_examples[0]
    assert first.source.split()[:4] == ["Savin", "Corp.", "reported", "a"]
    assert first.target.startswith("(S (NP XX XX )NP (VP XX (NP (NP XX XX XX XX )NP (PP XX ")
    assert first.target.endswith(")VP XX )S")
    # the reference is the gold tree as EVALB takes it: function tags and empty elements kept, one line
    assert first.reference == (REFERENCE / "gold.mrg").read_text().splitlines()[0]


def test_keep_pos_tags_puts_the_tags_in_the_target():
    task = PtbTask(PtbSettings(keep_pos_tags=True, valid_files="0160"))
    target = task.examples("valid", SAMPLE)[0].target
    assert target.startswith("(S (NP NNP NNP )NP (VP VBD (NP (NP DT NN JJ NN )NP (PP IN ")
    assert target.endswith(". )S")


@pytest.mark.parametrize("settings", [dict(keep_pos_tags=True, words_in_target="after_leaf"),
                                      dict(words_in_target="as_leaf")])
def test_targets_with_words_score_100_and_carry_the_source_words(settings):
    task = PtbTask(PtbSettings(valid_files="0160", **settings))
    examples = task.examples("valid", SAMPLE)
    first = examples[0]
    after_leaf = settings["words_in_target"] == "after_leaf"
    expected = "(S (NP NNP Savin NNP Corp. )NP" if after_leaf else "(S (NP Savin Corp. )NP"
    assert first.target.startswith(expected)
    hyps = [task.postprocess(ex.target, ex.source) for ex in examples]
    report = task.score(hyps, [ex.ref for ex in examples])
    assert report.metrics["f1"] == 100.0 and report.metrics["repairs"] == 0


def test_word_leaves_with_pos_tags_is_a_user_error():
    with pytest.raises(UserError, match=r"\[task\] words_in_target 'as_leaf'.*after_leaf"):
        PtbTask(PtbSettings(keep_pos_tags=True, words_in_target="as_leaf"))


def test_train_split_size():
    assert len(PtbTask(PtbSettings()).examples("train", SAMPLE)) == 3396


def test_gold_sequences_score_100_with_no_repairs(valid_examples):
    task = PtbTask(PtbSettings())
    hyps = [task.postprocess(ex.target, ex.source) for ex in valid_examples]
    report = task.score(hyps, [ex.ref for ex in valid_examples], [ex.source for ex in valid_examples])
    assert report.primary == "f1"
    assert report.metrics["f1"] == report.metrics["f1_len40"] == 100.0
    assert (report.metrics["repaired"], report.metrics["repairs"]) == (0, 0)
    assert report.metrics["gold_tags_reattached"] == 1.0
    assert PLACEHOLDER_NOTE in report.text
    assert report.text.startswith("  Sent.                        Matched  Bracket   Cross        Correct Tag\n")


def test_collapsed_unary_chains_are_expanded_before_scoring():
    task = PtbTask(PtbSettings(collapse_unary=True, valid_files="0160-0163"))
    examples = task.examples("valid", SAMPLE)
    assert any("+" in tok for ex in examples for tok in ex.target.split())
    hyps = [task.postprocess(ex.target, ex.source) for ex in examples]
    assert task.score(hyps, [ex.ref for ex in examples]).metrics["f1"] == 100.0


def test_repairs_are_counted_per_output_and_reset_after_scoring():
    task = PtbTask(PtbSettings())
    ref = "(S (NP-SBJ (PRP He)) (VP (VBD left)) (. .))"
    good = task.postprocess("(S (NP XX )NP (VP XX )VP XX )S", "He left .")
    broken = task.postprocess("(S (NP XX )NP (VP XX XX", "He left .")  # VP and S left open
    assert good == "(S (NP (XX He)) (VP (XX left)) (XX .))"
    assert broken == "(S (NP (XX He)) (VP (XX left) (XX .)))"
    report = task.score([good, broken], [ref, ref])
    assert (report.metrics["repaired"], report.metrics["repairs"]) == (1, 2)
    assert "Repaired outputs: 1 of 2 decoded sequences" in report.text
    assert report.metrics["recall"] == pytest.approx(100.0)  # the period is deleted, so VP still matches
    assert "repaired" not in task.score([good], [ref]).metrics


def test_predicted_tags_are_used_and_scored():
    task = PtbTask(PtbSettings(keep_pos_tags=True))
    ref = "(S (NP-SBJ (PRP He)) (VP (VBD left)) (. .))"
    hyp = task.postprocess("(S (NP NN )NP (VP VBD )VP . )S", "He left .")
    report = task.score([hyp], [ref])
    assert report.metrics["tagging_accuracy"] == 50.0
    assert report.metrics["gold_tags_reattached"] == 0.0 and PLACEHOLDER_NOTE not in report.text


def test_score_files_reproduces_evalb():
    report = PtbTask().score_files(REFERENCE / "test.mrg", REFERENCE / "gold.mrg")
    assert report.text == (REFERENCE / "evalb_COLLINS.out").read_text()
    assert round(report.metrics["f1"], 2) == 96.65 and round(report.metrics["f1_len40"], 2) == 96.51


def test_score_files_errors_name_the_file_and_line(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (PRP He)) (VP (VBD left)))\n(S (NP (PRP He)\n")
    test = tmp_path / "test.txt"
    test.write_text("(S (NP (PRP He)) (VP (VBD left)))\n(S (NP (PRP He)) (VP (VBD left)))\n")
    with pytest.raises(UserError, match=r"gold\.txt:2: not a bracketed tree"):
        PtbTask().score_files(test, gold)
    test.write_text("(S (NP (PRP He)) (VP (VBD left)))\n")
    with pytest.raises(UserError, match="has 1 lines but"):
        PtbTask().score_files(test, gold)


def test_unparseable_and_foreign_outputs_are_evalb_errors():
    task = PtbTask()
    ref = "(S (NP (PRP He)) (VP (VBD left)))"
    report = task.score(["(S (NP (PRP He)", "(S (NP (PRP She)) (VP (VBD left)))"], [ref, ref])
    assert report.metrics["error_sentences"] == 2
    assert "1 : Reading sentence" in report.text and "2 : Words unmatch (He|She)" in report.text


def test_splits_and_their_ranges():
    task = PtbTask(PtbSettings())
    with pytest.raises(UserError, match=r"\[task\] test_files is empty"):
        task.examples("test", SAMPLE)
    with pytest.raises(UserError, match="splits train, valid, test"):
        task.examples("dev", SAMPLE)


def test_the_plugin_registers_its_task_and_decoder_without_importing_torch_or_nltk():
    reg = registry()
    assert reg.get("task", "ptb").settings is PtbSettings
    assert reg.get("decoder", "tree_beam").name == "tree_beam"
    code = "import sys, seqxduce_parsing; print(sorted({'torch', 'nltk'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_evaluate_command_prints_the_evalb_report():
    result = CliRunner().invoke(cli, ["evaluate", str(REFERENCE / "test.mrg"), str(REFERENCE / "gold.mrg"),
                                      "--task", "ptb"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith((REFERENCE / "evalb_COLLINS.out").read_text())


@pytest.mark.parametrize("name", ["ptb_sample.toml", "wsj_transformer.toml"])
def test_recipes_validate(name):
    recipe = load_recipe(RECIPES / name)
    assert recipe.task.component.name == "ptb" and recipe.decode.component.name == "tree_beam"
    assert recipe.tokenizer.component.name == "word" and recipe.tokenizer.core.shared is False
    assert (recipe.decode.settings.beam, recipe.decode.settings.alpha) == (21, 0.3)
    # the paper's input length + 300, plus one token per word where the target also carries the words
    words = recipe.task.settings.words_in_target
    assert recipe.decode.settings.words_in_target == words
    expected_a = 2.0 if words == "after_leaf" else 1.0
    assert (recipe.decode.settings.max_len_a, recipe.decode.settings.max_len_b) == (expected_a, 300)


def test_the_sample_recipe_points_at_the_shared_sample():
    recipe = load_recipe(RECIPES / "ptb_sample.toml")
    assert components.data_dir(recipe).resolve() == SAMPLE.resolve()


def test_the_wsj_recipe_has_the_papers_model():
    recipe = load_recipe(RECIPES / "wsj_transformer.toml")
    model = recipe.model.settings
    assert (model.layers, model.d_model) == (4, 1024)
    assert recipe.tokenizer.settings.max_size == 16000
    assert (recipe.task.settings.train_files, recipe.task.settings.test_files) == ("0200-2199", "2300-2399")


# ---------------------------------------------------------------- gold tags, punctuation, counts

HE_LEFT = "(S (NP-SBJ (PRP He)) (VP (VBD left)) (. .))"


def test_an_unknown_word_leaf_does_not_switch_off_gold_tag_reattachment():
    task = PtbTask(PtbSettings())
    # the word tokenizer decodes an unknown id as <unk>, which delinearize takes as a leaf's tag
    hyp = task.postprocess("(S (NP <unk> )NP (VP XX )VP XX )S", "He left .")
    assert hyp == "(S (NP (<unk> He)) (VP (XX left)) (XX .))"
    report = task.score([hyp, task.postprocess("(S (NP XX )NP (VP XX )VP XX )S", "He left .")], [HE_LEFT] * 2)
    assert report.metrics["gold_tags_reattached"] == 1.0
    assert report.metrics["tagging_accuracy"] == 100.0
    assert "Note: 2 of 2 test trees were written with the placeholder XX" in report.text
    assert PLACEHOLDER_NOTE in report.text


def test_predicted_tags_are_never_replaced_even_when_all_are_placeholders():
    task = PtbTask(PtbSettings(keep_pos_tags=True))
    report = task.score(["(S (NP (<unk> He)) (VP (XX left)) (. .))"], [HE_LEFT])
    assert report.metrics["gold_tags_reattached"] == 0.0 and report.metrics["tagging_accuracy"] == 0.0
    assert PLACEHOLDER_NOTE not in report.text


def test_score_files_decides_reattachment_per_tree(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text(f"{HE_LEFT}\n{HE_LEFT}\n")
    test = tmp_path / "test.txt"
    test.write_text("(S (NP (<unk> He)) (VP (XX left)) (XX .))\n(S (NP (NN He)) (VP (VBD left)) (. .))\n")
    report = PtbTask().score_files(test, gold)
    assert report.metrics["gold_tags_reattached"] == 0.5
    assert report.metrics["tagging_accuracy"] == 75.0  # gold tags: 2 of 2; then NN for PRP: 1 of 2
    assert "Note: 1 of 2 test trees carry only the placeholder tag XX (or <unk>)" in report.text


def test_predicted_tags_that_disagree_on_punctuation_are_counted_and_reported():
    task = PtbTask(PtbSettings(keep_pos_tags=True))
    agree = "(S (NP (PRP He)) (VP (VBD left)) (. .))"
    disagree = "(S (NP (PRP He)) (VP (VBD left)) (NN .))"  # gold: a period; EVALB would say Length unmatch
    report = task.score([agree, disagree, disagree], [HE_LEFT] * 3)
    assert report.metrics["punctuation_mismatch_sentences"] == 2
    assert report.metrics["error_sentences"] == 0
    assert ("Note: 2 sentence(s) whose test tags disagree with the gold tags on which words are punctuation"
            in report.text)
    assert "would count them as error sentences" in report.text
    assert task.score([agree], [HE_LEFT]).metrics["punctuation_mismatch_sentences"] == 0
    assert "disagree with the gold tags" not in task.score([agree], [HE_LEFT]).text


def test_reattached_gold_tags_never_disagree_on_punctuation():
    task = PtbTask(PtbSettings())
    report = task.score(["(S (NP (XX He)) (VP (XX left)) (XX .))"], [HE_LEFT])
    assert report.metrics["punctuation_mismatch_sentences"] == 0


@pytest.mark.parametrize("hyps, refs", [(2, 1), (1, 2)])
def test_score_refuses_unequal_numbers_of_outputs_and_references(hyps, refs):
    with pytest.raises(UserError, match=f"{hyps} outputs for {refs} references"):
        PtbTask().score([HE_LEFT] * hyps, [HE_LEFT] * refs)
