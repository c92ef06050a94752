"""Fault injection: a non-finite loss or gradient. Its update is skipped and counted in metrics.jsonl, too many in
a row stop the run naming the step, and no NaN weights reach a checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from seqxduce.api import UserError
from seqxduce.recipe import load_recipe
from seqxduce.training import trainer as trainer_module
from seqxduce.training.run import assemble
from seqxduce.training.trainer import Trainer
from tests.tiny import TINY_RECIPE as TINY

SETTINGS = ["train.max_steps=20", "train.max_nonfinite_steps=3", "train.log_every=1", "train.checkpoint_every=2",
            "train.validate_every=0", "train.valid_decode_examples=0"]
POISONED = {3, 6, 7, 8}  # step 3 alone is skipped and training goes on; 6, 7, 8 in a row stop it


def _poison(trainer: Trainer, where: str, monkeypatch) -> None:
    """Make the loss (or only a gradient) NaN in the POISONED steps."""
    nan = float("nan")
    if where == "gradient":
        param = next(trainer.parts.model.parameters())
        param.register_hook(lambda grad: grad * nan if trainer.state.step + 1 in POISONED else grad)
        return
    real = trainer_module.label_smoothed_nll

    def poisoned_loss(*args, **kwargs):
        loss, nll = real(*args, **kwargs)
        return (loss * nan, nll) if trainer.state.step + 1 in POISONED else (loss, nll)

    monkeypatch.setattr(trainer_module, "label_smoothed_nll", poisoned_loss)


@pytest.mark.parametrize("where", ["loss", "gradient"])
def test_nonfinite_updates_are_skipped_counted_and_too_many_in_a_row_stop_the_run(tmp_path, monkeypatch, where):
    trainer = Trainer(assemble(load_recipe(TINY, SETTINGS), tmp_path / "run"))
    _poison(trainer, where, monkeypatch)
    with pytest.raises(UserError, match=r"stopped at step 8: the last 3 steps \(from step 6\) had a non-finite "
                                        r"loss or gradient.*max_nonfinite_steps = 3.*step_00000006.pt, is intact"):
        trainer.run()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    skipped = {r["step"] for r in records if r["kind"] == "train" and r.get("skipped_updates")}
    assert skipped == {3, 6, 7, 8}
    assert records[-1] == {**records[-1], "kind": "stopped", "step": 8, "skipped_in_a_row": 3}
    # 8 steps ran, 4 updates were skipped: Adam took 4 steps, and every weight is finite
    assert {int(s["step"]) for s in trainer.parts.optimizer.state_dict()["state"].values()} == {4}
    assert all(torch.isfinite(p).all() for p in trainer.parts.model.parameters())
    for path in sorted((tmp_path / "run" / "checkpoints").glob("step_*.pt")):
        weights = torch.load(path, weights_only=True)["model"]
        assert all(torch.isfinite(t).all() for t in weights.values() if t.is_floating_point()), path


def test_a_skipped_update_leaves_the_weights_as_they_were(tmp_path, monkeypatch):
    trainer = Trainer(assemble(load_recipe(TINY, [*SETTINGS, "train.max_steps=3"]), tmp_path / "run"))
    _poison(trainer, "gradient", monkeypatch)
    trainer.run()
    after_two = torch.load(tmp_path / "run" / "checkpoints" / "step_00000002.pt", weights_only=True)["model"]
    assert all(torch.equal(after_two[name], value) for name, value in trainer.parts.model.state_dict().items())


def test_nan_weights_never_reach_a_checkpoint(tmp_path):
    trainer = Trainer(assemble(load_recipe(TINY, [*SETTINGS, "train.max_steps=2"]), tmp_path / "run"))
    trainer.run()
    with torch.no_grad():
        next(trainer.parts.model.parameters())[0].fill_(float("nan"))
    trainer.state.step = 3
    with pytest.raises(UserError, match=r"step 3: .* holds NaN or inf, so no checkpoint was written; the last "
                                        r"checkpoint, .*step_00000002.pt, is intact"):
        trainer.save()
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step_00000002.pt"]


def test_the_run_of_skipped_updates_is_read_at_the_next_log_line_and_names_the_step_it_was_reached(tmp_path,
                                                                                                    monkeypatch):
    """The skip flags stay on the device between log lines (no wait per step): steps 6, 7, 8 reach the limit,
    the log line of step 10 reads it, and the run stops there naming step 8."""
    settings = [*SETTINGS, "train.log_every=5", "train.checkpoint_every=100"]
    trainer = Trainer(assemble(load_recipe(TINY, settings), tmp_path / "run"))
    _poison(trainer, "loss", monkeypatch)
    with pytest.raises(UserError, match=r"stopped at step 8: the last 3 steps \(from step 6\).*no checkpoint was "
                                        r"written yet"):
        trainer.run()
    assert trainer.state.step == 10
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [(r["step"], r["skipped_updates"]) for r in train] == [(5, 1), (10, 3)]
    assert records[-1] == {**records[-1], "kind": "stopped", "step": 8, "skipped_in_a_row": 3}
    assert all(torch.isfinite(p).all() for p in trainer.parts.model.parameters())
