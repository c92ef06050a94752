"""Python's random.shuffle of list(range(n)), computed with numpy: the same permutation to the bit, and the
random.Random left in the same state, without a Python object or a Python step per element.

The batching of an epoch (arrays.length_batches) shuffles its pairs with random.shuffle, so that every epoch of every
run so far keeps its batches. At 36M pairs that is a list of 36M ints (1.4 GB) and 36M interpreted steps: most of a
minute before a run's first step. Both halves of random.shuffle are computed here over arrays instead:

- the draws. CPython's shuffle takes, for i = n-1 down to 1, j = _randbelow(i+1): k = (i+1).bit_length() bits
  of the next 32-bit Mersenne Twister output (getrandbits(k) = output >> (32 - k), k <= 32), drawn again while
  not below i+1. numpy's MT19937 is the same generator, so it continues from the Random's state and gives the same
  outputs. Which output serves which i is sequential (a rejected output moves every later one along), so it is
  found by a fixed point over a window of outputs (whose bounds share their bit length k): guess how many were
  accepted before each, recompute the acceptances from the guess, until the guess repeats. The guess is right up
  to the first output whose acceptance it changed, and an error changes an acceptance only when the output falls
  within it of the bound (about error / 2^k of the time), so a window of up to 2^k / 64 outputs settles in two or
  three rounds.
- the swaps. Step i swaps positions i and j_i, in descending i; position i is final after it. They are applied
  to an array a block of steps at a time: within a block, what step i takes from j_i is what the block's latest
  earlier step with the same j put there (else what the array held), and what it puts there is what sat at i,
  which only an earlier step of the block whose j is i can have changed; grouping the block's steps by j (a sort
  of a few thousand) finds both, and chains of them are followed by pointer doubling. So the n swaps cost a
  gather and a scatter of the array, and a block's sort, instead of n interpreted steps.

When the interpreter's random module is not CPython's (a getrandbits of another kind) the result is checked once
on a small list and this falls back to random.shuffle itself.
"""

from __future__ import annotations

import functools
import random

import numpy as np

SMALL = 10_000  # below this many elements random.shuffle itself is as fast
WINDOW = 1 << 16  # Mersenne Twister outputs settled at a time, at most
WINDOW_MIN = 16
BLOCK = 1 << 12  # swaps applied at a time (a block's sort stays in the cache: 2x faster than 1 << 16)


def shuffled_range(rng: random.Random, n: int) -> np.ndarray:
    """list(range(n)) after rng.shuffle(), as an int64 array (int32 below 2**31 elements); rng is advanced exactly
    as rng.shuffle() of a list of n advances it."""
    dtype = np.int32 if n < 2**31 else np.int64
    # a subclass may draw otherwise (its own getrandbits or random): random.shuffle itself then
    if n < SMALL or n >= 2**32 or type(rng) is not random.Random or not _matches_cpython():
        listed = list(range(n))
        rng.shuffle(listed)
        return np.array(listed, dtype=dtype)
    return _shuffled_range(rng, n, dtype)


def _shuffled_range(rng: random.Random, n: int, dtype: type) -> np.ndarray:
    return _final_positions(_draws(rng, n), dtype)


def _draws(rng: random.Random, n: int) -> np.ndarray:
    """j_i of every step of random.shuffle of n elements (j[i] for i = 1 .. n-1; j[0] = 0), rng advanced past the
    outputs they took."""
    version, internal, gauss = rng.getstate()
    generator = np.random.MT19937()
    generator.state = {"bit_generator": "MT19937", "state": {"key": np.array(internal[:-1], dtype=np.uint32),
                                                              "pos": int(internal[-1])}}
    j = np.zeros(n, dtype=np.int32 if n < 2**31 else np.int64)
    bound = n  # the next accepted output is j of step bound-1: below bound
    while bound >= 2:
        bits = bound.bit_length()
        # a window of outputs that serve bounds of the same bit length however many are accepted (every output
        # drawn is taken), and few enough beside 2^bits that a wrong guess rarely changes an acceptance
        count = min(bound - (1 << (bits - 1)) + 1, max(WINDOW_MIN, min(WINDOW, (1 << bits) >> 6)))
        top = (generator.random_raw(count) >> np.uint64(32 - bits)).astype(np.int64)  # getrandbits(bits)
        before, accepted = _accepted(bound - top)
        served = bound - before[accepted]
        j[served - 1] = top[accepted]
        bound -= len(served)
    state = generator.state["state"]
    rng.setstate((version, (*(int(w) for w in state["key"]), int(state["pos"])), gauss))
    return j


def _accepted(room: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a window of outputs, how many of the window's earlier outputs were accepted, and whether each is. An
    output is accepted when its bits are below the bound of the step it serves (the window's first bound minus the
    outputs accepted before it), that is when the accepted before it are fewer than room (first bound - bits)."""
    size = len(room)
    # first guess: every output accepted with the chance of the first (the fraction of its power of two)
    chance = float(np.mean(room > 0))
    before = (np.arange(size) * chance).astype(np.int64)
    counted = np.zeros(size, dtype=np.int64)
    settled = 0  # the guess is known right before this output
    while True:
        accepted = before[settled:] < room[settled:]
        counted[settled] = before[settled]
        np.cumsum(accepted[:-1], out=counted[settled + 1:])
        counted[settled + 1:] += before[settled]
        changed = np.flatnonzero(counted[settled:] != before[settled:])
        if not len(changed):
            full = np.empty(size, dtype=bool)
            full[:settled] = before[1:settled + 1] != before[:settled] if settled else full[:0]
            full[settled:] = accepted
            return before, full
        # the guess was right up to its first change, and the counts from it are right up to there too
        settled += int(changed[0])
        before[settled:] = counted[settled:]


def _final_positions(j: np.ndarray, dtype: type) -> np.ndarray:
    """list(range(n)) after the swaps (i, j[i]) for i = n-1 down to 1, a block of BLOCK steps at a time."""
    n = len(j)
    held = np.arange(n, dtype=dtype)
    for hi in range(n, 1, -BLOCK):
        _swap_block(held, j, max(1, hi - BLOCK), hi)
    return held


def _swap_block(held: np.ndarray, j: np.ndarray, lo: int, hi: int) -> None:
    """The swaps (i, j[i]) for i = hi-1 down to lo, applied to held in place.

    In the block's order (step t swaps position i_t = hi-1-t with j_t), what step t takes from j_t is what the
    block's latest earlier step with the same j put there, else what held had there; what it puts there is what
    sat at i_t, which only a block's earlier step with j = i_t can have changed (a j is never above its i, and i
    only falls). Both are found by grouping the block's steps by j (a stable sort of one block)."""
    size = hi - lo
    steps = np.arange(size)
    at_i = hi - 1 - steps  # i of each step, in the block's order
    at_j = j[lo:hi][::-1].astype(np.int64)
    # grouped by j, in the block's order within a group: the keys are distinct, so any sort is that stable one
    order = np.argsort(at_j * size + steps)
    grouped = at_j[order]
    same = grouped[1:] == grouped[:-1]
    # the block's latest earlier step with the same j (-1: none)
    previous = np.full(size, -1)
    previous[order[1:][same]] = order[:-1][same]
    # the block's latest earlier step that put something at i_t: the last of the steps with j = i_t before t (a
    # j inside the block: the groups at the end of the sorted order), the one before it when that is t itself
    ends = np.flatnonzero(np.append(~same, True))  # each group's last
    inside = ends[grouped[ends] >= lo]
    target = hi - 1 - grouped[inside]  # the step whose i is that j
    last = order[inside]
    before = np.where(np.append(False, same)[inside], order[inside - 1], -1)  # the group's one before its last
    into = np.full(size, -1)
    into[target] = np.where(last != target, last, before)
    # what sat at i_t when step t ran: held[i] at the end of the chain of `into`
    source = np.where(into >= 0, into, steps)
    while True:
        further = source[source]
        if np.array_equal(further, source):
            break
        source = further
    moved = held[at_i[source]]
    taken = np.where(previous >= 0, moved[np.maximum(previous, 0)], held[at_j])
    # every j gets what its block's last step put there; then each i its final element (a j inside the block is
    # some later step's i, which this overrides)
    held[grouped[ends]] = moved[order[ends]]
    held[lo:hi] = taken[::-1]


@functools.cache
def _matches_cpython() -> bool:
    """Whether this interpreter's random.shuffle is the one computed here (checked once, on a small list)."""
    for n in (SMALL + 1, 3 * SMALL):
        ours, theirs = random.Random(n), random.Random(n)
        listed = list(range(n))
        theirs.shuffle(listed)
        try:
            same = _shuffled_range(ours, n, np.int64).tolist() == listed
        except (ValueError, TypeError, KeyError):
            return False
        if not same or ours.getstate() != theirs.getstate():
            return False
    return True
