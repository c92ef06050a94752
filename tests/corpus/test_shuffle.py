"""seqxduce.corpus.shuffle: random.shuffle's permutation of a range computed over arrays, the same to the bit, and the
Random left where random.shuffle leaves it (what keeps every epoch's batches those of before)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from seqxduce.corpus import shuffle
from seqxduce.corpus.arrays import length_batches


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4096, 4097, 10_001, 16_384, 16_385, 65_537, 300_001])
def test_the_permutation_and_the_state_after_are_random_shuffles(n):
    theirs, ours = random.Random(n), random.Random(n)
    theirs.random(), ours.random()  # a state part-way through the generator's words
    listed = list(range(n))
    theirs.shuffle(listed)
    got = shuffle.shuffled_range(ours, n)
    assert got.dtype == np.int32 and got.tolist() == listed
    assert ours.getstate() == theirs.getstate()


def test_the_array_path_is_taken_above_the_small_size_and_checked_against_this_interpreter():
    assert shuffle._matches_cpython()
    rng, reference = random.Random(5), random.Random(5)
    n = shuffle.SMALL * 3 + 7
    got = shuffle._shuffled_range(rng, n, np.int64)  # the array path itself, not the fallback
    listed = list(range(n))
    reference.shuffle(listed)
    assert got.tolist() == listed and rng.getstate() == reference.getstate()


def test_swaps_within_one_block_that_touch_the_same_positions_are_applied_in_order():
    # every j inside one block: each step's j is taken by earlier steps of the block, chains included
    for seed in range(20):
        rng = np.random.default_rng(seed)
        n = 300
        j = np.array([0] + [int(rng.integers(max(0, i - 5), i + 1)) for i in range(1, n)], dtype=np.int32)
        listed = list(range(n))
        for i in range(n - 1, 0, -1):
            listed[i], listed[j[i]] = listed[j[i]], listed[i]
        assert shuffle._final_positions(j, np.int32).tolist() == listed


def test_an_epoch_of_many_pairs_batches_as_the_pair_by_pair_walk_did():
    # few distinct lengths, a few thousand (ranked in uint16: a radix sort), more than 65,536 of them and wider
    # than a table of every (source, target) (ranked by np.unique, in int64): each the list.sort order
    rng = np.random.default_rng(3)
    for top, pairs, max_tokens in ((6, 30_000, 900), (400, 30_000, 900), (10_000, 70_000, 30_000)):
        src, tgt = rng.integers(1, top, pairs), rng.integers(0, top, pairs)
        want = _walked_batches(src.tolist(), tgt.tolist(), max_tokens, 7, 2)
        got = length_batches(src.astype(np.int16), tgt.astype(np.int16), max_tokens, 7, 2)
        assert list(got) == want


def _walked_batches(src: list[int], tgt: list[int], max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """The batching of before, pair by pair (random.shuffle, list.sort by (src, tgt), the greedy walk)."""
    rng = random.Random(seed * 100_003 + epoch)
    indices = list(range(len(src)))
    rng.shuffle(indices)
    indices.sort(key=lambda i: (src[i], tgt[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    longest_src = longest_tgt = 0
    for i in indices:
        s, t = src[i], tgt[i] + 1
        new_src, new_tgt = max(longest_src, s), max(longest_tgt, t)
        if current and (len(current) + 1) * (new_src + new_tgt) > max_tokens:
            batches.append(current)
            current, new_src, new_tgt = [], s, t
        current.append(i)
        longest_src, longest_tgt = new_src, new_tgt
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def test_a_random_of_another_kind_is_shuffled_by_its_own_shuffle():
    class Other(random.Random):
        def getrandbits(self, k: int) -> int:  # draws otherwise than the Mersenne Twister's outputs
            return super().getrandbits(k) ^ 1 if k > 1 else super().getrandbits(k)

    theirs, ours = Other(4), Other(4)
    listed = list(range(20_000))
    theirs.shuffle(listed)
    assert shuffle.shuffled_range(ours, 20_000).tolist() == listed
