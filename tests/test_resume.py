"""Training 2N steps in one go equals N steps, a stop, and N more after --resume."""

from pathlib import Path

import torch

from seqxduce import engine
from seqxduce.recipe import load_recipe
from seqxduce.trainer import Trainer

RECIPE = Path(__file__).resolve().parent / "fixtures" / "tiny.toml"


def test_resume_continues_exactly(tmp_path):
    whole = engine.train(RECIPE, tmp_path / "whole", overrides=["train.max_steps=6"])
    engine.train(RECIPE, tmp_path / "split", overrides=["train.max_steps=3"])
    resumed = engine.train(engine.load_run_recipe(tmp_path / "split", ["train.max_steps=6"]), tmp_path / "split",
                           resume=True)
    assert whole.step == resumed.step == 6
    a = torch.load(sorted((tmp_path / "whole" / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    b = torch.load(sorted((tmp_path / "split" / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()


def test_epochs_roll_over_and_data_position_is_saved(tmp_path):
    trainer = Trainer(load_recipe(RECIPE, ["train.max_steps=40", "train.validate_every=0"]), tmp_path / "run")
    trainer.run()
    assert trainer.state.epoch > 1
    saved = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    assert (saved["epoch"], saved["step_in_epoch"]) == (trainer.state.epoch, trainer.state.step_in_epoch)


def test_ctrl_c_saves_the_last_finished_step_and_resume_continues(tmp_path, monkeypatch):
    import pytest

    from seqxduce.api import UserError

    trainer = Trainer(load_recipe(RECIPE, ["train.validate_every=0", "train.checkpoint_every=100"]), tmp_path / "run")
    real_step = trainer.train_step

    def interrupt_at_four(group):
        if trainer.state.step == 3:
            raise KeyboardInterrupt
        return real_step(group)

    monkeypatch.setattr(trainer, "train_step", interrupt_at_four)
    with pytest.raises(UserError, match="interrupted at step 3.*--resume"):
        trainer.run()
    saved = sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))
    assert [p.name for p in saved] == ["step_00000003.pt"]
    resumed = engine.train(engine.load_run_recipe(tmp_path / "run"), tmp_path / "run", resume=True)
    engine.train(RECIPE, tmp_path / "whole", overrides=["train.validate_every=0", "train.checkpoint_every=100"])
    a = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    b = torch.load(sorted((tmp_path / "whole" / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    assert resumed.step == 6 and all(torch.equal(a[k], b[k]) for k in a)
