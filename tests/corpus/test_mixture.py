"""Batches drawn across several training corpora by temperature (corpus/mixture.py): the shares of the formula,
every batch of one corpus, a function of (seed, epoch) alone, and a world's ranks splitting what one process takes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seqxduce.corpus.arrays import PairArrays, length_batches
from seqxduce.corpus.mixture import batch_corpora, mixture_batches, temperature_shares
from seqxduce.recipe import load_recipe
from seqxduce.training.state import TrainState
from seqxduce.training.step_plan import StepPlan
from tests.tiny import TINY_RECIPE

SIZES = (3000, 800, 150)


def _lengths(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[tuple[str, int]]]:
    rng = np.random.default_rng(seed)
    total = sum(SIZES)
    parts = [(name, size) for name, size in zip(("en-de", "en-fr", "en-cs"), SIZES)]
    return rng.integers(2, 30, total).astype(np.int16), rng.integers(1, 30, total).astype(np.int16), parts


def test_the_shares_are_the_temperature_formula():
    assert temperature_shares([100, 400], [1, 1], 1.0) == pytest.approx([0.2, 0.8])  # T = 1: by size
    assert temperature_shares([100, 400], [1, 1], math.inf) == pytest.approx([0.5, 0.5])  # T = inf: uniform
    assert temperature_shares([100, 400], [1, 1], 2.0) == pytest.approx([10 / 30, 20 / 30])  # n^(1/2): 10, 20
    assert temperature_shares([100, 400], [3, 1], math.inf) == pytest.approx([0.75, 0.25])  # the weights alone
    assert temperature_shares([100, 0], [1, 1], 5.0) == pytest.approx([1.0, 0.0])  # an empty corpus: never drawn
    # a small T over large corpora: no overflow, the largest takes everything
    assert temperature_shares([36_000_000, 10], [1, 1], 0.01) == pytest.approx([1.0, 0.0])


@pytest.mark.parametrize("temperature, weights", [(1.0, (1, 1, 1)), (5.0, (1, 1, 1)), (2.0, (1, 2, 0.5)),
                                                   (math.inf, (1, 1, 1))])
def test_over_10000_batches_each_corpus_takes_its_share_within_2_percent(temperature, weights):
    src, tgt, parts = _lengths()
    named = {name: w for (name, _), w in zip(parts, weights)}
    want = temperature_shares(SIZES, weights, temperature)
    drawn: list[np.ndarray] = []
    epoch = 0
    while sum(len(d) for d in drawn) < 10_000:
        epoch += 1
        batches = mixture_batches(parts, named, temperature, src, tgt, max_tokens=400, seed=1, epoch=epoch)
        drawn.append(batch_corpora(batches, parts))
    corpora = np.concatenate(drawn)[:10_000]
    got = np.bincount(corpora, minlength=len(parts)) / len(corpora)
    assert np.abs(got - want).max() < 0.02, (got, want)


def test_every_batch_holds_one_corpus_and_the_epoch_is_a_function_of_seed_and_epoch():
    src, tgt, parts = _lengths()
    weights = {name: 1.0 for name, _ in parts}
    batches = mixture_batches(parts, weights, 5.0, src, tgt, max_tokens=400, seed=3, epoch=2)
    ends = np.cumsum(SIZES)
    for k in range(len(batches)):
        indices = batches.indices(k)
        assert len(set(np.searchsorted(ends, indices, side="right").tolist())) == 1
        assert int((src[indices].max() + tgt[indices].max() + 1) * len(indices)) <= 400
    again = mixture_batches(parts, weights, 5.0, src, tgt, max_tokens=400, seed=3, epoch=2)
    assert list(again) == list(batches)
    assert list(mixture_batches(parts, weights, 5.0, src, tgt, max_tokens=400, seed=3, epoch=3)) != list(batches)
    # as many batches as the corpora fill together, the small corpus drawn more often than it has: passes anew
    alone = [len(length_batches(src[a:a + n], tgt[a:a + n], 400, 0, 1)) for a, n in zip((0, 3000, 3800), SIZES)]
    assert len(batches) == sum(alone)


def _plan(pairs: PairArrays, weights: dict[str, float], rank: int, world: int, update_freq: int) -> StepPlan:
    recipe = load_recipe(TINY_RECIPE, [f"train.update_freq={update_freq}", "train.max_tokens=400",
                                       "train.sampling_temperature=3", "train.max_steps=100000"])
    return StepPlan(recipe.train, pairs, None, rank=rank, world_size=world, corpus_weights=weights)


def test_two_ranks_take_between_them_the_batches_one_process_takes():
    src, tgt, parts = _lengths()
    offsets = [np.concatenate(([0], np.cumsum(lengths))).astype(np.int64) for lengths in (src, tgt)]
    pairs = PairArrays(np.zeros(int(offsets[0][-1]), dtype=np.int32), offsets[0],
                       np.zeros(int(offsets[1][-1]), dtype=np.int32), offsets[1], src, tgt, parts)
    weights = {name: 1.0 for name, _ in parts}
    one = _plan(pairs, weights, 0, 1, 2)
    ranks = [_plan(pairs, weights, r, 2, 1) for r in (0, 1)]
    state = TrainState()
    for mine, theirs0, theirs1 in zip(one.steps(state), ranks[0].steps(state), ranks[1].steps(state)):
        assert mine.batch_indices == theirs0.batch_indices + theirs1.batch_indices
        assert mine.global_tokens == theirs0.global_tokens == theirs1.global_tokens
        if mine.epoch > 1:
            break
    else:
        pytest.fail("the plan ended within its first epoch")


def test_one_corpus_is_batched_as_before():
    src, tgt, _ = _lengths()
    offsets = [np.concatenate(([0], np.cumsum(lengths))).astype(np.int64) for lengths in (src, tgt)]
    pairs = PairArrays(np.zeros(int(offsets[0][-1]), dtype=np.int32), offsets[0],
                       np.zeros(int(offsets[1][-1]), dtype=np.int32), offsets[1], src, tgt)
    plan = _plan(pairs, {}, 0, 1, 1)
    _, share = plan.epoch_batches(1, None)
    assert [share[k] for k in range(len(share))] == list(length_batches(src, tgt, 400, plan.settings.seed, 1))
