"""Fixtures of the core's tests: those in seqxduce.testing (registry, shared data) and a tiny trained run."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqxduce.testing import (  # noqa: F401  (fixtures and helpers the core's tests share with plugin tests)
    default_shared,
    evalb_reference,
    multi30k,
    plugins_registered,
    ptb_sample,
    repository_root,
    shared_dir,
    train_tiny_run,
)

REPOSITORY = repository_root(Path(__file__))
DEFAULT_SHARED = default_shared(REPOSITORY)

TINY_RECIPE = Path(__file__).resolve().parent / "fixtures" / "tiny.toml"


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The tiny recipe trained for 6 steps (checkpoints at 2, 4, 6 and their average of 2), shared by the tests
    that only read a finished run. Every batch holds the whole training set, so one step is one epoch."""
    return train_tiny_run(TINY_RECIPE, tmp_path_factory.mktemp("shared-runs") / "tiny")
