"""The `ptb` task: examples from the sample, postprocessing with repair counts, scoring, files, CLI, recipes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from seqxduce_parsing.evalb_report import PLACEHOLDER_NOTE
from seqxduce_parsing.settings import PtbSettings
from seqxduce_parsing.task import PtbTask

from seqxduce import components
from seqxduce.api import Postprocessed, UserError
from seqxduce.cli import cli
from seqxduce.recipe import load_recipe
from seqxduce.registry import registry
from seqxduce.testing import default_shared, repository_root

REPOSITORY = repository_root(Path(__file__))
RECIPES = REPOSITORY / "recipes"
DEFAULT_SHARED = default_shared(REPOSITORY)


@pytest.fixture(scope="module")
def valid_examples(ptb_sample):
    return PtbTask(PtbSettings()).examples("valid", ptb_sample)


def test_examples_of_the_sample(valid_examples, evalb_reference):
    assert len(valid_examples) == 273
    first = valid_examples[0]
    assert first.source.split()[:4] == ["Savin", "Corp.", "reported", "a"]
    assert first.target.startswith("(S (NP XX XX )NP (VP XX (NP (NP XX XX XX XX )NP (PP XX ")
    assert first.target.endswith(")VP XX )S")
    # the reference is the gold tree as EVALB takes it: function tags and empty elements kept, one line
    assert first.reference == (evalb_reference / "gold.mrg").read_text().splitlines()[0]


def test_keep_pos_tags_puts_the_tags_in_the_target(ptb_sample):
    task = PtbTask(PtbSettings(keep_pos_tags=True, valid_files="0160"))
    target = task.examples("valid", ptb_sample)[0].target
    assert target.startswith("(S (NP NNP NNP )NP (VP VBD (NP (NP DT NN JJ NN )NP (PP IN ")
    assert target.endswith(". )S")


EXPECTED_START = {"after_leaf": "(S (NP NNP Savin NNP Corp. )NP", "before_leaf": "(S (NP Savin NNP Corp. NNP )NP",
                  "as_leaf": "(S (NP Savin Corp. )NP", "ahead": "Savin (S (NP NNP Corp. NNP reported )NP"}


@pytest.mark.parametrize("settings", [dict(keep_pos_tags=True, words_in_target="after_leaf"),
                                      dict(keep_pos_tags=True, words_in_target="before_leaf"),
                                      dict(keep_pos_tags=True, words_in_target="ahead"),
                                      dict(words_in_target="as_leaf")])
def test_targets_with_words_score_100_and_carry_the_source_words(settings, ptb_sample):
    task = PtbTask(PtbSettings(valid_files="0160", **settings))
    examples = task.examples("valid", ptb_sample)
    first = examples[0]
    assert first.target.startswith(EXPECTED_START[settings["words_in_target"]])
    hyps = [task.postprocess(ex.target, ex.source) for ex in examples]
    report = task.score_outputs(hyps, [ex.ref for ex in examples], [ex.source for ex in examples])
    assert report.metrics["f1"] == 100.0 and report.metrics["repairs"] == 0


def test_word_leaves_with_pos_tags_is_a_user_error():
    with pytest.raises(UserError, match=r"\[task\] words_in_target 'as_leaf'.*after_leaf"):
        PtbTask(PtbSettings(keep_pos_tags=True, words_in_target="as_leaf"))


def test_train_split_size(ptb_sample):
    assert len(PtbTask(PtbSettings()).examples("train", ptb_sample)) == 3396


def test_gold_sequences_score_100_with_no_repairs(valid_examples):
    task = PtbTask(PtbSettings())
    outputs = [task.postprocess(ex.target, ex.source) for ex in valid_examples]
    report = task.score_outputs(outputs, [ex.ref for ex in valid_examples], [ex.source for ex in valid_examples])
    assert report.primary == "f1"
    assert report.metrics["f1"] == report.metrics["f1_len40"] == 100.0
    assert (report.metrics["repaired"], report.metrics["repairs"]) == (0, 0)
    assert report.metrics["gold_tags_reattached"] == 1.0
    assert PLACEHOLDER_NOTE in report.text
    assert report.text.startswith("  Sent.                        Matched  Bracket   Cross        Correct Tag\n")


def test_collapsed_unary_chains_are_expanded_before_scoring(ptb_sample):
    task = PtbTask(PtbSettings(collapse_unary=True, valid_files="0160-0163"))
    examples = task.examples("valid", ptb_sample)
    assert any("+" in tok for ex in examples for tok in ex.target.split())
    outputs = [task.postprocess(ex.target, ex.source) for ex in examples]
    assert task.score_outputs(outputs, [ex.ref for ex in examples]).metrics["f1"] == 100.0


def test_repairs_are_counted_per_output_and_travel_with_it_to_the_score():
    task = PtbTask(PtbSettings())
    ref = "(S (NP-SBJ (PRP He)) (VP (VBD left)) (. .))"
    good = task.postprocess("(S (NP XX )NP (VP XX )VP XX )S", "He left .")
    broken = task.postprocess("(S (NP XX )NP (VP XX XX", "He left .")  # VP and S left open
    assert good == Postprocessed("(S (NP (XX He)) (VP (XX left)) (XX .))", {"repairs": 0})
    assert broken == Postprocessed("(S (NP (XX He)) (VP (XX left) (XX .)))", {"repairs": 2})
    report = task.score_outputs([good, broken], [ref, ref])
    assert (report.metrics["repaired"], report.metrics["repairs"]) == (1, 2)
    assert "Repaired outputs: 1 of 2 decoded sequences" in report.text
    assert report.metrics["recall"] == pytest.approx(100.0)  # the period is deleted, so VP still matches
    # nothing is kept between calls: scoring the same outputs again, or others, reports only what it is given
    assert task.score_outputs([good, broken], [ref, ref]).metrics["repairs"] == 2
    assert task.score_outputs([good], [ref]).metrics["repaired"] == 0
    assert "repaired" not in task.score([broken.text], [ref]).metrics


def test_predicted_tags_are_used_and_scored():
    task = PtbTask(PtbSettings(keep_pos_tags=True))
    ref = "(S (NP-SBJ (PRP He)) (VP (VBD left)) (. .))"
    hyp = task.postprocess("(S (NP NN )NP (VP VBD )VP . )S", "He left .")
    report = task.score_outputs([hyp], [ref])
    assert report.metrics["tagging_accuracy"] == 50.0
    assert report.metrics["gold_tags_reattached"] == 0.0 and PLACEHOLDER_NOTE not in report.text


def test_score_files_reproduces_evalb(evalb_reference):
    report = PtbTask().score_files(evalb_reference / "test.mrg", evalb_reference / "gold.mrg")
    assert report.text == (evalb_reference / "evalb_COLLINS.out").read_text()
    assert round(report.metrics["f1"], 2) == 96.65 and round(report.metrics["f1_len40"], 2) == 96.51


def test_score_files_reads_bad_lines_and_unequal_files_as_evalb_does(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (PRP He)) (VP (VBD left)))\n(S (NP (PRP He)\n")
    test = tmp_path / "test.txt"
    test.write_text("(S (NP (PRP He)) (VP (VBD left)))\n(S (NP (PRP He)) (VP (VBD left)))\n")
    report = PtbTask().score_files(test, gold)  # an unbalanced gold line is an error sentence, not a refusal
    assert "2 : Bracketing is unbalanced (too many open bracket)" in report.text
    assert (report.invalid, report.warning.split(":")[0]) == (1, "1 error sentence (line 2)")
    test.write_text("(S (NP (PRP He)) (VP (VBD left)))\n")
    report = PtbTask().score_files(test, gold)  # the pairs there are are scored, the rest named
    assert "2 : Number of lines unmatch (too many lines in gold file)" in report.text
    assert report.metrics["sentences"] == 1 and report.invalid == 1
    assert report.warning.startswith("1 line without a partner (1 outputs for 2 references: line 2)")
    with pytest.raises(UserError, match="missing.txt: no such file"):
        PtbTask().score_files(tmp_path / "missing.txt", gold)


def test_unparseable_and_foreign_outputs_are_evalb_errors():
    task = PtbTask()
    ref = "(S (NP (PRP He)) (VP (VBD left)))"
    report = task.score(["(S (NP (PRP He)", "(S (NP (PRP She)) (VP (VBD left)))", "(S (NP He) left)", ref], [ref] * 4)
    assert report.metrics["error_sentences"] == 3 and report.metrics["f1"] == 100.0
    assert "1 : Bracketing is unbalanced (too many open bracket)" in report.text
    assert "2 : Words unmatch (He|She)" in report.text and "3 : Reading sentence" in report.text
    assert "the original EVALB stops at line 3 without a summary" in report.text
    assert report.invalid == 3 and report.warning.startswith("3 error sentences (lines 1, 2, 3): ")


def test_an_empty_output_for_a_gold_tree_with_words_is_named():
    report = PtbTask().score(["", "(S (. .))"], ["(S (NP (PRP He)) (VP (VBD left)))", "(S (. .))"])
    assert report.metrics["skipped_sentences"] == 2
    # a gold tree of punctuation only has no words to miss: only the first output is a loss
    assert report.invalid == 1 and report.warning.startswith("1 output with no words, skipped (line 1)")


def test_splits_and_their_ranges(tmp_path):
    task = PtbTask(PtbSettings())
    with pytest.raises(UserError, match=r"\[task\] test_files is empty"):
        task.examples("test", tmp_path)
    with pytest.raises(UserError, match="splits train, valid, test"):
        task.examples("dev", tmp_path)


def test_the_plugin_registers_its_task_and_decoder_without_importing_torch_or_nltk():
    reg = registry()
    assert reg.get("task", "ptb").settings is PtbSettings
    assert reg.get("decoder", "tree_beam").name == "tree_beam"
    code = "import sys, seqxduce_parsing; print(sorted({'torch', 'nltk'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_evaluate_command_prints_the_evalb_report(evalb_reference):
    result = CliRunner().invoke(cli, ["evaluate", str(evalb_reference / "test.mrg"), str(evalb_reference / "gold.mrg"),
                                      "--task", "ptb"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith((evalb_reference / "evalb_COLLINS.out").read_text())


@pytest.mark.parametrize("name", ["ptb_sample.toml", "wsj_transformer.toml"])
def test_recipes_validate(name):
    recipe = load_recipe(RECIPES / name)
    assert recipe.task.component.name == "ptb" and recipe.decode.component.name == "tree_beam"
    assert recipe.tokenizer.component.name == "word" and recipe.tokenizer.core.shared is False
    assert (recipe.decode.settings.beam, recipe.decode.settings.alpha) == (21, 0.3)
    # the paper's input length + 300, plus one token per word where the target also carries the words
    words = recipe.task.settings.words_in_target
    assert recipe.decode.settings.words_in_target == words
    expected_a = 2.0 if words in ("after_leaf", "before_leaf", "ahead") else 1.0
    assert (recipe.decode.settings.max_len_a, recipe.decode.settings.max_len_b) == (expected_a, 300)


@pytest.mark.parametrize("args", [
    ["--set", 'decode.words_in_target="after_leaf"'],
    ["--set", 'task.words_in_target="before_leaf"'],
])
def test_words_in_target_of_task_and_decoder_must_agree(args):
    """The task writes the words one way and tree_beam forces them another: refused in one line, not decoded."""
    result = CliRunner().invoke(cli, ["recipe", "show", str(RECIPES / "ptb_sample.toml"), *args])
    assert result.exit_code != 0
    message = result.output.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in message, message
    normalized = message.replace("[task] ", "task.").replace("[decode] ", "decode.")
    assert "task.words_in_target" in normalized and "decode.words_in_target" in normalized, message
    assert "set both to one value" in message


def test_words_in_target_set_the_same_in_both_sections_loads():
    sets = ['task.words_in_target="before_leaf"', 'decode.words_in_target="before_leaf"']
    recipe = load_recipe(RECIPES / "ptb_sample.toml", sets)
    assert recipe.task.settings.words_in_target == recipe.decode.settings.words_in_target == "before_leaf"


def test_the_sample_recipe_points_at_the_shared_sample():
    recipe = load_recipe(RECIPES / "ptb_sample.toml")
    assert components.data_dir(recipe).resolve() == (DEFAULT_SHARED / "data" / "ptb_sample").resolve()


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
    assert hyp.text == "(S (NP (<unk> He)) (VP (XX left)) (XX .))"
    report = task.score_outputs([hyp, task.postprocess("(S (NP XX )NP (VP XX )VP XX )S", "He left .")],
                                [HE_LEFT] * 2)
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


def test_predicted_tags_that_disagree_on_punctuation_are_evalb_errors():
    task = PtbTask(PtbSettings(keep_pos_tags=True))
    agree = "(S (NP (PRP He)) (VP (VBD left)) (. .))"
    disagree = "(S (NP (PRP He)) (VP (VBD left)) (NN .))"  # gold: a period, deleted; here a word
    report = task.score([agree, disagree, disagree], [HE_LEFT] * 3)
    assert report.metrics["error_sentences"] == 2
    assert "2 : Length unmatch (2|3)" in report.text and "3 : Length unmatch (2|3)" in report.text
    assert report.invalid == 2
    assert task.score([agree], [HE_LEFT]).invalid == 0


def test_reattached_gold_tags_never_disagree_on_punctuation():
    task = PtbTask(PtbSettings())
    report = task.score(["(S (NP (XX He)) (VP (XX left)) (XX .))"], [HE_LEFT])
    assert report.metrics["error_sentences"] == 0 and report.metrics["f1"] == 100.0 and report.invalid == 0


@pytest.mark.parametrize("hyps, refs", [(2, 1), (1, 2)])
def test_score_refuses_unequal_numbers_of_outputs_and_references(hyps, refs):
    with pytest.raises(UserError, match=f"{hyps} outputs for {refs} references"):
        PtbTask().score([HE_LEFT] * hyps, [HE_LEFT] * refs)
