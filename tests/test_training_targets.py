"""The training targets read from another file (corpus.prepare.TrainingTargets: a distilled corpus, issue #60):
each example's target replaced line for line, or a share of them, and the data's key changed with them, so that
the corpus never maps the dataset of the task's own targets instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqxduce.api import Example, UserError
from seqxduce.corpus.prepare import Examples, TrainingTargets, data_fingerprint

PAIRS = [Example(source=f"s{i}", target=f"t{i}") for i in range(200)]


class _Task:
    """A task whose training split is PAIRS, read from the file it names."""

    def __init__(self, files: list[Path]):
        self.files = files

    def stream(self, split, data_dir):
        yield from PAIRS

    def data_files(self, split, data_dir):
        return self.files


@pytest.fixture
def task(tmp_path: Path) -> _Task:
    (tmp_path / "train.txt").write_text("the task's file\n")
    return _Task([tmp_path / "train.txt"])


def _distilled(tmp_path: Path, count: int = len(PAIRS)) -> Path:
    path = tmp_path / "distilled.txt"
    path.write_text("".join(f"d{i}\n" for i in range(count)), encoding="utf-8")
    return path


def test_every_target_is_replaced_line_for_line(task, tmp_path):
    examples = list(Examples(task, tmp_path, targets=TrainingTargets(_distilled(tmp_path))))
    assert [e.target for e in examples] == [f"d{i}" for i in range(len(PAIRS))]
    assert [e.source for e in examples] == [e.source for e in PAIRS]


def test_a_share_replaces_that_share_the_same_on_every_read(task, tmp_path):
    targets = TrainingTargets(_distilled(tmp_path), share=0.5, seed=3)
    first = [e.target for e in Examples(task, tmp_path, targets=targets)]
    assert first == [e.target for e in Examples(task, tmp_path, targets=targets)]
    distilled = sum(t.startswith("d") for t in first)
    assert 60 < distilled < 140  # about half of 200
    assert all(t in (f"d{i}", f"t{i}") for i, t in enumerate(first))


def test_a_file_that_does_not_pair_up_is_refused_in_one_line(task, tmp_path):
    with pytest.raises(UserError, match="fewer lines than the task's training examples"):
        list(Examples(task, tmp_path, targets=TrainingTargets(_distilled(tmp_path, len(PAIRS) - 1))))
    with pytest.raises(UserError, match="more lines"):
        list(Examples(task, tmp_path, targets=TrainingTargets(_distilled(tmp_path, len(PAIRS) + 1))))


def test_the_targets_enter_the_datas_key(task, tmp_path):
    path = _distilled(tmp_path)
    own = data_fingerprint(task, tmp_path, Examples(task, tmp_path))
    whole = data_fingerprint(task, tmp_path, Examples(task, tmp_path, targets=TrainingTargets(path)))
    half = data_fingerprint(task, tmp_path, Examples(task, tmp_path, targets=TrainingTargets(path, share=0.5)))
    assert len({own, whole, half}) == 3
