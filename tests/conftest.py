"""Shared fixtures: a plugin registry built from given plugin objects, and the shared data paths."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from seqxduce.plugins import Registry, new_manager, registry, reset_registry

SHARED = Path(__file__).resolve().parents[2] / "shared"


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


@pytest.fixture
def shared_dir() -> Path:
    assert SHARED.is_dir(), f"{SHARED} is missing: the tests need ../shared beside the repository"
    return SHARED


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
