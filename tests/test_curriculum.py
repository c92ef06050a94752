"""The length curriculum ([train] curriculum_start_len / curriculum_steps): short sources first."""

from pathlib import Path

import pytest
import torch

from seqxduce import engine
from seqxduce.api import UserError
from seqxduce.corpus.arrays import token_batches
from seqxduce.data import Pair
from seqxduce.recipe import load_recipe
from seqxduce.run_start import RunStart
from seqxduce.training.run import assemble
from seqxduce.training.state import TrainState
from seqxduce.training.step_plan import curriculum_cap
from seqxduce.training.trainer import Trainer
from tests.tiny import TINY_RECIPE as RECIPE

CURRICULUM = ["train.curriculum_start_len=3", "train.curriculum_steps=8", "train.validate_every=0",
              "train.max_tokens=60"]


def test_cap_grows_linearly_from_the_start_to_the_longest_source_then_is_off():
    caps = [curriculum_cap(step, 3, 8, 11) for step in range(10)]
    assert caps == [3, 4, 5, 6, 7, 8, 9, 10, None, None]
    assert curriculum_cap(0, 0, 8, 11) is None  # off
    assert curriculum_cap(0, 11, 8, 11) is None  # nothing longer to hold back


def test_a_hold_keeps_the_start_cap_then_grows_as_without_it():
    caps = [curriculum_cap(step, 3, 8, 11, hold=4) for step in range(14)]
    assert caps == [3, 3, 3, 3, 3, 4, 5, 6, 7, 8, 9, 10, None, None]
    assert caps[4:] == [curriculum_cap(step, 3, 8, 11) for step in range(10)]
    assert curriculum_cap(2, 0, 8, 11, hold=4) is None  # a hold does not turn a curriculum on


def test_token_batches_keep_only_sources_within_the_cap():
    pairs = [Pair([5] * n, [6] * n) for n in (1, 2, 3, 4, 5, 6, 2, 3)]
    batches = token_batches(pairs, max_tokens=20, seed=0, epoch=0, max_source=3)
    kept = sorted(i for batch in batches for i in batch)
    assert kept == [i for i, p in enumerate(pairs) if len(p.src) <= 3]


def _longest_source_per_step(trainer: Trainer, monkeypatch) -> list[int]:
    """Run the trainer; the longest source (tokens) of each step's batches."""
    longest_per_step = []
    real_step = trainer.train_step

    def record(batches, global_tokens):
        longest_per_step.append(max(batch.src.shape[1] for batch in batches))  # padded to the batch's longest
        return real_step(batches, global_tokens)

    monkeypatch.setattr(trainer, "train_step", record)
    trainer.run()
    return longest_per_step


def test_training_sees_only_short_sources_early_and_every_length_later(tmp_path, monkeypatch):
    trainer = Trainer(assemble(load_recipe(RECIPE, CURRICULUM + ["train.max_steps=12"]), tmp_path / "run"))
    longest_per_step = _longest_source_per_step(trainer, monkeypatch)
    assert trainer.parts.plan.longest_source == 7  # sources of up to 6 symbols, plus eos
    caps = [curriculum_cap(step, 3, 8, 7) or 7 for step in range(12)]
    assert all(longest <= cap for longest, cap in zip(longest_per_step, caps)), (longest_per_step, caps)
    assert longest_per_step[0] <= 3 and max(longest_per_step[8:]) == 7


def test_resume_inside_the_curriculum_continues_exactly(tmp_path):
    whole = engine.train(RECIPE, tmp_path / "whole", overrides=CURRICULUM + ["train.max_steps=12"])
    engine.train(RECIPE, tmp_path / "split", overrides=CURRICULUM + ["train.max_steps=5"])
    resumed = engine.train(engine.load_run_recipe(tmp_path / "split", ["train.max_steps=12"]), tmp_path / "split",
                           start=RunStart("resume"))
    assert whole.step == resumed.step == 12
    a = torch.load(sorted((tmp_path / "whole" / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    b = torch.load(sorted((tmp_path / "split" / "checkpoints").glob("*.pt"))[-1], weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_training_with_a_hold_sees_only_short_sources_until_the_hold_ends(tmp_path, monkeypatch):
    hold = ["train.curriculum_hold_steps=6", "train.max_steps=16"]
    trainer = Trainer(assemble(load_recipe(RECIPE, CURRICULUM + hold), tmp_path / "run"))
    longest_per_step = _longest_source_per_step(trainer, monkeypatch)
    caps = [curriculum_cap(step, 3, 8, 7, hold=6) or 7 for step in range(16)]
    assert caps[:7] == [3] * 7 and caps[14:] == [7, 7]
    assert all(longest <= cap for longest, cap in zip(longest_per_step, caps)), (longest_per_step, caps)
    assert max(longest_per_step[:7]) <= 3 < max(longest_per_step[7:])


def test_a_start_without_steps_or_below_every_source_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="curriculum_steps"):
        load_recipe(RECIPE, ["train.curriculum_start_len=3"])
    with pytest.raises(UserError, match=r"hold_steps = 5 is not read with \[train\] curriculum_start_len = 0"):
        load_recipe(RECIPE, ["train.curriculum_hold_steps=5"])
    with pytest.raises(UserError, match="curriculum_start_len = 1 leaves no training pair"):
        Trainer(assemble(load_recipe(RECIPE, ["train.curriculum_start_len=1", "train.curriculum_steps=4"]),
                tmp_path / "run")).run()


def test_the_addition_recipe_trains_short_sums_alone_through_its_hold_then_every_length(tmp_path):
    """recipes/ut_addition_cpu.toml relies on its hold: sources of at most 12 symbols (3-12, every one of those
    lengths) for the first 10,000 steps, where the UT learns the short sums after its plateau, then longer ones
    joining until every length up to 40 trains from step 11,000 on."""
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "ut_addition_cpu.toml"
    plan = assemble(load_recipe(recipe), tmp_path / "run").plan
    assert plan.longest_source == 41  # 40 symbols and eos (the bos source_bos adds is the encoder's)
    held, grown = set(), set()
    for step, planned in enumerate(plan.steps(TrainState())):
        if step == 11_200:
            break
        lengths = {len(planned.pairs[i].src) for batch in planned.batch_indices for i in batch}
        (held if step < 10_000 else grown).update(lengths)
    assert held == set(range(4, 14))  # 3-12 symbols plus eos: every short length, nothing longer
    assert max(grown) == 41 and min(grown) <= 13
