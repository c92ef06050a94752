"""Several training corpora in one run: batches drawn across them by temperature (Arivazhagan et al. 2019:
p_i proportional to n_i^(1/T), here times the corpus's weight), and the tokenizer's text balanced the same way.

An epoch draws as many batches as the corpora fill together. Each draw picks a corpus with its probability, then
takes that corpus's next batch, from its own batching by length (corpus.arrays.length_batches) pass after pass:
a corpus drawn more often than it has batches starts a new, reshuffled pass; one drawn less often sees a part of
a pass that is reshuffled the next epoch. Every batch holds pairs of one corpus (one direction of a multilingual
task). The whole epoch is a function of ([train] seed, the epoch, the curriculum's cap) and the corpora, as a
one-corpus epoch is: a --resume and every rank of a world rebuild the same batches with no state of their own, and
a world's ranks split the epoch's batches as they split one corpus's (training.step_plan.RankEpoch)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from seqxduce.api import Example, UserError
from seqxduce.corpus.arrays import EpochBatches, length_batches


def temperature_shares(sizes: Sequence[int], weights: Sequence[float], temperature: float) -> np.ndarray:
    """Each corpus's probability of being drawn: weight_i * n_i^(1/T), normalised (T = 1: in proportion to size;
    T = inf: to the weights alone). Computed in logs, so that a small T over millions of pairs does not overflow;
    a corpus with no pairs or weight 0 is never drawn."""
    n = np.asarray(sizes, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    drawn = (n > 0) & (w > 0)
    if not drawn.any():
        return np.zeros(len(n))
    logs = np.full(len(n), -np.inf)
    logs[drawn] = np.log(w[drawn]) + np.log(n[drawn]) / temperature
    shares = np.exp(logs - logs[drawn].max())
    return shares / shares.sum()


def corpus_ranges(parts: Sequence[tuple[str, int]], weights: Mapping[str, float]) -> list[tuple[str, int, int]]:
    """(name, first pair, pairs) of each corpus, checked against the task's corpora: each one once."""
    ranges, start, seen = [], 0, set()
    for name, count in parts:
        if name in seen:
            raise UserError(f"the training corpus {name!r} comes in two places of the training split: a task must "
                            "stream each corpus's examples together")
        if weights and name not in weights:
            raise UserError(f"the training data hold a corpus {name!r} the task does not name "
                            f"(it has {', '.join(weights)}): prepare the data again")
        seen.add(name)
        ranges.append((name, start, count))
        start += count
    return ranges


def _pass_seed(seed: int, corpus: int, run: int) -> int:
    """The seed of one corpus's batching in its run-th pass of an epoch (length_batches adds the epoch)."""
    return (seed * 1_000_003 + corpus) * 10_007 + run


def mixture_batches(parts: Sequence[tuple[str, int]], weights: Mapping[str, float], temperature: float,
                    src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int, epoch: int,
                    max_source: int | None = None, bucket_width: int = 0) -> EpochBatches:
    """An epoch's batches across the corpora (parts: name and pairs of each, end to end in the arrays of lengths),
    as EpochBatches over the pairs' global indices: its batch_order is the order of the draws."""
    ranges = corpus_ranges(parts, weights)
    first = [length_batches(src_lengths[start:start + count], tgt_lengths[start:start + count], max_tokens,
                            _pass_seed(seed, k, 0), epoch, max_source=max_source, bucket_width=bucket_width)
             for k, (_, start, count) in enumerate(ranges)]
    held = np.array([len(batches) for batches in first], dtype=np.int64)
    # a corpus the curriculum's cap leaves without a batch is not drawn until it has one
    shares = temperature_shares([count if held[k] else 0 for k, (_, _, count) in enumerate(ranges)],
                                [weights.get(name, 1.0) for name, _, _ in ranges], temperature)
    total = int(held.sum())
    if total == 0:
        return EpochBatches(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    rng = np.random.Generator(np.random.PCG64([seed, epoch, len(ranges)]))
    drawn = rng.choice(len(ranges), size=total, p=shares)
    counts = np.bincount(drawn, minlength=len(ranges))
    orders, sizes = [], []
    for k, (_, start, _) in enumerate(ranges):
        order, size = _stream(first[k], counts[k], lambda run, k=k, start=start, count=ranges[k][2]: length_batches(
            src_lengths[start:start + count], tgt_lengths[start:start + count], max_tokens, _pass_seed(seed, k, run),
            epoch, max_source=max_source, bucket_width=bucket_width))
        orders.append(order + start)
        sizes.append(size)
    # the batches end to end corpus by corpus; the draws take each corpus's in its stream's order
    base = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank_in_corpus = np.zeros(total, dtype=np.int64)
    for k in range(len(ranges)):
        rank_in_corpus[drawn == k] = np.arange(counts[k])
    bounds = np.concatenate(([0], np.cumsum(np.concatenate(sizes)))).astype(np.int64)
    return EpochBatches(np.concatenate(orders), bounds, base[drawn] + rank_in_corpus)


def _stream(first: EpochBatches, wanted: int, another_pass: Callable[[int], EpochBatches]
            ) -> tuple[np.ndarray, np.ndarray]:
    """The first `wanted` batches of a corpus's passes in their shuffled order (pass 0 given, the next ones made
    by another_pass(run)): its pair indices end to end and each batch's size."""
    orders, sizes, have, run, batches = [], [], 0, 0, first
    while have < wanted:
        take = batches.batch_order[:wanted - have]
        lengths = np.diff(batches.bounds)[take]
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        orders.append(batches.order[np.repeat(batches.bounds[take], lengths) + within].astype(np.int64))
        sizes.append(lengths)
        have += len(take)
        run += 1
        if have < wanted:
            batches = another_pass(run)
    if not orders:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(orders), np.concatenate(sizes)


def batch_corpora(batches: EpochBatches, parts: Sequence[tuple[str, int]]) -> np.ndarray:
    """The corpus (its place in parts) of each batch in the epoch's order: what a test counts."""
    ends = np.cumsum([count for _, count in parts])
    firsts = np.array([batches.indices(k)[0] for k in range(len(batches))], dtype=np.int64)
    return np.searchsorted(ends, firsts, side="right")


class Balanced(Iterable[Example]):
    """A multi-corpus training split as a tokenizer reads it: corpus i's examples repeated or thinned evenly to
    share_i * (all examples), so that the vocabulary is learned from every language in the balance the batches
    draw them in, not from whatever the largest corpus holds. Deterministic (no draw): the k-th example of a corpus
    of n_i is read floor((k + 1) * r) - floor(k * r) times, r = share_i * N / n_i. Counting the corpora reads
    the split once more before the tokenizer does."""

    def __init__(self, examples: Iterable[Example], weights: Mapping[str, float], temperature: float):
        self.examples, self.weights, self.temperature = examples, dict(weights), temperature
        self._ratios: dict[str, float] | None = None

    def ratios(self) -> dict[str, float]:
        """How many times each corpus's examples are read, on average."""
        if self._ratios is None:
            sizes: dict[str, int] = {}
            for example in self.examples:
                sizes[example.corpus] = sizes.get(example.corpus, 0) + 1
            names = list(sizes)
            shares = temperature_shares([sizes[n] for n in names], [self.weights.get(n, 1.0) for n in names],
                                        self.temperature)
            total = sum(sizes.values())
            self._ratios = {n: float(share) * total / sizes[n] for n, share in zip(names, shares)}
        return self._ratios

    def __iter__(self) -> Iterator[Example]:
        ratios = self.ratios()
        seen: dict[str, int] = {}
        for example in self.examples:
            k = seen.get(example.corpus, 0)
            seen[example.corpus] = k + 1
            r = ratios[example.corpus]
            for _ in range(math.floor((k + 1) * r) - math.floor(k * r)):
                yield example
