"""Training 2N steps in one go equals N steps, a stop, and N more after --resume."""

import os
import signal

import pytest
import torch

from seqxduce import engine
from seqxduce.api import TrainingStopped, UserError
from seqxduce.recipe import load_recipe
from seqxduce.run_start import RunStart
from seqxduce.training import trainer as trainer_module
from seqxduce.training.run import assemble
from seqxduce.training.trainer import Trainer
from tests.tiny import TINY_RECIPE as RECIPE


def test_resume_continues_exactly(tmp_path):
    whole = engine.train(RECIPE, tmp_path / "whole", overrides=["train.max_steps=6"])
    engine.train(RECIPE, tmp_path / "split", overrides=["train.max_steps=3"])
    resumed = engine.train(engine.load_run_recipe(tmp_path / "split", ["train.max_steps=6"]), tmp_path / "split",
                           start=RunStart("resume"))
    assert whole.step == resumed.step == 6
    a = torch.load(sorted((tmp_path / "whole" / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    b = torch.load(sorted((tmp_path / "split" / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()


def test_epochs_roll_over_and_data_position_is_saved(tmp_path):
    trainer = Trainer(assemble(load_recipe(RECIPE, ["train.max_steps=40", "train.validate_every=0"]), tmp_path / "run"))
    trainer.run()
    assert trainer.state.epoch > 1
    saved = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    assert (saved["epoch"], saved["step_in_epoch"]) == (trainer.state.epoch, trainer.state.step_in_epoch)


def test_ctrl_c_drops_the_step_under_way_saves_the_last_done_and_resume_replays_it(tmp_path, monkeypatch):
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN in a shell's background job
    trainer = Trainer(assemble(load_recipe(RECIPE, ["train.validate_every=0", "train.checkpoint_every=100"]),
                               tmp_path / "run"))
    real_loss = trainer_module.label_smoothed_nll

    def ctrl_c_inside_step_three(*args):
        if trainer.state.step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, in the middle of the step's forward
        return real_loss(*args)

    monkeypatch.setattr(trainer_module, "label_smoothed_nll", ctrl_c_inside_step_three)
    with pytest.raises(UserError, match="interrupted at step 2; .*--resume; step 3, under way, was dropped"):
        trainer.run()
    monkeypatch.undo()
    saved = sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))
    assert [p.name for p in saved] == ["step_00000002.pt"]
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
    resumed = engine.train(engine.load_run_recipe(tmp_path / "run"), tmp_path / "run", start=RunStart("resume"))
    engine.train(RECIPE, tmp_path / "whole", overrides=["train.validate_every=0", "train.checkpoint_every=100"])
    a = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    b = torch.load(sorted((tmp_path / "whole" / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    assert resumed.step == 6 and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_second_signal_stops_at_once_and_keeps_the_checkpoints_written(tmp_path, monkeypatch, signum, exit_code):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    trainer = Trainer(assemble(load_recipe(RECIPE, ["train.validate_every=0", "train.checkpoint_every=2"]),
                               tmp_path / "run"))
    real_step = trainer.train_step

    def twice_during_step_four(*step):
        if trainer.state.step == 3:
            os.kill(os.getpid(), signum)
            os.kill(os.getpid(), signum)
        return real_step(*step)

    monkeypatch.setattr(trainer, "train_step", twice_during_step_four)
    with pytest.raises(TrainingStopped, match="interrupted during step 4; the last checkpoint is .*step_00000002.pt"
                       ) as stopped:
        trainer.run()
    assert stopped.value.exit_code == exit_code
    assert [p.name for p in sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))] == ["step_00000002.pt"]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # the handlers are put back


def test_resume_passes_over_a_damaged_latest_checkpoint(tmp_path):
    engine.train(RECIPE, tmp_path / "run", overrides=["train.max_steps=4", "train.checkpoint_every=2"])
    engine.train(RECIPE, tmp_path / "whole", overrides=["train.max_steps=6", "train.checkpoint_every=2"])
    latest = tmp_path / "run" / "checkpoints" / "step_00000004.pt"
    latest.write_bytes(latest.read_bytes()[:100])  # truncated, as by a full disk
    resumed = engine.train(tmp_path / "run" / "recipe.toml", tmp_path / "run", start=RunStart("resume"),
                           overrides=["train.max_steps=6"])
    assert resumed.step == 6
    a = torch.load(tmp_path / "run" / "checkpoints" / "step_00000006.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "whole" / "checkpoints" / "step_00000006.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_failed_resume_leaves_the_run_directory_as_it_was(tmp_path):
    engine.train(RECIPE, tmp_path / "run", overrides=["train.max_steps=2"])
    recipe_before = (tmp_path / "run" / "recipe.toml").read_text()
    with pytest.raises(UserError, match="does not fit the model.*resume without changing"):
        engine.train(tmp_path / "run" / "recipe.toml", tmp_path / "run", start=RunStart("resume"),
                     overrides=["model.d_model=32", "model.d_ff=32", "train.max_steps=4"])
    assert (tmp_path / "run" / "recipe.toml").read_text() == recipe_before
    assert len(engine.decode(tmp_path / "run", ["1 2 3"])) == 1


def test_resume_drops_a_stale_average(tmp_path):
    engine.train(RECIPE, tmp_path / "run", overrides=["train.max_steps=4", "train.average_last=2",
                                                      "train.checkpoint_every=2"])
    assert (tmp_path / "run" / "average.pt").is_file()
    engine.train(tmp_path / "run" / "recipe.toml", tmp_path / "run", start=RunStart("resume"),
                 overrides=["train.max_steps=6", "train.average_last=0"])
    assert not (tmp_path / "run" / "average.pt").exists()


def test_a_new_run_retrains_tokenizers_left_by_an_earlier_attempt(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "tokenizer.vocab").write_text("<pad>\n<s>\n</s>\n<unk>\nstale\n")
    engine.train(RECIPE, run, overrides=["train.max_steps=2"])
    assert "stale" not in (run / "tokenizer.vocab").read_text()
