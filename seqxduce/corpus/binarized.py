"""The binarized training split on disk: per side the token ids of every pair end to end (`src.ids`, `tgt.ids`,
in the smallest unsigned integer type that holds the vocabulary) and where each pair starts (`src.offsets`,
`tgt.offsets`, int64, one more than the pairs) and each pair's length (`src.lengths`, `tgt.lengths`, int16 or
int32), with `meta.json` holding the counts, the types, each file's size and BLAKE2 digest. Read memory-mapped:
a training process holds no array per pair of its own but its share of the epoch's order, and every process
that maps the same files shares their pages, the lengths that batching reads included (fairseq's
MMapIndexedDataset keeps one index file of sizes and offsets and one data file per side).

A dataset is written into a temporary folder beside its own and renamed into place: a reader sees all of it or
none. One that is truncated or damaged after that is refused in one line, never read. The digests are checked
by reading a file whole only when it is not as it was when they last were (`.verified`: its size, inode and
modification and change times), so that a start of training at 36M pairs does not read 6 GB first."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from seqxduce.api import UserError
from seqxduce.console import console
from seqxduce.corpus.arrays import PairArrays
from seqxduce.files import file_digest

FORMAT = "binarized-v2"  # a change of the layout changes this (v2: the lengths files)
META = "meta.json"
OWNER = ".owner"  # in a work folder: "HOST PID" of the process writing it
SIDES = ("src", "tgt")
CORPORA = "corpora"  # meta.json: [name, pairs] of each training corpus, end to end (a task with several)
VERIFIED = ".verified"  # the files whose digests were checked, with their state then (open_dataset)


def ids_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id of a vocabulary."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def lengths_dtype(lengths: np.ndarray) -> np.dtype:
    """int16 when every length fits (sentences of up to 32,767 tokens), else int32: signed, so that arithmetic on
    lengths never wraps."""
    return np.dtype(np.int16 if not len(lengths) or int(lengths.max()) < 2**15 else np.int32)


@dataclass
class _Side:
    handle: BinaryIO
    digest: Any = field(default_factory=lambda: hashlib.blake2b(digest_size=16))
    lengths: list[np.ndarray] = field(default_factory=list)  # int32 per chunk, until close()
    size: int = 0


class DatasetWriter:
    """Writes a dataset chunk by chunk (encoded shards, in corpus order) into a work folder; close() renames it to
    its place. Use it as a context manager: leaving it with an error removes the work folder."""

    def __init__(self, folder: Path, vocab_size: int, extra: dict[str, Any] | None = None, replace: bool = False):
        self.folder = Path(folder)
        self.dtype = ids_dtype(vocab_size)
        self.vocab_size = vocab_size
        self.extra = dict(extra or {})
        self.replace = replace  # a dataset already at folder is replaced (prepare --again), else kept
        self.work = work_folder(self.folder)
        self.sides = {side: _Side((self.work / f"{side}.ids").open("wb")) for side in SIDES}
        self.pairs = 0
        self.parts: list[list[Any]] = []  # [corpus name, pairs] in the order they came (Example.corpus)

    def add(self, src_ids: np.ndarray, src_lengths: np.ndarray, tgt_ids: np.ndarray, tgt_lengths: np.ndarray,
            corpus: str = "") -> None:
        """Append a chunk of pairs of one corpus (Example.corpus; "" for a task with one): each side's ids end to
        end and the pairs' lengths."""
        if not self.parts or self.parts[-1][0] != corpus:
            self.parts.append([corpus, 0])
        self.parts[-1][1] += len(src_lengths)
        for side, ids, lengths in (("src", src_ids, src_lengths), ("tgt", tgt_ids, tgt_lengths)):
            data = np.ascontiguousarray(ids, dtype=self.dtype).tobytes()
            part = self.sides[side]
            part.handle.write(data)
            part.digest.update(data)
            part.size += len(data)
            part.lengths.append(np.asarray(lengths, dtype=np.int32))
        self.pairs += len(src_lengths)

    def close(self) -> Path:
        """Write the offsets and meta.json, then move the folder into place; returns it."""
        files: dict[str, dict[str, Any]] = {}
        (self.work / OWNER).unlink()
        for side, part in self.sides.items():
            part.handle.close()
            files[f"{side}.ids"] = {"bytes": part.size, "blake2b": part.digest.hexdigest()}
            lengths = np.concatenate(part.lengths) if part.lengths else np.zeros(0, dtype=np.int32)
            part.lengths = []
            offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            files[f"{side}.offsets"] = self._write(f"{side}.offsets", offsets)
            del offsets
            files[f"{side}.lengths"] = self._write(f"{side}.lengths", lengths.astype(lengths_dtype(lengths)))
        for path in sorted(self.work.rglob("*")):  # files added beside the ids (a prepared folder's tokenizers)
            name = path.relative_to(self.work).as_posix()
            if path.is_file() and name not in files:
                files[name] = {"bytes": path.stat().st_size, "blake2b": _digest(path)}
        meta = {"format": FORMAT, "pairs": self.pairs, "dtype": self.dtype.name, "vocab_size": self.vocab_size,
                "files": files, **self.extra}
        if any(name for name, _ in self.parts):  # several corpora: where each lies (a one-corpus meta is unchanged)
            meta[CORPORA] = self.parts
        (self.work / META).write_text(json.dumps(meta, indent=1) + "\n")
        for path in self.work.rglob("*"):
            if path.is_file():
                with path.open("rb") as handle:
                    os.fsync(handle.fileno())
        if self.replace and self.folder.exists():  # an earlier dataset the caller chose to replace
            shutil.rmtree(self.folder)
        try:
            os.replace(self.work, self.folder)
        except OSError as err:
            # another process (a member of the same run, a second run) wrote the same dataset first: the key is
            # the same, so are the files; theirs stays, ours goes
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not exists(self.folder):
                raise
            shutil.rmtree(self.work, ignore_errors=True)
            return self.folder
        # the digests were taken of the bytes as they were written: the first open need not read them again
        _record_verified(self.folder, {name: _state((self.folder / name).stat(), entry["blake2b"])
                                       for name, entry in files.items()})
        return self.folder

    def _write(self, name: str, array: np.ndarray) -> dict[str, Any]:
        data = array.tobytes()
        (self.work / name).write_bytes(data)
        return {"bytes": len(data), "blake2b": hashlib.blake2b(data, digest_size=16).hexdigest(),
                "dtype": array.dtype.name}

    def abort(self) -> None:
        for part in self.sides.values():
            part.handle.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is not None:
            self.abort()


def work_folder(folder: Path, tag: str = "") -> Path:
    """A new work folder beside `folder` (`.NAME-TAG...`, renamed into place or removed when done), marked with
    its owner; the work folders of `folder` that a process of this host left when it was killed outright
    (SIGKILL, the OOM killer: no cleanup ran) are removed first."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(folder)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-{tag}", dir=folder.parent))
    (work / OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
    return work


def _remove_orphans(folder: Path) -> None:
    for work in folder.parent.glob(f".{folder.name}-*"):
        try:
            host, pid = (work / OWNER).read_text().split()
        except (OSError, ValueError):
            continue  # not marked (yet): another process may have just made it
        if host == socket.gethostname() and not _alive(int(pid)):
            shutil.rmtree(work, ignore_errors=True)
            console.print(f"removed {work}, left unfinished by process {pid}, which is gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
    line. verify checks the digests: it reads every byte of a file once (the pages stay in the shared page cache),
    unless the file is as it was when its digest was last checked (its VERIFIED record: size, inode, modification
    and change times, which a write through the file system changes)."""
    folder = Path(folder)
    meta = read_meta(folder)
    checked = _verified(folder) if verify else {}
    states = {}
    for name, expected in meta["files"].items():
        path = folder / name
        try:
            stat = path.stat()
        except OSError:
            raise damaged(folder, f"{name} is missing") from None
        if stat.st_size != expected["bytes"]:
            raise damaged(folder, f"{name} holds {stat.st_size} bytes, {expected['bytes']} were written")
        states[name] = _state(stat, expected["blake2b"])
        if verify and checked.get(name) != states[name] and _digest(path) != expected["blake2b"]:
            raise damaged(folder, f"{name} changed since it was written")
    if verify and checked != states:
        _record_verified(folder, states)
    dtype = np.dtype(meta["dtype"])
    arrays = {}
    for side in SIDES:
        ids = _map(folder / f"{side}.ids", dtype)
        offsets = _map(folder / f"{side}.offsets", np.dtype(np.int64))
        if len(offsets) != meta["pairs"] + 1 or (len(offsets) and int(offsets[-1]) != len(ids)):
            raise damaged(folder, f"{side}.offsets does not fit {side}.ids")
        lengths = _map(folder / f"{side}.lengths", np.dtype(meta["files"][f"{side}.lengths"]["dtype"]))
        if len(lengths) != meta["pairs"]:
            raise damaged(folder, f"{side}.lengths does not fit {side}.offsets")
        arrays[side] = (ids, offsets, lengths)
    (src_ids, src_offsets, src_lengths), (tgt_ids, tgt_offsets, tgt_lengths) = arrays["src"], arrays["tgt"]
    parts = [(str(name), int(count)) for name, count in meta.get(CORPORA, [])]
    if sum(count for _, count in parts) not in (0, meta["pairs"]):
        raise damaged(folder, f"meta.json's {CORPORA} do not add up to its {meta['pairs']} pairs")
    return PairArrays(src_ids, src_offsets, tgt_ids, tgt_offsets, src_lengths, tgt_lengths, parts), meta


def _state(stat: os.stat_result, digest: str) -> list[Any]:
    """What a file's VERIFIED record holds: its size, inode, modification and change times (ns) and the digest it
    was checked against. Any write through the file system changes the change time, which no call sets back."""
    return [stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns, digest]


def _verified(folder: Path) -> dict[str, Any]:
    """The files whose digests were checked, as they were then (empty when there is no readable record)."""
    try:
        record = json.loads((folder / VERIFIED).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _record_verified(folder: Path, states: dict[str, Any]) -> None:
    """Record the files just checked (or written), so that the next open does not read them again: at 36M pairs
    the ids are 5-6 GB, 6-8 s of hashing for every rank of every start. A folder that cannot be written (a shared
    cache mounted read-only) keeps being checked in full."""
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f"{VERIFIED}.")
        with os.fdopen(handle, "w") as written:
            written.write(json.dumps(states) + "\n")
        os.replace(temporary, folder / VERIFIED)
    except OSError:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _map(path: Path, dtype: np.dtype) -> np.ndarray:
    # an empty file cannot be mapped
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _digest(path: Path) -> str:
    return file_digest(path, lambda: hashlib.blake2b(digest_size=16))


def size_on_disk(folder: Path) -> int:
    """Bytes of the dataset's files."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
