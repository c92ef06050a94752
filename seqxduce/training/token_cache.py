"""The tokenized training corpus on disk, so that a resumed run, or a second run with the same data and tokenizer,
reads the ids instead of tokenizing again: one folder per (data, tokenizer files, length limits), holding the ids
as flat int32 arrays with offsets, read memory-mapped. Where the cache lives: $SEQXDUCE_CACHE, else
$XDG_CACHE_HOME/seqxduce (~/.cache/seqxduce)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seqxduce.api import Example, Tokenizer
from seqxduce.data import Pair, encode_pairs

CACHE_ENV = "SEQXDUCE_CACHE"
FORMAT = "tokens-v1"  # a change of the layout or of what the key covers changes this


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


def _flat(sequences: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in sequences], out=offsets[1:])
    ids = np.fromiter((i for s in sequences for i in s), dtype=np.int32, count=int(offsets[-1]))
    return ids, offsets


def _unflat(ids: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    bounds = offsets.tolist()
    return [ids[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]


def read(folder: Path) -> tuple[list[Pair], int] | None:
    """The pairs and skipped count cached in folder, or None when there is no complete cache there."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r")
                  for name in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets")}
    except (OSError, ValueError):
        return None
    sources = _unflat(arrays["src_ids"], arrays["src_offsets"])
    targets = _unflat(arrays["tgt_ids"], arrays["tgt_offsets"])
    return [Pair(s, t) for s, t in zip(sources, targets)], int(meta["skipped"])


def write(folder: Path, pairs: list[Pair], skipped: int) -> None:
    """Write the cache into a temporary folder beside `folder`, then rename it: a reader sees all or nothing."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        src_ids, src_offsets = _flat([p.src for p in pairs])
        tgt_ids, tgt_offsets = _flat([p.tgt for p in pairs])
        for name, array in (("src_ids", src_ids), ("src_offsets", src_offsets), ("tgt_ids", tgt_ids),
                            ("tgt_offsets", tgt_offsets)):
            np.save(work / f"{name}.npy", array)
        (work / "meta.json").write_text(json.dumps({"pairs": len(pairs), "skipped": skipped, "format": FORMAT}))
        os.replace(work, folder)
    except OSError:
        if not (folder / "meta.json").is_file():  # not another process's cache written meanwhile
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def encode_pairs_cached(examples: Sequence[Example], src_tok: Tokenizer, tgt_tok: Tokenizer, max_src: int,
                        max_tgt: int, tokenizer_files: Sequence[Path], root: Path | None = None
                        ) -> tuple[list[Pair], int, Path | None]:
    """encode_pairs, read from the cache when it holds this corpus, else computed and written there. Returns
    the pairs, the skipped count and the cache folder read (None when the pairs were tokenized now)."""
    identity = (f"{type(src_tok).__module__}.{type(src_tok).__qualname__} "
                f"{type(tgt_tok).__module__}.{type(tgt_tok).__qualname__} {max_src} {max_tgt}")
    folder = (root or cache_root()) / f"tokens-{corpus_key(examples, tokenizer_files, identity)}"
    cached = read(folder)
    if cached is not None:
        return cached[0], cached[1], folder
    pairs, skipped = encode_pairs(examples, src_tok, tgt_tok, max_src, max_tgt)
    try:
        write(folder, pairs, skipped)
    except OSError:  # a cache that cannot be written costs the next run a tokenization, nothing else
        pass
    return pairs, skipped, None
