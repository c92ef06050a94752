"""The values between a tokenizer and a model, for training and decoding alike: a pair's ids, a padded batch,
encoding with the length limits, collation, padding sources, and the thread that prepares batches ahead (the
training corpus as arrays and its batching by length: corpus.arrays)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from seqxduce.api import Example, Tokenizer

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Pair:
    """One encoded training pair: source ids ending in eos, target ids (no bos, no eos)."""

    src: list[int]
    tgt: list[int]


@dataclass
class Batch:
    """Padded tensors for teacher forcing: src (B, S), tgt_in = bos + y (B, T), tgt_out = y + eos (B, T); with
    word-level distillation the teacher's top-k next tokens at each target position, soft_ids (B, T, k), and their
    probabilities, soft_probs (B, T, k; 0 at padding)."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    ntokens: int  # target tokens that count in the loss (eos included)
    soft_ids: torch.Tensor | None = None
    soft_probs: torch.Tensor | None = None

    @property
    def soft(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None if self.soft_ids is None or self.soft_probs is None else (self.soft_ids, self.soft_probs)

    def _each(self, move: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
        soft = self.soft
        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), self.ntokens,
                     *((move(soft[0]), move(soft[1])) if soft is not None else ()))

    def to(self, device: torch.device) -> Batch:
        """On `device`; from pinned memory the copy to a GPU is asynchronous (the host does not wait)."""
        return self._each(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> Batch:
        """In page-locked host memory, which a GPU copies from without the host waiting."""
        return self._each(lambda t: t.pin_memory())


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
