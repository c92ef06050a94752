"""Shared fixtures: a plugin registry built from given plugin objects, and the shared data paths."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from seqxduce.registry import Registry, new_manager, registry, reset_registry

REPOSITORY = Path(__file__).resolve().parents[1]
# where the recipes expect the shared data: ../shared beside the repository
DEFAULT_SHARED = REPOSITORY.parent / "shared"
# SEQXDUCE_SHARED points the tests at another copy (a worktree, a CI cache) or at a missing folder to check that
# every test needing it skips
SHARED = Path(os.environ.get("SEQXDUCE_SHARED") or DEFAULT_SHARED)


@contextlib.contextmanager
def plugins_registered(*plugins: object, entry_points: bool = True):
    """Make the process-wide registry the installed plugins plus these plugin objects, then restore it."""
    pm = new_manager(entry_points=entry_points)
    for i, plugin in enumerate(plugins):
        pm.register(plugin, name=f"test-plugin-{i}")
    try:
        reset_registry(Registry(pm))
        yield registry()
    finally:
        for plugin in plugins:
            pm.unregister(plugin)
        reset_registry(None)


def _shared(relative: str) -> Path:
    """A folder of the shared data, or a skip naming what is missing and how to point the tests at it."""
    path = SHARED / relative
    if not path.is_dir():
        pytest.skip(f"{path} is missing: the test needs the shared data beside the repository "
                    "(or SEQXDUCE_SHARED=/path/to/shared)")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared folder beside the repository (data, reference outputs); the test skips without it."""
    return _shared(".")


@pytest.fixture(scope="session")
def ptb_sample(shared_dir: Path) -> Path:
    """The NLTK Penn Treebank sample (wsj_0001.mrg ... wsj_0199.mrg)."""
    return _shared("data/ptb_sample")


@pytest.fixture(scope="session")
def evalb_reference(shared_dir: Path) -> Path:
    """gold.mrg, test.mrg and the original EVALB's output on them (evalb_COLLINS.out)."""
    return _shared("evalb_reference")


@pytest.fixture(scope="session")
def multi30k(shared_dir: Path) -> Path:
    """The Multi30k plain-text files."""
    return _shared("data/multi30k")


TINY_RECIPE = Path(__file__).resolve().parent / "fixtures" / "tiny.toml"


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The tiny recipe trained for 6 steps (checkpoints at 2, 4, 6 and their average of 2), shared by the tests
    that only read a finished run. Every batch holds the whole training set, so one step is one epoch."""
    from click.testing import CliRunner

    from seqxduce.cli import add_plugin_commands

    out = tmp_path_factory.mktemp("shared-runs") / "tiny"
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(TINY_RECIPE), "--out", str(out),
                                                        "--set", "train.average_last=2",
                                                        "--set", "train.max_tokens=100000"])
    assert result.exit_code == 0, result.output
    return out
