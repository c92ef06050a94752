"""Fixtures of the distillation tests: a tiny teacher run (tests/fixtures/tiny.toml, trained once per module) and
a cache folder of the test's own, so that a set made by another test is not found."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqxduce import engine
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
