"""The binarized training split on disk: per side the token ids of every pair end to end (`src.ids`, `tgt.ids`,
in the smallest unsigned integer type that holds the vocabulary) and where each pair starts (`src.offsets`,
`tgt.offsets`, int64, one more than the pairs), with `meta.json` holding the counts, the type, each file's
size and BLAKE2 digest. Read memory-mapped: a training process holds the lengths, not the corpus, and every
process that maps the same files shares their pages (fairseq's MMapIndexedDataset keeps one index file and one
data file per side; here the offsets are the index, the lengths follow from them).

A dataset is written into a temporary folder beside its own and renamed into place: a reader sees all of it or
none. One that is truncated or damaged after that is refused in one line, never read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from seqxduce.api import UserError
from seqxduce.data import PairArrays

FORMAT = "binarized-v1"  # a change of the layout changes this
META = "meta.json"
SIDES = ("src", "tgt")
CHUNK = 1 << 24  # bytes read at a time when checking a digest


def ids_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id of a vocabulary."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


@dataclass
class _Side:
    handle: BinaryIO
    digest: Any = field(default_factory=lambda: hashlib.blake2b(digest_size=16))
    lengths: list[np.ndarray] = field(default_factory=list)
    size: int = 0


class DatasetWriter:
    """Writes a dataset chunk by chunk (encoded shards, in corpus order) into a work folder; close() renames it to
    its place. Use it as a context manager: leaving it with an error removes the work folder."""

    def __init__(self, folder: Path, vocab_size: int, extra: dict[str, Any] | None = None):
        self.folder = Path(folder)
        self.dtype = ids_dtype(vocab_size)
        self.vocab_size = vocab_size
        self.extra = dict(extra or {})
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix=f".{self.folder.name}-", dir=self.folder.parent))
        self.sides = {side: _Side((self.work / f"{side}.ids").open("wb")) for side in SIDES}
        self.pairs = 0

    def add(self, src_ids: np.ndarray, src_lengths: np.ndarray, tgt_ids: np.ndarray, tgt_lengths: np.ndarray) -> None:
        """Append a chunk of pairs: each side's ids end to end and the pairs' lengths."""
        for side, ids, lengths in (("src", src_ids, src_lengths), ("tgt", tgt_ids, tgt_lengths)):
            data = np.ascontiguousarray(ids, dtype=self.dtype).tobytes()
            part = self.sides[side]
            part.handle.write(data)
            part.digest.update(data)
            part.size += len(data)
            part.lengths.append(np.asarray(lengths, dtype=np.int64))
        self.pairs += len(src_lengths)

    def close(self) -> Path:
        """Write the offsets and meta.json, then move the folder into place; returns it."""
        files: dict[str, dict[str, Any]] = {}
        for side, part in self.sides.items():
            part.handle.close()
            files[f"{side}.ids"] = {"bytes": part.size, "blake2b": part.digest.hexdigest()}
            lengths = np.concatenate(part.lengths) if part.lengths else np.zeros(0, dtype=np.int64)
            offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            data = offsets.tobytes()
            (self.work / f"{side}.offsets").write_bytes(data)
            digest = hashlib.blake2b(data, digest_size=16).hexdigest()
            files[f"{side}.offsets"] = {"bytes": len(data), "blake2b": digest}
        for path in sorted(self.work.rglob("*")):  # files added beside the ids (a prepared folder's tokenizers)
            name = path.relative_to(self.work).as_posix()
            if path.is_file() and name not in files:
                files[name] = {"bytes": path.stat().st_size, "blake2b": _digest(path)}
        meta = {"format": FORMAT, "pairs": self.pairs, "dtype": self.dtype.name, "vocab_size": self.vocab_size,
                "files": files, **self.extra}
        (self.work / META).write_text(json.dumps(meta, indent=1) + "\n")
        for path in self.work.rglob("*"):
            if path.is_file():
                with path.open("rb") as handle:
                    os.fsync(handle.fileno())
        if self.folder.exists():  # an earlier dataset the caller chose to replace (prepare --again)
            shutil.rmtree(self.folder)
        os.replace(self.work, self.folder)
        return self.folder

    def abort(self) -> None:
        for part in self.sides.values():
            part.handle.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is not None:
            self.abort()


def exists(folder: Path) -> bool:
    """Whether a dataset was written in folder (complete or not: open() tells)."""
    return (Path(folder) / META).is_file()


def read_meta(folder: Path) -> dict[str, Any]:
    """meta.json of a dataset, refused in one line when it is not one this version reads."""
    path = Path(folder) / META
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise damaged(folder, f"{path.name} cannot be read: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise damaged(folder, f"{path.name} is not a {FORMAT} dataset")
    return meta


def damaged(folder: Path, what: str) -> UserError:
    return UserError(f"{folder}: the prepared training data is damaged ({what}); prepare it again with "
                     "`seqxduce prepare RECIPE --again` (or delete that folder)")


def open_dataset(folder: Path, verify: bool = True) -> tuple[PairArrays, dict[str, Any]]:
    """The dataset's pairs, memory-mapped, and its meta; a missing, truncated or changed file is refused in one
    line. verify reads every byte once to check the digests (the pages stay in the shared page cache)."""
    folder = Path(folder)
    meta = read_meta(folder)
    for name, expected in meta["files"].items():
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            raise damaged(folder, f"{name} is missing") from None
        if size != expected["bytes"]:
            raise damaged(folder, f"{name} holds {size} bytes, {expected['bytes']} were written")
        if verify and _digest(path) != expected["blake2b"]:
            raise damaged(folder, f"{name} changed since it was written")
    dtype = np.dtype(meta["dtype"])
    arrays = {}
    for side in SIDES:
        ids = _map(folder / f"{side}.ids", dtype)
        offsets = _map(folder / f"{side}.offsets", np.dtype(np.int64))
        if len(offsets) != meta["pairs"] + 1 or (len(offsets) and int(offsets[-1]) != len(ids)):
            raise damaged(folder, f"{side}.offsets does not fit {side}.ids")
        arrays[side] = (ids, offsets)
    return PairArrays(*arrays["src"], *arrays["tgt"]), meta


def _map(path: Path, dtype: np.dtype) -> np.ndarray:
    # an empty file cannot be mapped
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def size_on_disk(folder: Path) -> int:
    """Bytes of the dataset's files."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
