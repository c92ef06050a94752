"""Character-aware source embeddings: a vocabulary entry's spelling as a bag of hashed character n-grams.

fastText (Bojanowski et al. 2017) represents a word by its own vector plus the vectors of its character
n-grams, the word written between boundary marks: "<cats>" -> "<ca", "cat", "ats", "ts>". On a small
corpus that lets a rare word borrow from the common words that share its prefix or suffix, and an unknown-word
class token of the text tokenizer ("<unk-lc-ing>") share the n-grams "ing" and "ng>" with every known -ing word.
The n-grams are computed once per vocabulary entry when the model is built, from `VocabInfo.src_tokens`; a
step looks up the whole vocabulary's bags with one `embedding_bag` (a fixed shape, so no host read) and indexes
it with the batch's ids.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class NgramSpec:
    """Which n-grams: lengths shortest..longest, hashed into `buckets` rows."""

    shortest: int
    longest: int
    buckets: int


def ngrams(entry: str, shortest: int, longest: int) -> list[str]:
    """The character n-grams of `entry` lower-cased between boundary marks, shortest..longest characters each.

    Every n-gram is listed once, in order of length then position; the marked word itself is one of them when
    it is short enough (as fastText)."""
    marked = f"<{entry.lower()}>"
    found: list[str] = []
    for n in range(shortest, longest + 1):
        for start in range(len(marked) - n + 1):
            gram = marked[start:start + n]
            if gram not in found:
                found.append(gram)
    return found


def bucket(gram: str, buckets: int) -> int:
    """A stable row for an n-gram (crc32: the same in every process, unlike Python's salted hash())."""
    return zlib.crc32(gram.encode("utf-8")) % buckets


def ngram_index(entries: tuple[str, ...], spec: NgramSpec, skip: set[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(V, K) bucket rows of each entry's n-grams, padded with `spec.buckets` (the zero padding row), and (V, 1)
    how many each has (at least 1, so an entry without n-grams divides a zero sum by 1). Ids in skip (pad, bos,
    eos) get none: their spelling is a name, not a word."""
    rows = [[] if i in skip else sorted({bucket(g, spec.buckets) for g in ngrams(e, spec.shortest, spec.longest)})
            for i, e in enumerate(entries)]
    width = max((len(r) for r in rows), default=0) or 1
    index = torch.full((len(entries), width), spec.buckets, dtype=torch.long)
    for i, row in enumerate(rows):
        index[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    counts = torch.tensor([max(len(r), 1) for r in rows], dtype=torch.float32).unsqueeze(1)
    return index, counts


class CharNgramEmbedding(nn.Module):
    """Per source id, the mean of its n-grams' embeddings: (B, S) ids -> (B, S, C)."""

    def __init__(self, entries: tuple[str, ...], dim: int, spec: NgramSpec, skip: set[int]):
        super().__init__()
        index, counts = ngram_index(entries, spec, skip)
        # not persistent: both follow from the tokenizer files saved beside the checkpoint
        self.register_buffer("index", index, persistent=False)  # (V, K)
        self.register_buffer("counts", counts, persistent=False)  # (V, 1)
        self.table = nn.Embedding(spec.buckets + 1, dim, padding_idx=spec.buckets)

    def vocabulary(self) -> torch.Tensor:
        """(V, C): every entry's mean n-gram embedding."""
        sums = F.embedding_bag(self.index, self.table.weight, mode="sum", padding_idx=self.table.padding_idx)
        return sums / self.counts.to(sums.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.vocabulary())
