"""One training step built from parts (seqxduce.training.run.TrainingRun) without a run directory: it updates the
model, and it is the step `seqxduce train` takes first."""

from __future__ import annotations

import pytest
import torch

from seqxduce.recipe import load_recipe
from seqxduce.training.in_memory import in_memory_run
from seqxduce.training.run import assemble
from seqxduce.training.trainer import Trainer
from tests.tiny import TINY_RECIPE as RECIPE

QUIET = ["train.validate_every=0", "train.valid_decode_examples=0"]


def first_step_batches(trainer: Trainer) -> tuple[list, int]:
    """The batches and global token count of the first planned step."""
    plan = next(trainer.parts.plan.steps(trainer.state))
    return plan.batches(trainer.parts.tokenizers.vocab()), plan.global_tokens


def test_one_step_from_parts_needs_no_run_directory_and_moves_the_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written beside the data
    trainer = Trainer(in_memory_run(load_recipe(RECIPE, QUIET)))
    assert trainer.parts.rundir is None
    before = {k: v.clone() for k, v in trainer.parts.model.state_dict().items()}
    figures = trainer.train_step(*first_step_batches(trainer))
    assert torch.isfinite(figures["loss"]) and float(figures["skipped_updates"]) == 0.0
    assert any(not torch.equal(before[k], v) for k, v in trainer.parts.model.state_dict().items())
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="without a run directory"):
        trainer.save()


def test_the_step_from_parts_is_the_first_step_of_an_assembled_run(tmp_path):
    recipe = load_recipe(RECIPE, QUIET)
    parts, assembled = Trainer(in_memory_run(recipe)), Trainer(assemble(recipe, tmp_path / "run"))
    assert all(torch.equal(a, b) for a, b in zip(parts.parts.model.parameters(), assembled.parts.model.parameters()))
    one, two = parts.train_step(*first_step_batches(parts)), assembled.train_step(*first_step_batches(assembled))
    assert torch.equal(one["loss"], two["loss"]) and torch.equal(one["grad_norm"], two["grad_norm"])
    assert all(torch.equal(a, b) for a, b in zip(parts.parts.model.parameters(), assembled.parts.model.parameters()))
    assembled.parts.log.close()
