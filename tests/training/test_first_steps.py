"""The quick start and the Multi30k recipe train their first 100 steps bit for bit as the code at 80e374f did
(the same batches, losses, gradient norms and weights): see tests/training/first_steps.py for how the figures in
tests/fixtures/first_steps were recorded."""

from __future__ import annotations

import json

import pytest
import torch

from tests.training.first_steps import FIXTURES, cases, record


@pytest.fixture
def one_thread():
    # the figures were recorded on one thread: another count may sum a matrix product in another order
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _compare(name: str, got: dict) -> None:
    want = json.loads((FIXTURES / f"{name}.json").read_text())
    assert len(got["steps"]) == len(want["steps"])
    for step, (mine, theirs) in enumerate(zip(got["steps"], want["steps"]), start=1):
        assert mine == theirs, f"{name}: step {step} differs"
    assert got["weights"] == want["weights"]


def test_the_quick_start_trains_its_first_100_steps_as_before_and_again_from_the_prepared_data(
        tmp_path, monkeypatch, one_thread):
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    recipe, overrides = cases(tmp_path)["quickstart"]
    _compare("quickstart", record(recipe, overrides, tmp_path / "first"))
    _compare("quickstart", record(recipe, overrides, tmp_path / "second"))  # read from the prepared dataset


def test_the_multi30k_recipe_trains_its_first_100_steps_as_before(tmp_path, monkeypatch, one_thread, multi30k):
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    recipe, overrides = cases(multi30k.parents[1])["multi30k"]
    _compare("multi30k", record(recipe, overrides, tmp_path / "run"))
