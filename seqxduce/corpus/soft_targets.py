"""A teacher's next-token distributions over a student's training pairs, for word-level knowledge distillation (Kim &
Rush 2016; Freitag et al. 2017 distil an ensemble this way): at every target position of every encoded pair (its
eos included), the teacher's k most probable tokens and their probabilities, renormalised to sum to 1.

They are kept as two arrays in one cache folder (ids.npy, probs.npy: one row per target position, pairs in the
training split's order), keyed by what decides them: the teacher's checkpoints and tokenizer files (the caller's
key parts), k, and the encoded pairs' ids themselves, so that a student run, its restart, its ranks and a second
student of the same data find the folder made. A batch gathers its rows from the memory-mapped arrays as it gathers
its ids (PairArrays.collate). The folder is written under a work name and renamed when whole; a stopped pass keeps
the batches it wrote there, and the next one continues after them.
How the distributions are computed is distillation's side (distillation.teacher_targets)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write_text
from seqxduce.corpus.arrays import PairArrays
from seqxduce.corpus.distilled import format_key

FORMAT = "seqxduce-soft-targets-1"
SOFT_RECORD = "word_kd.json"  # in a student's run folder: the name of the set it trains with
PREFIX = "soft-"
IDS, PROBS, META, PROGRESS, PLAN = "ids.npy", "probs.npy", "meta.json", "progress.json", "plan.json"
MERGE_PAIRS = 1 << 20  # pairs whose rows one step of a merge of pieces gathers
HASH_CHUNK = 1 << 24  # bytes of an id array hashed at once


def pairs_digest(pairs: PairArrays) -> str:
    """A digest of the encoded pairs' ids and offsets (both sides): the soft targets' rows are these pairs'
    target positions, so other ids (another tokenizer, data or length limit) are another set."""
    digest = hashlib.blake2b(digest_size=16)
    for array in (pairs.src_offsets, pairs.src_ids, pairs.tgt_offsets, pairs.tgt_ids):
        flat = np.ascontiguousarray(array).reshape(-1)
        digest.update(str(flat.dtype).encode())
        step = max(1, HASH_CHUNK // max(flat.itemsize, 1))
        for start in range(0, len(flat), step):
            digest.update(flat[start:start + step].tobytes())
    return digest.hexdigest()


def soft_key(parts: Mapping[str, Any]) -> str:
    """The set's key: the teacher's parts, k and the pairs' digest (distillation.teacher_targets makes them)."""
    return format_key(FORMAT, parts)


def position_starts(pairs: PairArrays) -> np.ndarray:
    """Each pair's first row: its target ids' offset plus one eos row for each pair before it (len(pairs) + 1
    values, the last the number of rows)."""
    return np.asarray(pairs.tgt_offsets, dtype=np.int64) + np.arange(len(pairs) + 1, dtype=np.int64)


@dataclass(frozen=True)
class SoftTargets:
    """The teacher's top-k per target position of a training split's pairs, memory-mapped."""

    ids: np.ndarray  # (rows, k), the vocabulary's smallest unsigned type
    probs: np.ndarray  # (rows, k) float16
    starts: np.ndarray  # (pairs + 1,) each pair's first row
    folder: Path | None = None

    @property
    def top_k(self) -> int:
        return int(self.ids.shape[1])

    @classmethod
    def open(cls, folder: Path, pairs: PairArrays) -> SoftTargets:
        """The set in `folder` for these pairs; one that does not fit them (rows, pairs) is refused naming it."""
        try:
            ids = np.load(folder / IDS, mmap_mode="r")
            probs = np.load(folder / PROBS, mmap_mode="r")
            meta = json.loads((folder / META).read_text())
        except (OSError, ValueError) as err:
            raise UserError(f"{folder}: the teacher's distributions cannot be read ({err}); remove the folder, and "
                            "the next run computes them again") from None
        starts = position_starts(pairs)
        if ids.shape != probs.shape or ids.shape[0] != starts[-1] or meta.get("pairs") != len(pairs):
            raise UserError(f"{folder}: holds {ids.shape[0]} target positions of {meta.get('pairs')} pairs, but the "
                            f"training split has {int(starts[-1])} of {len(pairs)}; remove the folder, and the next "
                            "run computes them again")
        return cls(ids, probs, starts, folder)

    def collate(self, indices: Sequence[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows of the pairs at `indices`, padded to `width` positions as their batch's tgt_out is: ids
        (B, width, k) int64 and probabilities (B, width, k) float32, 0 at padding."""
        k = self.top_k
        ids = torch.zeros((len(indices), width, k), dtype=torch.long)
        probs = torch.zeros((len(indices), width, k), dtype=torch.float32)
        for row, j in enumerate(indices):
            start, end = int(self.starts[j]), int(self.starts[j + 1])
            ids[row, : end - start] = torch.from_numpy(np.asarray(self.ids[start:end], dtype=np.int64))
            probs[row, : end - start] = torch.from_numpy(np.asarray(self.probs[start:end], dtype=np.float32))
        return ids, probs


def piece_files(piece: int, pieces: int) -> tuple[str, str, str, str]:
    """The names of a piece's ids, probabilities, progress record and lock in the work folder. A pass of one piece
    writes the set's own array names (its close is a rename), one of several tags each piece's."""
    if pieces == 1:
        return IDS, PROBS, PROGRESS, "piece.lock"
    tag = f"-{piece + 1}-of-{pieces}"
    return f"ids{tag}.npy", f"probs{tag}.npy", f"progress{tag}.json", f"piece{tag}.lock"


def work_meta(pairs: PairArrays, top_k: int, meta: Mapping[str, Any]) -> dict[str, Any]:
    """A pass's meta as JSON gives it back (the progress files' copies are compared with it)."""
    return json.loads(json.dumps({"format": FORMAT, "pairs": len(pairs), "top_k": top_k, **meta}, sort_keys=True,
                                 default=str))


class SoftTargetsWriter:
    """One piece of a new set's arrays, written into the work folder beside the final one (memory-mapped files: at
    scale they outgrow memory; a piece's files have the whole set's shape and hold its own rows, the rest left
    sparse). The work is kept in pieces: save(done) records how many of the piece's batches are written (their
    rows flushed first), and a writer opened again with the same meta continues after them. The caller holds the
    piece's lock (SoftTargetsWork.piece_lock), and the work folder is planned for this pass (SoftTargetsWork.plan)."""

    def __init__(self, folder: Path, pairs: PairArrays, top_k: int, ids_dtype: np.dtype, meta: Mapping[str, Any],
                 piece: int = 0, pieces: int = 1):
        self.folder = folder
        self.meta = work_meta(pairs, top_k, meta)
        self.work = folder.with_name(f"{folder.name}.work")
        self.ids_name, self.probs_name, self.progress_name, _ = piece_files(piece, pieces)
        self.starts = position_starts(pairs)
        rows = int(self.starts[-1])
        self.done = self._continued()
        if self.done:
            self.ids = np.lib.format.open_memmap(self.work / self.ids_name, mode="r+")
            self.probs = np.lib.format.open_memmap(self.work / self.probs_name, mode="r+")
            return
        self.work.mkdir(parents=True, exist_ok=True)
        self.ids = np.lib.format.open_memmap(self.work / self.ids_name, mode="w+", dtype=ids_dtype,
                                             shape=(rows, top_k))
        self.probs = np.lib.format.open_memmap(self.work / self.probs_name, mode="w+", dtype=np.float16,
                                               shape=(rows, top_k))

    def _continued(self) -> int:
        """The batches of this piece a stopped pass with this meta wrote (0: none, or another pass's work)."""
        return piece_progress(self.work / self.progress_name, self.meta)

    def put(self, pair: int, ids: np.ndarray, probs: np.ndarray) -> None:
        """One pair's rows: (its target length + 1, k) ids and probabilities."""
        start, end = int(self.starts[pair]), int(self.starts[pair + 1])
        if ids.shape[0] != end - start:
            raise ValueError(f"pair {pair}: {ids.shape[0]} rows for {end - start} target positions")
        self.ids[start:end] = ids
        self.probs[start:end] = probs

    def save(self, batches: int) -> None:
        """Record that the piece's first `batches` batches are written: their rows reach the files first."""
        for array in (self.ids, self.probs):
            array.flush()
        atomic_write_text(self.work / self.progress_name, json.dumps({"batches": batches, "meta": self.meta}) + "\n")
        self.done = batches

    def close(self) -> None:
        """Flush and let the files go (a whole piece has been save()d with all its batches)."""
        for array in (self.ids, self.probs):
            array.flush()
        del self.ids, self.probs


def piece_progress(path: Path, meta: Mapping[str, Any]) -> int:
    """The batches a piece's progress record at `path` says are written for this meta (0: none, or another's)."""
    try:
        progress = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    return int(progress["batches"]) if progress.get("meta") == meta else 0


class SoftTargetsWork:
    """The work folder of a set made by `pieces` processes at once (a torchrun world's ranks, each its share of the
    batches: batch k is piece k % pieces), or by one. Which pass the folder is for is its plan (the meta and the
    number of pieces); a process holds a piece's lock (a file lock) while it computes it, so that a pass whose
    pieces are locked is live and another process waits for it, and a piece whose process is gone is taken over.
    plan() and merge() are called under the set's own lock."""

    def __init__(self, folder: Path, pairs: PairArrays, top_k: int, meta: Mapping[str, Any], pieces: int):
        self.folder, self.pieces = folder, pieces
        self.meta = work_meta(pairs, top_k, meta)
        self.work = folder.with_name(f"{folder.name}.work")

    def _planned(self) -> dict[str, Any] | None:
        """The plan in the folder; a work folder written before plans existed is one piece's pass of its meta."""
        try:
            return json.loads((self.work / PLAN).read_text())
        except (OSError, ValueError):
            pass
        try:
            return {"meta": json.loads((self.work / PROGRESS).read_text())["meta"], "pieces": 1}
        except (OSError, ValueError, KeyError):
            return None

    def plan(self) -> bool:
        """Make the work folder this pass's: kept when it is planned for it already (its pieces go on where they
        stopped), made anew when it holds another pass's work whose processes are gone. False: another pass (other
        meta, or another number of pieces) is under way in it; wait for it to finish."""
        if self.planned():
            return True
        planned = self._planned()
        if planned is not None and self.work.is_dir() and any(
                _held(self.work / piece_files(p, int(planned.get("pieces", 1)))[3])
                for p in range(int(planned.get("pieces", 1)))):
            return False
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        atomic_write_text(self.work / PLAN, json.dumps({"meta": self.meta, "pieces": self.pieces}) + "\n")
        return True

    def planned(self) -> bool:
        """Whether the work folder is still this pass's (a merge removes the plan first)."""
        return self._planned() == {"meta": self.meta, "pieces": self.pieces}

    def batches_done(self, piece: int) -> int:
        """How many of a piece's batches are written."""
        return piece_progress(self.work / piece_files(piece, self.pieces)[2], self.meta)

    @contextlib.contextmanager
    def piece_lock(self, piece: int) -> Iterator[bool]:
        """The piece's lock, taken if no other process holds it: True inside when this process holds it."""
        try:
            lock = open(self.work / piece_files(piece, self.pieces)[3], "a")
        except FileNotFoundError:  # the work folder was merged into the set meanwhile
            yield False
            return
        with lock:
            yield _try_lock(lock)  # released when the file closes

    def merge(self, pairs: PairArrays, owners: np.ndarray | None) -> Path:
        """The whole pieces into the set's arrays, renamed into place. owners: each pair's piece (the piece of its
        batch; None for a pass of one piece). One piece's files are the set's already; several are gathered row by
        row, a block of pairs at a time, so that memory holds a block, not the set."""
        # the plan goes first: a process that finds no plan computes nothing more here (planned)
        (self.work / PLAN).unlink(missing_ok=True)
        if self.pieces > 1:
            # a piece of no batch (more processes than batches) wrote no files, and owns no pair
            written = [p for p in range(self.pieces) if (self.work / piece_files(p, self.pieces)[0]).is_file()]
            ids_files = {p: np.load(self.work / piece_files(p, self.pieces)[0], mmap_mode="r") for p in written}
            probs_files = {p: np.load(self.work / piece_files(p, self.pieces)[1], mmap_mode="r") for p in written}
            like = ids_files[written[0]]
            ids = np.lib.format.open_memmap(self.work / IDS, mode="w+", dtype=like.dtype, shape=like.shape)
            probs = np.lib.format.open_memmap(self.work / PROBS, mode="w+", dtype=np.float16, shape=like.shape)
            starts = position_starts(pairs)
            for first in range(0, len(pairs), MERGE_PAIRS):
                last = min(first + MERGE_PAIRS, len(pairs))
                rows = slice(int(starts[first]), int(starts[last]))
                row_owner = np.repeat(owners[first:last], np.diff(starts[first:last + 1]))
                for p in written:
                    mine = row_owner == p
                    ids[rows][mine] = ids_files[p][rows][mine]
                    probs[rows][mine] = probs_files[p][rows][mine]
            ids.flush()
            probs.flush()
            del ids, probs, ids_files, probs_files
        for p in range(self.pieces):
            names = piece_files(p, self.pieces)
            for name in (names if self.pieces > 1 else names[2:]):
                (self.work / name).unlink(missing_ok=True)
        (self.work / META).write_text(json.dumps(self.meta, indent=1, sort_keys=True, default=str) + "\n")
        if (self.folder / META).is_file():  # made meanwhile by a process that holds no lock with this one
            shutil.rmtree(self.work, ignore_errors=True)
            return self.folder
        os.replace(self.work, self.folder)
        return self.folder


def _try_lock(lock: Any) -> bool:
    """Take an open file's lock if no other process holds it (True), without waiting."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _held(lock_file: Path) -> bool:
    """Whether another process holds this lock file's lock (a file that is not there is held by no one)."""
    try:
        with open(lock_file) as lock:
            return not _try_lock(lock)
    except FileNotFoundError:
        return False
