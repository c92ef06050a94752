"""From examples to padded batches: encoding, token-count batching by length, sharding across ranks."""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from seqxduce.api import Example, Tokenizer, UserError, VocabInfo

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Pair:
    """One encoded training pair: source ids ending in eos, target ids (no bos, no eos)."""

    src: list[int]
    tgt: list[int]


@dataclass
class Batch:
    """Padded tensors for teacher forcing: src (B, S), tgt_in = bos + y (B, T), tgt_out = y + eos (B, T)."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    ntokens: int  # target tokens that count in the loss (eos included)

    def to(self, device: torch.device) -> Batch:
        """On `device`; from pinned memory the copy to a GPU is asynchronous (the host does not wait)."""
        return Batch(self.src.to(device, non_blocking=True), self.tgt_in.to(device, non_blocking=True),
                     self.tgt_out.to(device, non_blocking=True), self.ntokens)

    def pin_memory(self) -> Batch:
        """In page-locked host memory, which a GPU copies from without the host waiting."""
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(), self.ntokens)


def encode_source(tokenizer: Tokenizer, text: str) -> list[int]:
    """Source ids as the encoder sees them: the text's ids followed by eos."""
    return tokenizer.encode(text) + [tokenizer.eos_id]


def within_limits(src: list[int], tgt: list[int], max_src: int, max_tgt: int) -> bool:
    """Whether an encoded pair fits the length caps: src as the encoder sees it (eos included), tgt plus the eos
    the loss adds."""
    return len(src) <= max_src and len(tgt) + 1 <= max_tgt


def encode_pairs(
    examples: Sequence[Example], src_tok: Tokenizer, tgt_tok: Tokenizer, max_src: int, max_tgt: int
) -> tuple[list[Pair], int]:
    """Encode examples, skipping pairs over the length limits; returns the pairs and how many were skipped."""
    pairs: list[Pair] = []
    skipped = 0
    for ex in examples:
        src = encode_source(src_tok, ex.source)
        tgt = tgt_tok.encode(ex.target)
        if not within_limits(src, tgt, max_src, max_tgt):
            skipped += 1
            continue
        pairs.append(Pair(src, tgt))
    return pairs, skipped


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
    rng = random.Random(seed * 100_003 + epoch)
    order = [i for i, p in enumerate(pairs) if max_source is None or len(p.src) <= max_source]
    if shuffle:
        rng.shuffle(order)
    if bucket_width > 0:
        order.sort(key=lambda i: (len(pairs[i].src) // bucket_width, len(pairs[i].tgt), len(pairs[i].src)))
    else:
        order.sort(key=lambda i: (len(pairs[i].src), len(pairs[i].tgt)))
    batches: list[list[int]] = []
    current: list[int] = []
    longest_src = longest_tgt = 0
    for i in order:
        s, t = len(pairs[i].src), len(pairs[i].tgt) + 1
        if s + t > max_tokens:
            raise UserError(
                f"[train] max_tokens = {max_tokens} cannot hold one pair of {s}+{t} tokens; raise max_tokens "
                "or lower max_source_len/max_target_len"
            )
        new_src, new_tgt = max(longest_src, s), max(longest_tgt, t)
        if current and (len(current) + 1) * (new_src + new_tgt) > max_tokens:
            batches.append(current)
            current, new_src, new_tgt = [], s, t
        current.append(i)
        longest_src, longest_tgt = new_src, new_tgt
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def padding_fraction(pairs: Sequence[Pair], batches: list[list[int]]) -> float:
    """The share of the padded source+target positions of `batches` that are padding."""
    real = padded = 0
    for batch in batches:
        src = max(len(pairs[i].src) for i in batch)
        tgt = max(len(pairs[i].tgt) for i in batch) + 1
        real += sum(len(pairs[i].src) + len(pairs[i].tgt) + 1 for i in batch)
        padded += (src + tgt) * len(batch)
    return 1.0 - real / max(padded, 1)


def collate(pairs: Sequence[Pair], pad_id: int, bos_id: int, eos_id: int) -> Batch:
    """Pad a list of pairs into a Batch."""
    bsz = len(pairs)
    src_len = max(len(p.src) for p in pairs)
    tgt_len = max(len(p.tgt) for p in pairs) + 1
    src = torch.full((bsz, src_len), pad_id, dtype=torch.long)
    tgt_in = torch.full((bsz, tgt_len), pad_id, dtype=torch.long)
    tgt_out = torch.full((bsz, tgt_len), pad_id, dtype=torch.long)
    for i, p in enumerate(pairs):
        src[i, : len(p.src)] = torch.tensor(p.src, dtype=torch.long)
        tgt_in[i, 0] = bos_id
        tgt_in[i, 1 : len(p.tgt) + 1] = torch.tensor(p.tgt, dtype=torch.long)
        tgt_out[i, : len(p.tgt)] = torch.tensor(p.tgt, dtype=torch.long)
        tgt_out[i, len(p.tgt)] = eos_id
    ntokens = sum(len(p.tgt) + 1 for p in pairs)
    return Batch(src, tgt_in, tgt_out, ntokens)


def collate_indices(pairs: Sequence[Pair], indices: Sequence[int], vocab: VocabInfo) -> Batch:
    """The batch of pairs[j] for j in indices, padded and framed with the vocabulary's special ids."""
    return collate([pairs[j] for j in indices], vocab.pad_id, vocab.bos_id, vocab.eos_id)


def pad_sources(sources: Sequence[list[int]], pad_id: int) -> torch.Tensor:
    """Pad encoded sources into (B, S) for decoding."""
    width = max(len(s) for s in sources)
    out = torch.full((len(sources), width), pad_id, dtype=torch.long)
    for i, s in enumerate(sources):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


class Prefetcher(Generic[T, R]):
    """Runs `work` on the items of `items` in a background thread, up to `depth` items ahead of the consumer, so
    that batches are collated (and pinned) while the device trains on the previous ones. Iterating yields
    (item, work(item)) in the order of `items`; an exception of the thread is raised in the consumer. Use it as
    a context manager: leaving it stops the thread."""

    _END = object()

    def __init__(self, items: Iterable[T], work: Callable[[T], R], depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(iter(items), work), daemon=True,
                                        name="seqxduce-prefetch")

    def _fill(self, items: Iterator[T], work: Callable[[T], R]) -> None:
        try:
            for item in items:
                if self._stop.is_set():
                    return
                self._put((item, work(item)))
        except BaseException as err:  # handed to the consumer, which raises it where the work was wanted
            self._put(err)
            return
        self._put(self._END)

    def _put(self, value: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(value, timeout=0.1)
                return
            except queue.Full:
                continue

    def __enter__(self) -> Prefetcher[T, R]:
        self._thread.start()
        return self

    def __iter__(self) -> Iterator[tuple[T, R]]:
        while True:
            value = self._queue.get()
            if value is self._END:
                return
            if isinstance(value, BaseException):
                raise value
            yield value

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
