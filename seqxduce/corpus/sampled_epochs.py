"""The training pairs of one epoch encoded by tokenizers that sample their segmentation (subword regularization:
Kudo 2018; BPE-dropout, Provilkov et al. 2020), as a function of ([train] seed, epoch) alone.

An epoch's sample is encoded as `seqxduce prepare` encodes the deterministic pairs: the training text streamed in
shards, on every core, into a binarized dataset (corpus.binarized) that the ranks map, here in the run
directory (`sampled/epoch-NNNNNN`, the one before it removed). So a corpus of millions of pairs is never held
as Python objects, with sampling as without. Each shard samples from its own seed (the run's seed, the epoch, the
side and the shard's place in the corpus), so that the sample does not depend on how many processes encode it.
The prepared dataset keeps the deterministic encoding, which validation, the curriculum and runs without sampling
read.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from seqxduce.api import Example, Tokenizer
from seqxduce.components import Tokenizers
from seqxduce.console import console
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays
from seqxduce.corpus.prepare import encode_batch, encode_into

EPOCH_PREFIX = "epoch-"


def sampling_seed(seed: int, epoch: int, side: int) -> int:
    """The seed of one side's (0 source, 1 target) sampled encoding in one epoch: distinct per epoch and side."""
    return ((seed * 1_000_003 + epoch) * 2 + side) % (2**31)


def shard_seed(seed: int, epoch: int, side: int, shard: int) -> int:
    """The seed of one shard's sample (the shard's place in the corpus: the same on any number of workers)."""
    return (sampling_seed(seed, epoch, side) * 1_000_003 + shard) % (2**31)


@dataclass(frozen=True)
class EpochSample:
    """One epoch's encoding of a shard (prepare.ShardEncoding): a side whose tokenizer samples gets its sample,
    the other its deterministic ids. A pair whose sample does not fit the length caps and max_tokens takes its
    deterministic encoding (as every epoch without sampling would); the caps then drop it only if that does not
    fit either. So every pair the deterministic encoding keeps trains each epoch, and one it skips may train in an
    epoch whose sample is short enough."""

    src_tok: Tokenizer
    tgt_tok: Tokenizer
    max_src: int
    max_tgt: int
    max_tokens: int
    seed: int
    epoch: int

    def __call__(self, shard: int, sources: list[str], targets: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        toks, texts = (self.src_tok, self.tgt_tok), (sources, targets)
        sampled = [tok.encode_sampled(texts[side], shard_seed(self.seed, self.epoch, side, shard))
                   for side, tok in enumerate(toks)]
        samples = [ids is not None for ids in sampled]
        ids = [sampled[side] if samples[side] else encode_batch(toks[side], texts[side]) for side in (0, 1)]
        src_ids, tgt_ids = ids[0], ids[1]
        # strict: a tokenizer that returns a list of another length is a plugin's bug, not silently fewer pairs
        for i, (src, tgt) in enumerate(zip(src_ids, tgt_ids, strict=True)):
            if not self._fits(len(src) + 1, len(tgt)):
                if samples[0]:
                    src_ids[i] = self.src_tok.encode(sources[i])
                if samples[1]:
                    tgt_ids[i] = self.tgt_tok.encode(targets[i])
        return src_ids, tgt_ids

    def _fits(self, src_len: int, tgt_len: int) -> bool:
        """Within the length caps (data.within_limits: the source with its eos, the target with the eos the loss
        adds) and max_tokens."""
        return src_len <= self.max_src and tgt_len + 1 <= self.max_tgt and src_len + tgt_len + 1 <= self.max_tokens


class EpochEncoder:
    """The training pairs of an epoch when a tokenizer samples (Tokenizer.encode_sampled), else None (the
    deterministic pairs train).

    Rank 0 encodes the epoch into `folder` (default: a temporary folder of the encoder's own) from the training
    text, which `examples` streams anew each time; the other ranks wait for it and map the same files. An epoch
    found there is taken only if it was sampled under the same `key` (the run's data and tokenizers, which the
    caller names) and settings: a --resume finds its epoch, a changed run samples anew.
    """

    def __init__(self, examples: Iterable[Example], src_tok: Tokenizer, tgt_tok: Tokenizer, max_src: int,
                 max_tgt: int, max_tokens: int, seed: int, folder: Path | None = None, rank: int = 0,
                 workers: int | None = None, show: bool = False, key: str = ""):
        self.examples = examples
        self.src_tok, self.tgt_tok = src_tok, tgt_tok
        self.max_src, self.max_tgt, self.max_tokens = max_src, max_tgt, max_tokens
        self.seed, self.rank, self.workers, self.show = seed, rank, workers, show
        self._own = tempfile.TemporaryDirectory(prefix="seqxduce-sampled-") if folder is None else None
        self.folder = Path(folder) if folder is not None else Path(self._own.name)  # type: ignore[union-attr]
        self.samples: bool | None = None  # unknown until the first epoch asks
        self.read: int | None = None  # the pairs an epoch reads, once one was encoded: the next ones' total
        self.key = f"{key}|{seed}|{max_src}|{max_tgt}|{max_tokens}"

    def sampling(self) -> bool:
        """Whether either tokenizer samples, so that each epoch is encoded anew."""
        if self.samples is None:
            # asked of one text before the corpus is read: a tokenizer that does not sample returns None for any,
            # and its settings decide, not the epoch
            self.samples = any(tok.encode_sampled(["a"], 0) is not None for tok in (self.src_tok, self.tgt_tok))
        return self.samples

    def pairs(self, epoch: int) -> PairArrays | None:
        """This epoch's training pairs, or None when neither tokenizer samples."""
        if not self.sampling():
            return None
        path = self.folder / f"{EPOCH_PREFIX}{epoch:06d}"
        if self.rank == 0:
            if not self._current(path):
                self._write(epoch, path)
            self._remove_others(path)
        else:  # rank 0 writes it; the files appear complete (renamed into place)
            while not self._current(path):
                time.sleep(0.2)
        return binarized.open_dataset(path, verify=False)[0]

    def _current(self, path: Path) -> bool:
        """Whether path holds this encoder's sample of its epoch (a damaged one is refused in one line)."""
        return binarized.exists(path) and binarized.read_meta(path).get("key") == self.key

    def _write(self, epoch: int, path: Path) -> None:
        sample = EpochSample(self.src_tok, self.tgt_tok, self.max_src, self.max_tgt, self.max_tokens, self.seed,
                             epoch)
        vocab_size = max(self.src_tok.vocab_size, self.tgt_tok.vocab_size)
        tokenizers = Tokenizers(self.src_tok, self.tgt_tok)
        started = time.perf_counter()
        total = self.read if self.read is not None else _lines_hint(self.examples) if self.show else None
        # replace: a sample there is another run's (another key) or damaged
        with binarized.DatasetWriter(path, vocab_size, {"epoch": epoch, "key": self.key}, replace=True) as writer:
            dropped = encode_into(writer, self.examples, tokenizers, self.max_src, self.max_tgt,
                                  workers=self.workers, show=self.show, total=total, encoding=sample,
                                  what=f"sampling epoch {epoch}")
            kept = writer.pairs
            writer.close()
        self.read = kept + dropped
        if self.show:  # in a log file, with the progress lines before it: what the epoch's encoding took
            seconds = time.perf_counter() - started
            console.print(f"sampled epoch {epoch}: {kept:,} pairs encoded anew in {seconds:.1f} s "
                          f"({self.read / max(seconds, 1e-9):,.0f} pairs/s)", markup=False, highlight=False)

    def _remove_others(self, keep: Path) -> None:
        """Earlier epochs are not read again (a --resume samples its epoch anew: the same pairs)."""
        for other in self.folder.glob(f"{EPOCH_PREFIX}*"):
            if other != keep:
                shutil.rmtree(other, ignore_errors=True)


def _lines_hint(examples: Iterable[Example]) -> int | None:
    """The pairs a first epoch will read, for its progress's ETA: prepare.Examples counts its file's lines."""
    hint = getattr(examples, "lines_hint", None)
    return hint() if hint is not None else None
