"""Fixtures of the distillation tests: a tiny teacher run (tests/fixtures/tiny.toml, trained once per module), a
cache folder of the test's own, so that a set made by another test is not found, and distilled sets made by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqxduce import engine
from seqxduce.api import Example, Report, Task
from seqxduce.corpus.distilled import DistilledSet
from tests.tiny import TINY_RECIPE


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("teacher") / "run"
    engine.train(TINY_RECIPE, out)
    return out


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SEQXDUCE_CACHE", str(folder))
    return folder


class Lines(Task):
    """A task of given training pairs (valid and test: none)."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self.pairs = pairs

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        return [Example(s, t) for s, t in self.pairs] if split == "train" else []

    def score(self, hypotheses, references, sources=None) -> Report:
        return Report("exact", 0.0)


def made_by_hand(folder: Path, pairs: list[tuple[str, str]], outputs: list[str]) -> DistilledSet:
    distilled = DistilledSet(folder)
    distilled.write_sources(iter(Lines(pairs).examples("train", folder)), "test")
    distilled.targets.write_text("".join(line + "\n" for line in outputs))
    distilled.finish(len(pairs), {"made": "by hand"})
    return distilled
