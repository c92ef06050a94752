"""The algorithmic task plugin: generated data, held-out splits, accuracy metrics and registration."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import seqxduce_algorithmic
from seqxduce_algorithmic.generate import MIN_SPACE_TO_HOLD_OUT, Generator, to_digits
from seqxduce_algorithmic.settings import AlgorithmicSettings
from seqxduce_algorithmic.task import AlgorithmicTask

from seqxduce.api import UserError
from seqxduce.registry import Registry, new_manager
from seqxduce.settings_check import make_settings

SMALL = dict(train_size=300, valid_size=50, test_size=50, train_max_len=12, valid_max_len=12,
             test_min_len=20, test_max_len=30)


def make_task(**overrides) -> AlgorithmicTask:
    return AlgorithmicTask(AlgorithmicSettings(**{**SMALL, **overrides}))


def all_splits(task: AlgorithmicTask) -> dict[str, list[tuple[str, str]]]:
    return {split: [(e.source, e.target) for e in task.examples(split, None)] for split in task.splits}


@pytest.mark.parametrize("kind", ["copy", "reverse", "addition"])
def test_same_seed_same_data_and_other_seed_other_data(kind):
    first = all_splits(make_task(kind=kind, seed=7))
    assert first == all_splits(make_task(kind=kind, seed=7))
    assert first["train"] != all_splits(make_task(kind=kind, seed=8))["train"]


def test_a_split_does_not_depend_on_the_size_of_another():
    small = make_task(kind="reverse", train_size=10)
    large = make_task(kind="reverse", train_size=500)
    assert small.examples("valid", None) == large.examples("valid", None)
    assert small.examples("test", None) == large.examples("test", None)
    assert large.examples("train", None)[:10] == small.examples("train", None)


@pytest.mark.parametrize("kind", ["copy", "reverse", "addition"])
def test_sizes_and_source_lengths_follow_each_split_settings(kind):
    task = make_task(kind=kind, train_min_len=4, train_max_len=9, valid_min_len=10, valid_max_len=11)
    ranges = {"train": (4, 9), "valid": (10, 11), "test": (20, 30)}
    for split, (low, high) in ranges.items():
        examples = task.examples(split, None)
        assert len(examples) == getattr(task.settings, f"{split}_size")
        lengths = {len(e.source.split()) for e in examples}
        assert min(lengths) >= low and max(lengths) <= high
        assert len(lengths) > 1, "lengths are drawn from the range, not fixed"


def test_addition_reads_a_minimum_length_below_three_as_three():
    examples = make_task(kind="addition", train_min_len=1, train_max_len=3).examples("train", None)
    assert {len(e.source.split()) for e in examples} == {3}


def test_copy_and_reverse_targets():
    for e in make_task(kind="copy").examples("train", None):
        assert e.target == e.source
    for e in make_task(kind="reverse").examples("train", None):
        assert e.target.split() == e.source.split()[::-1]
        assert e.ref == e.target


def test_symbols_are_single_characters_from_the_alphabet():
    binary = {s for e in make_task(kind="copy", symbols=2).examples("train", None) for s in e.source.split()}
    assert binary == {"0", "1"}
    twelve = {s for e in make_task(kind="copy", symbols=12).examples("train", None) for s in e.source.split()}
    assert twelve == set("0123456789ab")


def test_addition_targets_are_the_sums_msb_first():
    for e in make_task(kind="addition").examples("train", None):
        left, right = e.source.split(" + ")
        for number in (left, right):
            assert number == "0" or not number.startswith("0"), "no leading zeros"
        total = int(left.replace(" ", "")) + int(right.replace(" ", ""))
        assert e.target.replace(" ", "") == str(total)


def test_binary_addition_lsb_first_as_in_tensor2tensor():
    def value(digits: str) -> int:
        return int(digits.replace(" ", "")[::-1], 2)

    examples = make_task(kind="addition", symbols=2, lsb_first=True).examples("train", None)
    for e in examples:
        left, right = e.source.split(" + ")
        assert value(e.target) == value(left) + value(right)
        assert e.target[-1] == "1" or e.target == "0", "the last digit is the most significant"
    assert any(e.target.split()[::-1] != e.target.split() for e in examples)


def test_generated_examples_are_known_for_a_fixed_seed():
    # golden values: they change only if the way the generator uses the seed changes
    task = make_task(kind="addition", seed=1, train_size=2, train_min_len=5, train_max_len=5)
    pairs = [(e.source, e.target) for e in task.examples("train", None)]
    assert pairs == [("2 5 1 + 2", "2 5 3"), ("3 1 1 + 3", "3 1 4")]


def test_valid_and_test_never_repeat_a_training_source_once_the_space_is_large():
    # 10 symbols at length 4: exactly MIN_SPACE_TO_HOLD_OUT sources, and train draws 6000 of them, so
    # without held-out sources valid and test would repeat hundreds of training sources
    assert Generator("copy", 10).space(4) == MIN_SPACE_TO_HOLD_OUT
    lengths = dict(train_min_len=4, train_max_len=4, valid_min_len=4, valid_max_len=4,
                   test_min_len=4, test_max_len=4)
    task = make_task(kind="reverse", train_size=6000, valid_size=300, test_size=300, **lengths)
    sources = {split: {e.source for e in task.examples(split, None)} for split in task.splits}
    assert not sources["train"] & sources["valid"]
    assert not sources["train"] & sources["test"]
    assert not sources["valid"] & sources["test"]


def test_short_lengths_with_a_small_space_are_shared_by_all_splits():
    lengths = dict(train_min_len=3, train_max_len=3, valid_min_len=3, valid_max_len=3)
    task = make_task(kind="copy", train_size=3000, valid_size=200, **lengths)
    train = {e.source for e in task.examples("train", None)}
    assert {e.source for e in task.examples("valid", None)} & train


def test_addition_space_counts_numbers_without_leading_zeros():
    # length 3 = one digit + one digit; length 4 = 1+2 or 2+1 digits: 2 * 10 * 90
    assert Generator("addition", 10).space(3) == 100
    assert Generator("addition", 10).space(4) == 1800
    assert Generator("copy", 3).space(5) == 243


def paired_operands(source: str, lsb_first: bool) -> tuple[str, str]:
    """The two numbers of a paired source, most significant digit first (zero padding kept)."""
    pairs = source.split()
    pairs = pairs[::-1] if lsb_first else pairs
    return "".join(p[0] for p in pairs), "".join(p[1] for p in pairs)


@pytest.mark.parametrize("lsb_first", [False, True])
def test_paired_addition_puts_digits_of_one_significance_in_one_token(lsb_first):
    task = make_task(kind="addition", operands="paired", lsb_first=lsb_first, train_min_len=1, train_max_len=6)
    examples = task.examples("train", None)
    for e in examples:
        assert all(len(token) == 2 for token in e.source.split()), e.source
        left, right = paired_operands(e.source, lsb_first)
        both_padded = left.startswith("0") and right.startswith("0")
        assert len(left) == 1 or not both_padded, "the longer number has no leading zero"
        total = e.target.replace(" ", "")
        assert int(total[::-1] if lsb_first else total) == int(left) + int(right)
        assert "+" not in e.source
    lengths = {len(e.source.split()) for e in examples}
    assert min(lengths) == 1 and max(lengths) == 6, "a paired length counts digit pairs"
    # the shorter number is really shorter (zero-padded) in some sources, on either side
    padded = [paired_operands(e.source, lsb_first) for e in examples if len(e.source.split()) > 2]
    assert any(left.startswith("0") for left, _ in padded) and any(right.startswith("0") for _, right in padded)


def test_paired_addition_golden_examples_lsb_first():
    # golden values: '28 30 50 50' is 5532 + 0008 least significant first (2 + 8, 3 + 0, 5 + 0, 5 + 0) = 5540
    task = make_task(kind="addition", operands="paired", lsb_first=True, seed=1, train_size=2,
                     train_min_len=4, train_max_len=4)
    pairs = [(e.source, e.target) for e in task.examples("train", None)]
    assert pairs == [("28 30 50 50", "0 4 5 5"), ("93 59 70 10", "2 5 8 1")]
    assert task.generator.min_length == 1


def test_paired_space_counts_pairs_whose_longer_number_has_the_length():
    def brute(base: int, width: int) -> int:
        def digits(n: int) -> int:
            return len(to_digits(n, base))
        upto = base**width
        return sum(1 for a in range(upto) for b in range(upto) if max(digits(a), digits(b)) == width)

    for base, width in [(2, 1), (2, 2), (2, 3), (3, 2), (10, 1), (10, 2)]:
        assert Generator("addition", base, operands="paired").space(width) == brute(base, width)


def test_operands_setting_names_its_choices_and_paired_allows_one_pair():
    with pytest.raises(UserError, match="operands = 'stacked' is not one of separate, paired"):
        make_settings(AlgorithmicSettings, {"kind": "addition", "operands": "stacked"}, "task", "r.toml")
    settings = make_settings(AlgorithmicSettings, {"kind": "addition", "operands": "paired", "train_min_len": 1,
                                                   "train_max_len": 1}, "task", "r.toml")
    assert settings.operands == "paired"  # one pair is a valid paired source, though 'a + b' needs 3 tokens


def test_sequence_and_char_accuracy_on_hand_computed_cases():
    hyps = ["1 2 3", "1 2", "1 2 3 4", "", "1  2 3 "]
    refs = ["1 2 3", "1 2 3", "1 2 3", "5", "1 2 3"]
    report = make_task().score(hyps, refs)
    assert report.primary == "sequence_accuracy"
    # exact: the first and (after whitespace normalisation) the last
    assert report.metrics["sequence_accuracy"] == pytest.approx(2 / 5)
    # matches 3 + 2 + 3 + 0 + 3 = 11 over max lengths 3 + 3 + 4 + 1 + 3 = 14
    assert report.metrics["char_accuracy"] == pytest.approx(11 / 14)
    assert "sequence_accuracy = 0.4000 (2/5" in report.text
    assert "char_accuracy     = 0.7857 (11/14" in report.text


def test_char_accuracy_compares_positions_not_alignment():
    report = make_task().score(["0 1 2 3"], ["1 2 3"])
    assert report.metrics["char_accuracy"] == 0.0
    assert report.metrics["sequence_accuracy"] == 0.0


def test_score_needs_one_hypothesis_per_reference():
    with pytest.raises(UserError, match="2 hypotheses for 1 references"):
        make_task().score(["1", "2"], ["1"])


def test_score_of_an_empty_corpus_is_zero():
    assert make_task().score([], []).metrics == {"sequence_accuracy": 0.0, "char_accuracy": 0.0}


def test_score_files(tmp_path):
    (tmp_path / "hyp.txt").write_text("1 2\n3 4\n")
    (tmp_path / "ref.txt").write_text("1 2\n4 3\n")
    report = make_task().score_files(tmp_path / "hyp.txt", tmp_path / "ref.txt")
    assert report.metrics == {"sequence_accuracy": 0.5, "char_accuracy": 0.5}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(symbols=63), r"^AlgorithmicSettings\.symbols = 63 is out of range"),
        (dict(symbols=1), r"^AlgorithmicSettings\.symbols = 1 is out of range"),
        (dict(valid_min_len=20, valid_max_len=10), r"\[task\] valid_max_len = 10 is below valid_min_len"),
        (dict(kind="addition", train_max_len=2), r"\[task\] train_max_len = 2 .* shortest addition source"),
        (dict(test_min_len=0), r"^AlgorithmicSettings\.test_min_len = 0 is out of range"),
        (dict(train_size=-1), r"^AlgorithmicSettings\.train_size = -1 is out of range"),
    ],
)
def test_bad_settings_are_user_errors_naming_the_key(overrides, message):
    with pytest.raises(UserError, match=message):
        make_task(**overrides)


def test_unknown_split_is_a_user_error():
    with pytest.raises(UserError, match="no split 'dev'"):
        make_task().examples("dev", None)


def test_recipe_values_are_checked_against_the_settings():
    settings = make_settings(AlgorithmicSettings, {"kind": "copy", "symbols": 4}, "task", "r.toml")
    assert (settings.kind, settings.symbols, settings.train_max_len) == ("copy", 4, 40)
    with pytest.raises(UserError, match="kind = 'sort' is not one of copy, reverse, addition"):
        make_settings(AlgorithmicSettings, {"kind": "sort"}, "task", "r.toml")


def test_every_setting_has_help():
    for f in dataclasses.fields(AlgorithmicSettings):
        assert f.metadata["help"], f.name


def test_registered_through_the_plugin_manager():
    pm = new_manager(entry_points=False)
    pm.register(seqxduce_algorithmic, name="algorithmic")
    try:
        component = Registry(pm).get("task", "algorithmic")
        assert component.settings is AlgorithmicSettings
        assert component.plugin == "algorithmic"
        task = component.factory(AlgorithmicSettings(kind="copy", train_size=3))
        assert len(task.examples("train", None)) == 3
    finally:
        pm.unregister(name="algorithmic")


def test_importing_the_plugin_does_not_import_torch():
    code = "import sys, seqxduce_algorithmic; assert 'torch' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("build, message", [
    (lambda: AlgorithmicSettings(symbols=1), r"^AlgorithmicSettings\.symbols = 1 is out of range"),
    (lambda: AlgorithmicSettings(test_min_len=5, test_max_len=4), r"^\[task\] test_max_len = 4 is below"),
])
def test_task_settings_built_in_python_are_checked(build, message):
    with pytest.raises(UserError, match=message):
        build()
