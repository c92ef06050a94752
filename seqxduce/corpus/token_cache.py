"""Where prepared training data live, and the tokenized corpus of given examples and tokenizer files on disk: a
second encoding of the same corpus reads the ids back (memory-mapped) instead of tokenizing again. The folders are
binarized datasets (corpus.binarized); corpus.prepare names and fills them for a run. Where the cache lives:
$SEQXDUCE_CACHE, else $XDG_CACHE_HOME/seqxduce (~/.cache/seqxduce)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seqxduce.api import Example, Tokenizer, UserError
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays, flat_ids
from seqxduce.data import encode_pairs

CACHE_ENV = "SEQXDUCE_CACHE"
FORMAT = binarized.FORMAT  # a change of the layout or of what the key covers changes this


def cache_root() -> Path:
    """The folder of the caches: $SEQXDUCE_CACHE, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seqxduce"


def corpus_key(examples: Sequence[Example], tokenizer_files: Sequence[Path], identity: str) -> str:
    """A digest of everything the ids depend on: the examples' text, the tokenizer files' bytes and `identity`
    (the tokenizer classes and the length limits)."""
    digest = hashlib.sha256(f"{FORMAT}\0{identity}\0".encode())
    for path in sorted(tokenizer_files, key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for ex in examples:
        digest.update(ex.source.encode() + b"\0" + ex.target.encode() + b"\n")
    return digest.hexdigest()[:32]


def encode_pairs_cached(examples: Sequence[Example], src_tok: Tokenizer, tgt_tok: Tokenizer, max_src: int,
                        max_tgt: int, tokenizer_files: Sequence[Path], root: Path | None = None
                        ) -> tuple[PairArrays, int, Path | None]:
    """encode_pairs, read from the cache when it holds this corpus, else computed and written there. Returns
    the pairs (mapped when read), the skipped count and the cache folder read (None when tokenized now)."""
    identity = (f"{type(src_tok).__module__}.{type(src_tok).__qualname__} "
                f"{type(tgt_tok).__module__}.{type(tgt_tok).__qualname__} {max_src} {max_tgt}")
    folder = (root or cache_root()) / f"tokens-{corpus_key(examples, tokenizer_files, identity)}"
    if binarized.exists(folder):
        pairs, meta = binarized.open_dataset(folder)
        return pairs, int(meta.get("skipped", 0)), folder
    listed, skipped = encode_pairs(examples, src_tok, tgt_tok, max_src, max_tgt)
    src_ids, src_offsets = flat_ids([p.src for p in listed], dtype=np.int64)
    tgt_ids, tgt_offsets = flat_ids([p.tgt for p in listed], dtype=np.int64)
    vocab = int(max(src_ids.max(initial=0), tgt_ids.max(initial=0))) + 1
    try:
        with binarized.DatasetWriter(folder, max(vocab, src_tok_size(src_tok), src_tok_size(tgt_tok)),
                                     {"skipped": skipped}) as writer:
            writer.add(src_ids, np.diff(src_offsets), tgt_ids, np.diff(tgt_offsets))
            writer.close()
    except (OSError, UserError):  # a cache that cannot be written costs the next run a tokenization, nothing else
        pass
    return PairArrays(src_ids, src_offsets, tgt_ids, tgt_offsets), skipped, None


def src_tok_size(tok: Tokenizer) -> int:
    """A tokenizer's vocabulary size, or 0 for a stand-in without one (tests)."""
    try:
        return int(tok.vocab_size)
    except (AttributeError, NotImplementedError, TypeError):
        return 0
