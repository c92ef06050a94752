"""Token-count batching, sharding across ranks and padding."""

import random

import numpy as np
import pytest

from seqxduce.api import UserError
from seqxduce.corpus.arrays import length_batches, token_batches
from seqxduce.data import Pair, collate
from seqxduce.training.step_plan import RankEpoch, batches_for_step, steps_in_epoch


def pairs(n=200, seed=0):
    rng = random.Random(seed)
    return [Pair([5] * rng.randint(1, 30) + [2], [6] * rng.randint(1, 30)) for _ in range(n)]


def test_token_batches_cover_each_pair_once_and_respect_max_tokens():
    ps = pairs()
    batches = token_batches(ps, max_tokens=256, seed=1, epoch=1)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(ps)))
    for b in batches:
        width = max(len(ps[i].src) for i in b) + max(len(ps[i].tgt) + 1 for i in b)
        assert len(b) * width <= 256


def test_token_batches_group_similar_lengths():
    ps = pairs()
    batches = token_batches(ps, max_tokens=256, seed=1, epoch=1)
    padded = sum(len(b) * max(len(ps[i].src) for i in b) for b in batches)
    real = sum(len(p.src) for p in ps)
    assert padded / real < 1.3  # a random order would pad far more


def test_token_batches_deterministic_per_epoch_and_differ_across_epochs():
    ps = pairs()
    assert token_batches(ps, 256, 1, 1) == token_batches(ps, 256, 1, 1)
    assert token_batches(ps, 256, 1, 1) != token_batches(ps, 256, 1, 2)


def test_a_pair_larger_than_max_tokens_is_a_clear_error():
    with pytest.raises(UserError, match="max_tokens"):
        token_batches([Pair([1] * 50, [1] * 50)], max_tokens=20, seed=1, epoch=1)


def test_ranks_take_what_one_process_with_more_accumulation_takes():
    batches = [[i] for i in range(10)]
    single = [batches_for_step(batches, s, 0, 1, 4) for s in range(steps_in_epoch(10, 1, 4))]
    for s in range(steps_in_epoch(10, 2, 2)):
        union = batches_for_step(batches, s, 0, 2, 2) + batches_for_step(batches, s, 1, 2, 2)
        assert union == single[s]
    assert steps_in_epoch(10, 2, 2) == 2


@pytest.mark.parametrize(("world", "update_freq"), [(1, 1), (2, 1), (2, 3), (3, 2)])
def test_a_rank_keeps_only_its_share_of_the_epoch_and_every_ranks_token_count(world, update_freq):
    """RankEpoch holds the batches batches_for_step gives the rank, and per step the target tokens (eos
    included) of every rank's batches; the ranks' shares together are the epoch's batches once each."""
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 30, 3000), rng.integers(0, 30, 3000)
    epoch = length_batches(src, tgt, 200, seed=1, epoch=1)
    shares = [RankEpoch(epoch, tgt, rank, world, update_freq) for rank in range(world)]
    for rank, share in enumerate(shares):
        assert share.steps == steps_in_epoch(len(epoch), world, update_freq) > 0
        assert share.order.dtype == np.int32 and len(share) == share.steps * update_freq
        for step in range(share.steps):
            assert share.step(step) == batches_for_step(epoch, step, rank, world, update_freq)
            first = step * world * update_freq
            every = [epoch.indices(k) for k in range(first, first + world * update_freq)]
            assert int(share.step_tokens[step]) == sum(int(tgt[b].sum()) + len(b) for b in every)
    taken = sorted(i for share in shares for batch in share for i in batch)
    used = sorted(i for k in range(shares[0].steps * world * update_freq) for i in epoch[k])
    assert taken == used


def test_collate_shapes_and_shift():
    batch = collate([Pair([7, 8, 2], [4, 5]), Pair([9, 2], [6])], pad_id=0, bos_id=1, eos_id=2)
    assert batch.src.tolist() == [[7, 8, 2], [9, 2, 0]]
    assert batch.tgt_in.tolist() == [[1, 4, 5], [1, 6, 0]]
    assert batch.tgt_out.tolist() == [[4, 5, 2], [6, 2, 0]]
    assert batch.ntokens == 5


def test_source_buckets_line_up_targets_and_lower_the_padding():
    from seqxduce.corpus.arrays import padding_fraction

    rng = random.Random(0)
    pairs = [Pair([5] * rng.randint(2, 30), [6] * rng.randint(2, 30)) for _ in range(2000)]
    plain = token_batches(pairs, max_tokens=4000, seed=1, epoch=1)
    bucketed = token_batches(pairs, max_tokens=4000, seed=1, epoch=1, bucket_width=4)
    assert sorted(i for b in bucketed for i in b) == list(range(len(pairs)))  # every pair, once
    assert all(len(b) * (max(len(pairs[i].src) for i in b) + max(len(pairs[i].tgt) for i in b) + 1) <= 4000
               for b in bucketed)
    assert padding_fraction(pairs, bucketed) < 0.8 * padding_fraction(pairs, plain)
    assert bucketed == token_batches(pairs, max_tokens=4000, seed=1, epoch=1, bucket_width=4)  # from (seed, epoch)
    assert padding_fraction([Pair([1, 2], [3])], [[0]]) == 0.0


def test_the_prefetcher_yields_in_order_raises_the_threads_error_and_stops_on_exit():
    import threading

    from seqxduce.data import Prefetcher

    with Prefetcher(range(5), lambda i: i * i, depth=2) as ahead:
        assert list(ahead) == [(i, i * i) for i in range(5)]

    def fails(i):
        if i == 2:
            raise ValueError("no batch 2")
        return i

    with Prefetcher(range(5), fails) as ahead, pytest.raises(ValueError, match="no batch 2"):
        list(ahead)
    made = []
    with Prefetcher(range(10**6), made.append, depth=1) as ahead:
        next(iter(ahead))
    assert len(made) < 10 and not [t for t in threading.enumerate() if t.name == "seqxduce-prefetch"]
