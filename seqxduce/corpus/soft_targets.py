"""A teacher's next-token distributions over a student's training pairs, for word-level knowledge distillation (Kim &
Rush 2016; Freitag et al. 2017 distil an ensemble this way): at every target position of every encoded pair (its
eos included), the teacher's k most probable tokens and their probabilities, renormalised to sum to 1.

They are kept as two arrays in one cache folder (ids.npy, probs.npy: one row per target position, pairs in the
training split's order), keyed by what decides them: the teacher's checkpoints and tokenizer files (the caller's
key parts), k, and the encoded pairs' ids themselves, so that a student run, its restart, its ranks and a second
student of the same data find the folder made. A batch gathers its rows from the memory-mapped arrays as it gathers
its ids (PairArrays.collate). The folder is written under a work name and renamed when whole; a stopped pass keeps
the batches it wrote there, and the next one continues after them.
How the distributions are computed is the trainer's side (training.teacher_targets)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
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
IDS, PROBS, META, PROGRESS = "ids.npy", "probs.npy", "meta.json", "progress.json"
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
    """The set's key: the teacher's parts, k and the pairs' digest (training.teacher_targets makes them)."""
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


class SoftTargetsWriter:
    """The arrays of a new set, written into a work folder beside the final one (memory-mapped files: at scale they
    outgrow memory) and renamed into place by close(). The work is kept in pieces: save(done) records how many of
    the pass's batches are written (their rows flushed first), and a writer opened again with the same meta (the
    same key, k and batches) continues after them; other meta starts the folder anew. One writer at a time per
    folder (the caller holds a lock), so the work folder's name is fixed."""

    def __init__(self, folder: Path, pairs: PairArrays, top_k: int, ids_dtype: np.dtype, meta: Mapping[str, Any]):
        self.folder = folder
        # as JSON gives it back (the progress file's copy is compared with it)
        self.meta = json.loads(json.dumps({"format": FORMAT, "pairs": len(pairs), "top_k": top_k, **meta},
                                          sort_keys=True, default=str))
        self.work = folder.with_name(f"{folder.name}.work")
        self.starts = position_starts(pairs)
        rows = int(self.starts[-1])
        self.done = self._continued()
        if self.done:
            self.ids = np.lib.format.open_memmap(self.work / IDS, mode="r+")
            self.probs = np.lib.format.open_memmap(self.work / PROBS, mode="r+")
            return
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.ids = np.lib.format.open_memmap(self.work / IDS, mode="w+", dtype=ids_dtype, shape=(rows, top_k))
        self.probs = np.lib.format.open_memmap(self.work / PROBS, mode="w+", dtype=np.float16, shape=(rows, top_k))

    def _continued(self) -> int:
        """The batches a stopped pass with this meta wrote (0: none, or another pass's work)."""
        try:
            progress = json.loads((self.work / PROGRESS).read_text())
        except (OSError, ValueError):
            return 0
        return int(progress["batches"]) if progress.get("meta") == self.meta else 0

    def put(self, pair: int, ids: np.ndarray, probs: np.ndarray) -> None:
        """One pair's rows: (its target length + 1, k) ids and probabilities."""
        start, end = int(self.starts[pair]), int(self.starts[pair + 1])
        if ids.shape[0] != end - start:
            raise ValueError(f"pair {pair}: {ids.shape[0]} rows for {end - start} target positions")
        self.ids[start:end] = ids
        self.probs[start:end] = probs

    def save(self, batches: int) -> None:
        """Record that the first `batches` batches of the pass are written: their rows reach the files first."""
        for array in (self.ids, self.probs):
            array.flush()
        atomic_write_text(self.work / PROGRESS, json.dumps({"batches": batches, "meta": self.meta}) + "\n")
        self.done = batches

    def close(self) -> Path:
        for array in (self.ids, self.probs):
            array.flush()
        (self.work / PROGRESS).unlink(missing_ok=True)
        (self.work / META).write_text(json.dumps(self.meta, indent=1, sort_keys=True, default=str) + "\n")
        del self.ids, self.probs
        if (self.folder / META).is_file():  # made meanwhile by a process that holds no lock with this one
            shutil.rmtree(self.work, ignore_errors=True)
            return self.folder
        os.replace(self.work, self.folder)
        return self.folder
