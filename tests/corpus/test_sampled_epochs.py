"""Subword regularization in the trainer: a tokenizer that samples (Tokenizer.encode_sampled) gets the training
split encoded anew each epoch from ([train] seed, epoch), within the length caps and max_tokens; one that does
not (the default) trains on the deterministic pairs as before."""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from seqxduce.api import Example
from seqxduce.corpus import prepare
from seqxduce.corpus.sampled_epochs import EpochEncoder
from seqxduce.data import Pair
from seqxduce.recipe import load_recipe
from seqxduce.training.run import TrainingRun, assemble
from seqxduce.training.state import TrainState
from seqxduce.training.trainer import Trainer
from tests.tiny import TINY_RECIPE as RECIPE

SETTINGS = ["task.train_size=20", "train.max_steps=14", "train.max_tokens=60", "train.validate_every=0"]


class Splitting:
    """Ids are word lengths; sampling splits a word into two ids (its length then 0) with probability 1/2."""

    eos_id, vocab_size = 2, 50

    def __init__(self, samples: bool = True) -> None:
        self.samples, self.encoded = samples, 0

    def encode(self, text: str) -> list[int]:
        self.encoded += 1
        return [len(w) for w in text.split()]

    def encode_sampled(self, texts: list[str], seed: int) -> list[list[int]] | None:
        if not self.samples:
            return None
        rng = random.Random(seed)
        return [[i for w in text.split() for i in ([len(w), 0] if rng.random() < 0.5 else [len(w)])]
                for text in texts]


EXAMPLES = [Example(" ".join("w" * (1 + (i + j) % 4) for j in range(1 + i % 5)), "t " * (1 + i % 3))
            for i in range(40)]


def encoder(src=None, tgt=None, max_src=100, max_tgt=100, max_tokens=1000, seed=1) -> EpochEncoder:
    return EpochEncoder(EXAMPLES, src or Splitting(), tgt or Splitting(), max_src, max_tgt, max_tokens, seed)


def test_epochs_differ_and_one_epoch_is_the_same_from_any_encoder():
    first = encoder()
    assert first.pairs(1) != first.pairs(2)
    assert encoder().pairs(2) == first.pairs(2)
    assert encoder(seed=2).pairs(2) != first.pairs(2)
    deterministic = [Pair([len(w) for w in ex.source.split()] + [2], [1] * len(ex.target.split())) for ex in EXAMPLES]
    assert first.pairs(1) != deterministic


def test_a_tokenizer_that_does_not_sample_costs_nothing_and_trains_the_deterministic_pairs():
    src, tgt = Splitting(samples=False), Splitting(samples=False)
    plain = encoder(src, tgt)
    assert plain.pairs(1) is None and plain.pairs(2) is None
    assert src.encoded == tgt.encoded == 0


def test_the_side_that_does_not_sample_keeps_its_deterministic_ids():
    src, tgt = Splitting(samples=False), Splitting()
    one_sided = encoder(src, tgt)
    first, second = one_sided.pairs(1), one_sided.pairs(2)
    assert [p.src for p in first] == [p.src for p in second] == [src.encode(ex.source) + [2] for ex in EXAMPLES]
    assert first != second


def test_an_epoch_is_the_same_on_any_number_of_processes_and_read_from_mapped_files(tmp_path, monkeypatch):
    """Each shard samples from its own seed: the processes that encode it do not change the sample."""
    monkeypatch.setattr(prepare, "SHARD", 7)
    monkeypatch.setattr(prepare, "IN_PROCESS", 10)
    alone = encoder().pairs(3)
    shared = EpochEncoder(EXAMPLES, Splitting(), Splitting(), 100, 100, 1000, 1, folder=tmp_path, workers=2)
    pooled = shared.pairs(3)
    assert pooled == alone and isinstance(pooled.src_ids, np.memmap)
    assert [p.name for p in tmp_path.iterdir()] == ["epoch-000003"]
    shared.pairs(4)
    assert [p.name for p in tmp_path.iterdir()] == ["epoch-000004"]  # the epoch before is not read again
    other_seed = EpochEncoder(EXAMPLES, Splitting(), Splitting(), 100, 100, 1000, 2, folder=tmp_path)
    assert other_seed.pairs(4) != shared.pairs(4) == encoder().pairs(4)  # not another run's sample


def test_the_length_caps_and_max_tokens_hold_for_the_sampled_lengths():
    capped = encoder(max_src=5, max_tgt=3, max_tokens=7)
    plain = encoder(Splitting(samples=False), Splitting(samples=False), max_src=5, max_tgt=3)
    for epoch in (1, 2, 3):
        pairs = capped.pairs(epoch)
        assert all(len(p.src) <= 5 and len(p.tgt) + 1 <= 3 for p in pairs)
        # a sampled pair over max_tokens trains with its deterministic encoding, which fits the caps
        assert all(len(p.src) + len(p.tgt) + 1 <= 7 or 0 not in p.src + p.tgt for p in pairs)
        # every pair the deterministic encoding keeps trains, sampled or not
        assert len(pairs) >= sum(len(ex.source.split()) + 1 <= 5 and len(ex.target.split()) + 1 <= 3
                                 for ex in EXAMPLES)
    assert plain.pairs(1) is None


def doubling(tok, texts: list[str], seed: int) -> list[list[int]]:
    """A sampled encoding for a word tokenizer: each id doubled with probability 0.3, drawn from the seed."""
    rng = random.Random(seed)
    return [[i for i in tok.encode(text) for _ in range(1 + (rng.random() < 0.3))] for text in texts]


def sampling_run(out: Path) -> TrainingRun:
    """The tiny recipe's run, its word tokenizer(s) made to sample."""
    run = assemble(load_recipe(RECIPE, SETTINGS), out)
    for tok in {id(t): t for t in (run.tokenizers.src, run.tokenizers.tgt)}.values():
        tok.encode_sampled = partial(doubling, tok)
    return run


def planned(run: TrainingRun) -> list[tuple]:
    """The step plan from the run's state: position, batches and the pairs each batch holds."""
    return [(p.epoch, p.step_in_epoch, p.global_tokens, [[p.pairs[i] for i in batch] for batch in p.batch_indices])
            for p in run.plan.steps(run.state)]


def test_the_trainer_resamples_per_epoch_and_a_resume_plans_the_same_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    plain = assemble(load_recipe(RECIPE, SETTINGS), tmp_path / "plain")
    assert plain.plan.epoch_batches(2, None)[0] is plain.plan.train_pairs  # the word tokenizer does not sample
    first = sampling_run(tmp_path / "first")
    steps = planned(first)
    epochs = sorted({step[0] for step in steps})
    assert len(epochs) >= 3 and first.validator.pairs == plain.validator.pairs
    one, two = (first.plan.epoch_batches(epoch, None)[0] for epoch in epochs[:2])
    assert len(one) == len(plain.plan.train_pairs) and one != two and one != plain.plan.train_pairs
    for _, _, _, batches in steps:
        for batch in batches:  # the padded size of every batch of sampled pairs stays within max_tokens
            assert len(batch) * (max(len(p.src) for p in batch) + max(len(p.tgt) for p in batch) + 1) <= 60
    # a second process (a resume, another rank) at step 7 plans what the first did from there
    again = sampling_run(tmp_path / "again")
    again.state = TrainState(step=7, epoch=steps[7][0], step_in_epoch=steps[7][1])
    assert planned(again) == steps[7:]


@pytest.mark.parametrize("epoch", [1, 2])
def test_a_planned_step_collates_its_own_epochs_pairs(tmp_path, monkeypatch, epoch):
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    run = sampling_run(tmp_path / "run")
    step = next(p for p in run.plan.steps(run.state) if p.epoch == epoch)
    pairs, batches = run.plan.epoch_batches(epoch, None)
    assert step.pairs is pairs and step.batch_indices[0] == batches[0]
    collated = Trainer(run)._collated(step)
    assert collated[0].ntokens == sum(len(pairs[i].tgt) + 1 for i in batches[0])
