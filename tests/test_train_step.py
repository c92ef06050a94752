"""One training step built from parts (seqxduce.training_run.TrainingRun) without a run directory: it updates the
model, and it is the step `seqxduce train` takes first."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seqxduce.data import collate
from seqxduce.recipe import load_recipe
from seqxduce.trainer import Trainer
from seqxduce.training_run import assemble
from tests.step_parts import step_parts

RECIPE = Path(__file__).resolve().parent / "fixtures" / "tiny.toml"
QUIET = ["train.validate_every=0", "train.valid_decode_examples=0"]


def first_step_batches(trainer: Trainer) -> tuple[list, int]:
    """The batches and global token count of the first planned step."""
    plan = next(trainer.plan.steps(trainer.state))
    vocab = trainer.tokenizers.vocab()
    batches = [collate([plan.pairs[i] for i in group], vocab.pad_id, vocab.bos_id, vocab.eos_id)
               for group in plan.group]
    return batches, plan.global_tokens


def test_one_step_from_parts_needs_no_run_directory_and_moves_the_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written beside the data
    trainer = Trainer(step_parts(load_recipe(RECIPE, QUIET)))
    assert trainer.rundir is None
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    figures = trainer.train_step(*first_step_batches(trainer))
    assert torch.isfinite(figures["loss"]) and float(figures["skipped_updates"]) == 0.0
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="without a run directory"):
        trainer.save()


def test_the_step_from_parts_is_the_first_step_of_an_assembled_run(tmp_path):
    recipe = load_recipe(RECIPE, QUIET)
    parts, assembled = Trainer(step_parts(recipe)), Trainer(assemble(recipe, tmp_path / "run"))
    assert all(torch.equal(a, b) for a, b in zip(parts.model.parameters(), assembled.model.parameters()))
    one, two = parts.train_step(*first_step_batches(parts)), assembled.train_step(*first_step_batches(assembled))
    assert torch.equal(one["loss"], two["loss"]) and torch.equal(one["grad_norm"], two["grad_norm"])
    assert all(torch.equal(a, b) for a, b in zip(parts.model.parameters(), assembled.model.parameters()))
    assembled.log.close()
