"""The training pairs of one epoch encoded by tokenizers that sample their segmentation (subword regularization:
Kudo 2018; BPE-dropout, Provilkov et al. 2020), as a function of ([train] seed, epoch) alone.

These pairs are computed in memory each epoch and never written to the token cache: they change every epoch, so a
cache would hold one corpus per epoch to save one batch encoding of the split, which costs about what reading
it back would. The cache keeps the deterministic encoding, which validation, the curriculum and runs without
sampling read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from seqxduce.api import Example, Tokenizer
from seqxduce.data import Pair, PairArrays, encode_source, within_limits


def sampling_seed(seed: int, epoch: int, side: int) -> int:
    """The seed of one side's (0 source, 1 target) sampled encoding in one epoch: distinct per epoch and side."""
    return ((seed * 1_000_003 + epoch) * 2 + side) % (2**31)


class EpochEncoder:
    """Encodes the training examples anew for an epoch when a tokenizer samples (Tokenizer.encode_sampled).

    A pair trains with its sampled encoding when that fits the length caps and max_tokens; else with the
    deterministic one when that fits the caps (as every epoch without sampling would); else not at all. So every
    pair the deterministic encoding keeps trains each epoch, and one it skips may train in an epoch whose sample
    is short enough. A side whose tokenizer does not sample keeps its deterministic ids, computed once.
    """

    def __init__(self, examples: Sequence[Example] | Callable[[], Sequence[Example]], src_tok: Tokenizer,
                 tgt_tok: Tokenizer, max_src: int, max_tgt: int, max_tokens: int, seed: int):
        # a callable reads the examples only when a tokenizer samples: a run that does not keeps no text
        self._examples = examples
        self.src_tok, self.tgt_tok = src_tok, tgt_tok
        self.max_src, self.max_tgt, self.max_tokens = max_src, max_tgt, max_tokens
        self.seed = seed
        self.samples: bool | None = None  # unknown until the first epoch asks
        self._fixed: dict[int, list[list[int]]] = {}  # deterministic ids of a side that does not sample

    @property
    def examples(self) -> Sequence[Example]:
        if callable(self._examples):
            self._examples = self._examples()
        return self._examples

    def pairs(self, epoch: int) -> PairArrays | None:
        """This epoch's training pairs, or None when neither tokenizer samples (the deterministic pairs train)."""
        if self.samples is False:
            return None
        if self.samples is None and callable(self._examples):
            # asked of one text before the corpus is read: a tokenizer that does not sample returns None for any
            self.samples = any(tok.encode_sampled(["a"], 0) is not None for tok in (self.src_tok, self.tgt_tok))
            if not self.samples:
                return None
        texts = ([ex.source for ex in self.examples], [ex.target for ex in self.examples])
        toks = (self.src_tok, self.tgt_tok)
        sampled = [tok.encode_sampled(texts[side], sampling_seed(self.seed, epoch, side))
                   for side, tok in enumerate(toks)]
        # a tokenizer that does not sample in the first epoch never does (its settings decide, not the epoch)
        self.samples = any(ids is not None for ids in sampled)
        if not self.samples:
            return None
        for side, tok in enumerate(toks):
            if sampled[side] is None:
                if side not in self._fixed:
                    self._fixed[side] = [tok.encode(text) for text in texts[side]]
                sampled[side] = self._fixed[side]
        eos = self.src_tok.eos_id
        pairs: list[Pair] = []
        # strict: a tokenizer that returns a list of another length is a plugin's bug, not silently fewer pairs
        for ex, src, tgt in zip(self.examples, *sampled, strict=True):
            src = src + [eos]
            if not self._fits(src, tgt, self.max_tokens):
                src, tgt = encode_source(self.src_tok, ex.source), self.tgt_tok.encode(ex.target)
                if not self._fits(src, tgt, None):
                    continue
            pairs.append(Pair(src, tgt))
        return PairArrays.from_pairs(pairs)

    def _fits(self, src: list[int], tgt: list[int], max_tokens: int | None) -> bool:
        """Within the length caps (data.within_limits) and, if given, max_tokens."""
        fits_tokens = max_tokens is None or len(src) + len(tgt) + 1 <= max_tokens
        return within_limits(src, tgt, self.max_src, self.max_tgt) and fits_tokens
