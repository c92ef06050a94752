"""Fixtures of the fault tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault_tools import HANG_GUARD_S
from tests.faults.cluster_tools import torchrun, train_args


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory) -> Path:
    """An uninterrupted run of two torchrun ranks (tests.faults.cluster_tools.SHORT), to compare with."""
    folder = tmp_path_factory.mktemp("two-ranks")
    launcher = torchrun(train_args(folder / "run"), folder / "log")
    assert launcher.wait(timeout=HANG_GUARD_S) == 0, (folder / "log").read_text()
    return folder / "run"
