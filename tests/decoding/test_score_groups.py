"""Scores per group (decoding/groups.py): a split whose examples name groups is scored per group with the group's
task, reported as their mean under the metric's own names and per group as name[group], with a table; the
progress line folds the groups beside the mean; early stopping follows the mean or [train] best_group. A split
without groups is scored as one set, as it always was."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from seqxduce.api import Example, Postprocessed, Report, Task, UserError
from seqxduce.decoding.decode import score_outputs
from seqxduce.decoding.groups import combine_groups, compact_line, sample_per_group
from seqxduce.training.early_stopping import EarlyStopping
from seqxduce.training.state import TrainState
from seqxduce.training.validation import Validator


class Exact(Task):
    """Exact-match accuracy; for_group gives a task that says which group it scored."""

    group_name = "direction"

    def __init__(self, label: str = "all"):
        self.label = label

    def examples(self, split, data_dir):  # pragma: no cover - not read here
        return []

    def for_group(self, group: str) -> Task:
        return Exact(group)

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        right = sum(h == r for h, r in zip(hypotheses, references))
        return Report({"acc": 100.0 * right / len(references), "n": float(len(references))}, "acc",
                      text=f"acc of {self.label}", signature=f"exact|{self.label}" if self.label == "b" else "exact",
                      table={"acc": "Acc"})


def outputs_of(texts: Sequence[str]) -> list[Postprocessed]:
    return [Postprocessed(t) for t in texts]


def test_each_group_is_scored_by_its_task_and_the_mean_keeps_the_metric_name():
    examples = [Example("s", "x", group="a"), Example("s", "y", group="b"), Example("s", "x", group="a"),
                Example("s", "z", group="b"), Example("s", "x", group="b")]
    report = score_outputs(Exact(), outputs_of(["x", "y", "q", "q", "q"]), examples)
    assert report.primary == "acc" and report.table == {"acc": "Acc"}
    assert report.metrics["acc[a]"] == 50.0 and report.metrics["acc[b]"] == pytest.approx(100 / 3)
    assert report.metrics["acc"] == pytest.approx((50 + 100 / 3) / 2)  # each group counts once
    assert report.metrics["n[a]"] == 2 and report.metrics["n[b]"] == 3
    lines = report.text.splitlines()
    assert lines[0].split() == ["direction", "Acc", "sentences"]
    assert lines[1].split() == ["a", "50.00", "2"] and lines[3].split() == ["mean", "41.67", "5"]
    assert lines[4:] == ["a:", "  acc of a", "b:", "  acc of b"]
    assert report.signature == "a: exact; b: exact|b"  # different signatures, each named


def test_a_split_without_groups_is_scored_as_one_set():
    examples = [Example("s", "x"), Example("s", "y")]
    report = score_outputs(Exact(), outputs_of(["x", "q"]), examples)
    assert report == Exact().score(["x", "q"], ["x", "y"])
    assert compact_line({"loss": 1.5, "valid_acc": 50.0}, "valid_acc") == {"loss": 1.5, "valid_acc": 50.0}
    assert sample_per_group(examples, 1) == examples[:1]


def test_a_split_that_groups_some_examples_only_is_refused_in_one_line():
    with pytest.raises(UserError) as err:
        score_outputs(Exact(), outputs_of(["x", "y"]), [Example("s", "x", group="a"), Example("s", "y")])
    assert "1 of the split's 2 examples name no group" in str(err.value) and "\n" not in str(err.value)


def test_the_same_signature_is_said_once_and_invalid_outputs_add_up():
    first = Report({"acc": 10.0}, "acc", signature="s", invalid=1, warning="1 bad")
    second = Report({"acc": 30.0}, "acc", signature="s", invalid=2)
    report = combine_groups({"a": first, "b": second}, {"a": 4, "b": 4})
    assert report.signature == "s" and report.invalid == 3 and report.warning == "a: 1 bad"
    assert report.text.splitlines()[0].split() == ["group", "acc", "sentences"]


def test_the_sample_takes_the_first_examples_of_each_group():
    examples = [Example(str(i), "t", group="ab"[i % 2]) for i in range(10)]
    assert [ex.source for ex in sample_per_group(examples, 2)] == ["0", "1", "2", "3"]


def test_the_line_folds_each_group_beside_the_mean():
    metrics = {"loss": 2.0, "search": "beam", "valid_acc": 40.0, "valid_n": 3.0, "valid_acc[a]": 50.0,
               "valid_n[a]": 2.0, "valid_acc[b]": 30.0, "valid_n[b]": 4.0}
    expected = {"loss": 2.0, "search": "beam", "valid_acc": "40.00 (a 50.00, b 30.00)", "valid_n": 3.0}
    assert compact_line(metrics, "valid_acc") == expected
    assert compact_line(metrics) == expected  # the first figure with groups when the primary is not said


def validator(best_group: str) -> Validator:
    """A validator as the trainer has it after a validation scored (primary known), without a model."""
    made = Validator.__new__(Validator)
    made.primary_metric, made.higher_is_better, made.best_group = "valid_acc", True, best_group
    return made


@pytest.mark.parametrize("best_group, stop_at", [("", None), ("b", 3)])
def test_early_stopping_follows_the_mean_or_the_group_named(best_group, stop_at):
    """The mean improves at every validation while group b peaks at the first: patience 2 stops on b alone."""
    state, stopping = TrainState(), EarlyStopping(2, None, "run")
    watch = validator(best_group)
    stopped = None
    for validation, (a, b) in enumerate([(10, 30), (30, 20), (50, 10), (70, 5)], start=1):
        state.step = validation
        metrics = {"loss": 1.0, "valid_acc": (a + b) / 2, "valid_acc[a]": float(a), "valid_acc[b]": float(b)}
        name, value, higher = watch.watched(metrics)
        assert name == ("valid_acc[b]" if best_group else "valid_acc")
        stopping.record(state, name, value, higher, model=None)
        if stopping.spent(state) and stopped is None:
            stopped = validation
    assert stopped == stop_at
    assert state.best_step == (1 if best_group else 4)
