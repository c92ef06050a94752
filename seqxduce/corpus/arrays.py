"""The training corpus as arrays: encoded pairs as flat id arrays and offsets (PairArrays, memory-mapped for a
prepared dataset), and an epoch's batching by length over them (length_batches, the same batches as token_batches
over Pair objects, to the bit), so that an epoch of millions of pairs holds no Python object per pair."""

from __future__ import annotations

import mmap
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from seqxduce.api import UserError, VocabInfo
from seqxduce.corpus.shuffle import shuffled_range
from seqxduce.data import Batch, Pair, collate


def length_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int, epoch: int,
                   shuffle: bool = True, max_source: int | None = None, bucket_width: int = 0) -> EpochBatches:
    """token_batches over arrays of lengths (src as the encoder sees it, tgt without eos): the batches as arrays
    of pair indices, so that an epoch of millions of pairs holds no Python object per pair.

    The same batches as token_batches, to the bit: the same Python random stream shuffles the same index list,
    a stable sort orders it by the same key, and the batch order is shuffled by the same draws. Its transient
    lists are freed but stay in the heap: a caller that keeps the batches for long trims it (release_freed_memory),
    once it has built what it keeps from them."""
    return _length_batches(src_lengths, tgt_lengths, max_tokens, seed, epoch, shuffle, max_source, bucket_width)


def _length_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int, epoch: int,
                    shuffle: bool, max_source: int | None, bucket_width: int) -> EpochBatches:
    rng = random.Random(seed * 100_003 + epoch)
    index_type = np.int32 if len(src_lengths) < 2**31 else np.int64
    # the lengths are read as they are (a prepared dataset's mapped int16), never copied whole into int64
    kept = (np.arange(len(src_lengths), dtype=index_type) if max_source is None
            else np.flatnonzero(np.asarray(src_lengths) <= max_source).astype(index_type))
    if shuffle:
        # random.shuffle of the index list, as token_batches shuffles its pairs: its permutation to the bit,
        # computed over arrays (seqxduce.corpus.shuffle), and rng left as random.shuffle leaves it
        permutation = shuffled_range(rng, len(kept))
        kept = permutation if max_source is None else kept[permutation]
        del permutation
    # a stable sort by one integer key is list.sort's by the tuple key; pairs of equal lengths have equal keys, so
    # the sorted order is runs of equal (source, target) lengths, which the batching walks run by run. The keys
    # are ranked over the lengths in file order (reading them in sequence), then gathered in the epoch's order.
    ranks, lengths = _length_ranks(np.asarray(src_lengths), np.asarray(tgt_lengths), bucket_width)
    ranks = ranks[kept]
    order = kept[np.argsort(ranks, kind="stable")]
    del kept
    counts = np.bincount(ranks, minlength=len(lengths.src)) if len(order) else np.zeros(0, dtype=np.int64)
    present = counts > 0
    run_src, run_tgt, run_len = lengths.src[present], lengths.tgt[present] + 1, counts[present]
    too_big = np.flatnonzero(run_src + run_tgt > max_tokens)
    if too_big.size:
        s, t = int(run_src[too_big[0]]), int(run_tgt[too_big[0]])
        raise UserError(f"[train] max_tokens = {max_tokens} cannot hold one pair of {s}+{t} tokens; raise max_tokens "
                        "or lower max_source_len/max_target_len")
    starts = _greedy_starts(run_src, run_tgt, run_len, max_tokens)
    bounds = np.append(starts, len(order)).astype(np.int64)
    batch_order = shuffled_range(rng, len(starts)) if shuffle else np.arange(len(starts))
    # int32 indices: half the bytes a pair of int64 (the order is the one array per pair a rank holds alone)
    return EpochBatches(order.astype(index_type, copy=False), bounds, batch_order.astype(np.int64))


@dataclass
class _Lengths:
    """The distinct (source, target) lengths of the pairs in the order the batching sorts them."""

    src: np.ndarray
    tgt: np.ndarray


def _length_ranks(src: np.ndarray, tgt: np.ndarray, bucket_width: int) -> tuple[np.ndarray, _Lengths]:
    """Each pair's rank among the distinct (source, target) lengths in the batching's order: by (source, target),
    or with buckets by (source // bucket_width, target, source). uint16 when fewer than 65,536 distinct lengths (a
    corpus of sentences: a few thousand), so that the stable sort is numpy's radix sort."""
    width = int(max(src.max(initial=0), tgt.max(initial=0))) + 1
    code_type = np.int32 if width * width < 2**31 else np.int64
    code = src.astype(code_type)  # one integer per (source, target) lengths, in their order
    code *= width
    code += tgt
    table = width * width <= 1 << 26  # a table of every code (64M entries at most)
    codes = np.flatnonzero(np.bincount(code, minlength=width * width)) if table else np.unique(code)
    distinct_src, distinct_tgt = codes // width, codes % width
    by = (np.lexsort((distinct_src, distinct_tgt, distinct_src // bucket_width)) if bucket_width > 0
          else np.arange(len(codes)))
    rank_type = np.uint16 if len(codes) < 2**16 else np.int64
    place = np.empty(len(codes), dtype=rank_type)
    place[by] = np.arange(len(codes), dtype=rank_type)
    if table:
        lookup = np.zeros(width * width, dtype=rank_type)
        lookup[codes] = place
        ranks = lookup[code]
    else:
        ranks = place[np.searchsorted(codes, code)]
    return ranks, _Lengths(distinct_src[by], distinct_tgt[by])


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim). The transient lists of an epoch of
    millions of pairs are freed, but glibc keeps their pages (60 MB a million pairs, measured) for the process's
    life unless asked; elsewhere this does nothing."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is not None:
        trim(0)


def _greedy_starts(src: np.ndarray, tgt: np.ndarray, count: np.ndarray, max_tokens: int) -> np.ndarray:
    """Where each batch starts in the sorted order: a batch grows while its padded size stays within max_tokens.

    The order is given as runs of `count` pairs of equal lengths (src, tgt with its eos): within a run a batch's
    longest source and target do not change, so how many of the run join the batch under way, and how many whole
    batches the rest fill, is arithmetic. The same starts as walking the pairs one by one (the test
    test_batches_from_arrays_of_lengths_are_the_batches_of_before compares them with that walk)."""
    firsts: list[int] = []  # per run of new batches: where the first starts, how many pairs each takes, how many
    sizes: list[int] = []
    numbers: list[int] = []
    position = filled = longest_src = longest_tgt = 0
    for s, t, n in zip(src.tolist(), tgt.tolist(), count.tolist()):
        if filled:  # the batch under way takes what fits of the run
            new_src = s if s > longest_src else longest_src
            new_tgt = t if t > longest_tgt else longest_tgt
            room = max_tokens // (new_src + new_tgt) - filled
            if room > 0:
                take = min(room, n)
                filled, longest_src, longest_tgt = filled + take, new_src, new_tgt
                position, n = position + take, n - take
        if n:  # the rest fill new batches of `per` pairs, the last one maybe fewer
            per = max(1, max_tokens // (s + t))
            batches = -(-n // per)
            firsts.append(position)
            sizes.append(per)
            numbers.append(batches)
            filled, longest_src, longest_tgt = n - (batches - 1) * per, s, t
            position += n
    numbers_array = np.array(numbers, dtype=np.int64)
    within = np.arange(int(numbers_array.sum())) - np.repeat(np.cumsum(numbers_array) - numbers_array, numbers_array)
    return np.repeat(np.array(firsts, dtype=np.int64), numbers_array) + np.repeat(
        np.array(sizes, dtype=np.int64), numbers_array) * within


class EpochBatches(Sequence[list[int]]):
    """An epoch's batches as three arrays: the pair indices in length order, where each batch starts in them, and
    the batches' (shuffled) order. Indexing gives a batch as a list of pair indices, as token_batches does."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray, batch_order: np.ndarray):
        self.order, self.bounds, self.batch_order = order, bounds, batch_order

    def __len__(self) -> int:
        return len(self.batch_order)

    def indices(self, k: int) -> np.ndarray:
        """The pair indices of the k-th batch (an array)."""
        b = int(self.batch_order[k])
        return self.order[self.bounds[b]:self.bounds[b + 1]]

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self.indices(i).tolist() for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self.indices(k).tolist()

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented


def token_batches(pairs: Sequence[Pair], max_tokens: int, seed: int, epoch: int,
                  shuffle: bool = True, max_source: int | None = None, bucket_width: int = 0) -> list[list[int]]:
    """Group pair indices by length into batches whose padded source+target size stays within max_tokens.

    Sorting by length keeps padding small; ties are broken randomly per epoch and the batch order is
    shuffled, both from (seed, epoch), so any process can rebuild the same epoch without state.
    With max_source, only pairs whose source has at most that many tokens are batched.
    bucket_width 0 sorts by (source length, target length); above 0, by (source length // bucket_width, target
    length, source length): within a bucket of similar sources the targets line up too, which lowers the target
    padding of large batches (Multi30k at 16k tokens: 12.9% padding -> 8.4% with width 4).
    """
    src, tgt = lengths_of(pairs)
    return list(length_batches(src, tgt, max_tokens, seed, epoch, shuffle, max_source, bucket_width))


def lengths_of(pairs: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """(source lengths, target lengths) of pairs: a PairArrays' own arrays, or counted from Pair objects."""
    if isinstance(pairs, PairArrays):
        return pairs.src_lengths, pairs.tgt_lengths
    src = np.fromiter((len(p.src) for p in pairs), dtype=np.int64, count=len(pairs))
    tgt = np.fromiter((len(p.tgt) for p in pairs), dtype=np.int64, count=len(pairs))
    return src, tgt


class PairArrays(Sequence[Pair]):
    """Encoded pairs as flat id arrays and offsets per side (numpy arrays, memory-mapped files for a prepared
    dataset): a batch gathers its rows from them, and nothing per pair lives as a Python object. Indexing gives
    a Pair, for code and tests that read a few."""

    def __init__(self, src_ids: np.ndarray, src_offsets: np.ndarray, tgt_ids: np.ndarray, tgt_offsets: np.ndarray,
                 src_lengths: np.ndarray | None = None, tgt_lengths: np.ndarray | None = None,
                 parts: Sequence[tuple[str, int]] = ()):
        self.src_ids, self.src_offsets = src_ids, src_offsets
        # the training corpora of a task that has several (Task.corpus_weights), end to end in this order: each
        # one's name and how many pairs it holds here (after the length limits); empty for one corpus
        self.parts: tuple[tuple[str, int], ...] = tuple((str(name), int(count)) for name, count in parts)
        self.tgt_ids, self.tgt_offsets = tgt_ids, tgt_offsets
        # the lengths are what batching reads for every pair: a prepared dataset maps its own (shared by the
        # ranks), else they are computed here (4 bytes a side a pair)
        self.src_lengths = np.diff(src_offsets).astype(np.int32) if src_lengths is None else src_lengths
        self.tgt_lengths = np.diff(tgt_offsets).astype(np.int32) if tgt_lengths is None else tgt_lengths

    @classmethod
    def from_pairs(cls, pairs: Sequence[Pair], parts: Sequence[tuple[str, int]] = ()) -> PairArrays:
        """The arrays of a list of Pair objects (a small split, or ids encoded in memory); parts: see __init__."""
        src_ids, src_offsets = flat_ids([p.src for p in pairs])
        tgt_ids, tgt_offsets = flat_ids([p.tgt for p in pairs])
        return cls(src_ids, src_offsets, tgt_ids, tgt_offsets, parts=parts)

    def __len__(self) -> int:
        return len(self.src_lengths)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return Pair(self.source(i), self.target(i))

    def source(self, i: int) -> list[int]:
        return self.src_ids[self.src_offsets[i]:self.src_offsets[i + 1]].tolist()

    def target(self, i: int) -> list[int]:
        return self.tgt_ids[self.tgt_offsets[i]:self.tgt_offsets[i + 1]].tolist()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PairArrays):
            return (len(self) == len(other) and np.array_equal(self.src_offsets, other.src_offsets)
                    and np.array_equal(self.tgt_offsets, other.tgt_offsets)
                    and np.array_equal(self.src_ids, other.src_ids) and np.array_equal(self.tgt_ids, other.tgt_ids))
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def release_pages(self) -> None:
        """Unmap the pages of the ids and offsets that gathering rows mapped into this process (a memory-mapped
        dataset; arrays in memory are left alone). They stay in the page cache, shared, and map again when read:
        the kernel maps whole page-cache folios around each row read (about 10 MB for a batch of 30 rows of a
        large corpus), which would otherwise accumulate in every rank's resident set for its whole life."""
        if not hasattr(mmap, "MADV_DONTNEED"):  # a system without madvise (Windows) keeps them mapped
            return
        for array in (self.src_ids, self.src_offsets, self.tgt_ids, self.tgt_offsets):
            mapped = getattr(array, "_mmap", None)  # np.memmap's own mmap object
            if mapped is not None:
                mapped.madvise(mmap.MADV_DONTNEED)

    def collate(self, indices: Sequence[int], vocab: VocabInfo) -> Batch:
        """The batch of the pairs at `indices`, padded and framed as collate() frames Pair objects."""
        indices = [int(j) for j in indices]
        src_len = int(max(self.src_lengths[j] for j in indices))
        tgt_len = int(max(self.tgt_lengths[j] for j in indices)) + 1
        bsz = len(indices)
        src = torch.full((bsz, src_len), vocab.pad_id, dtype=torch.long)
        tgt_in = torch.full((bsz, tgt_len), vocab.pad_id, dtype=torch.long)
        tgt_out = torch.full((bsz, tgt_len), vocab.pad_id, dtype=torch.long)
        ntokens = 0
        for row, j in enumerate(indices):
            s = torch.from_numpy(np.asarray(self.src_ids[self.src_offsets[j]:self.src_offsets[j + 1]], dtype=np.int64))
            t = torch.from_numpy(np.asarray(self.tgt_ids[self.tgt_offsets[j]:self.tgt_offsets[j + 1]], dtype=np.int64))
            src[row, : len(s)] = s
            tgt_in[row, 0] = vocab.bos_id
            tgt_in[row, 1 : len(t) + 1] = t
            tgt_out[row, : len(t)] = t
            tgt_out[row, len(t)] = vocab.eos_id
            ntokens += len(t) + 1
        return Batch(src, tgt_in, tgt_out, ntokens)


def flat_ids(sequences: Sequence[Sequence[int]], dtype: np.dtype | type = np.int32) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of ids as one flat array and offsets (len + 1 of them, int64)."""
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sequences], out=offsets[1:])
    ids = np.fromiter((i for s in sequences for i in s), dtype=dtype, count=int(offsets[-1]))
    return ids, offsets


def padding_fraction(pairs: Sequence[Pair], batches: list[list[int]]) -> float:
    """The share of the padded source+target positions of `batches` that are padding."""
    real = padded = 0
    for batch in batches:
        src = max(len(pairs[i].src) for i in batch)
        tgt = max(len(pairs[i].tgt) for i in batch) + 1
        real += sum(len(pairs[i].src) + len(pairs[i].tgt) + 1 for i in batch)
        padded += (src + tgt) * len(batch)
    return 1.0 - real / max(padded, 1)


def collate_indices(pairs: Sequence[Pair], indices: Sequence[int], vocab: VocabInfo) -> Batch:
    """The batch of pairs[j] for j in indices, padded and framed with the vocabulary's special ids."""
    if isinstance(pairs, PairArrays):
        return pairs.collate(indices, vocab)
    return collate([pairs[j] for j in indices], vocab.pad_id, vocab.bos_id, vocab.eos_id)
