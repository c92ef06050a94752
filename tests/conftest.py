"""Shared fixtures: a plugin registry built from given plugin objects, and the shared data paths."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from seqxduce.registry import Registry, new_manager, registry, reset_registry

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
