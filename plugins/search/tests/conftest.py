"""A tiny trained run for the sampling decoder's CLI test, trained through seqxduce.testing (the plugin's tests take
nothing from the repository's tests/, so the plugin can be lifted with them)."""

from pathlib import Path

import pytest

from seqxduce.testing import train_tiny_run

TINY_RECIPE = Path(__file__).resolve().parent / "fixtures" / "tiny.toml"


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The tiny recipe (algorithmic reverse, a 1-layer transformer) trained for 6 steps."""
    return train_tiny_run(TINY_RECIPE, tmp_path_factory.mktemp("shared-runs") / "tiny")
