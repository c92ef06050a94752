"""A prepared dataset's digests are checked by reading its files whole only when a file is not as it was when
they last were: the start of a run at 36M pairs does not hash 6 GB on every rank, and a file changed in any way
through the file system is still refused in one line."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from seqxduce.api import UserError
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays
from seqxduce.data import Pair


def _written(folder: Path) -> Path:
    rng = random.Random(0)
    pairs = [Pair([rng.randrange(50) for _ in range(rng.randint(1, 9))],
                  [rng.randrange(50) for _ in range(rng.randint(0, 9))]) for _ in range(300)]
    arrays = PairArrays.from_pairs(pairs)
    with binarized.DatasetWriter(folder, 50) as writer:
        writer.add(arrays.src_ids, arrays.src_lengths, arrays.tgt_ids, arrays.tgt_lengths)
        return writer.close()


def _hashed(monkeypatch) -> list[str]:
    read: list[str] = []
    digest = binarized._digest
    monkeypatch.setattr(binarized, "_digest", lambda path: read.append(Path(path).name) or digest(path))
    return read


def test_a_dataset_just_written_or_checked_is_not_read_again(tmp_path, monkeypatch):
    folder = _written(tmp_path / "data")
    read = _hashed(monkeypatch)
    binarized.open_dataset(folder)
    assert read == []  # the writer recorded what it hashed while writing
    (folder / binarized.VERIFIED).unlink()
    binarized.open_dataset(folder)
    assert sorted(read) == sorted(binarized.read_meta(folder)["files"])  # no record: every file read once
    read.clear()
    binarized.open_dataset(folder)
    assert read == []  # and recorded again


@pytest.mark.parametrize("times_kept", [False, True])
def test_a_byte_changed_in_place_is_refused_even_with_its_times_set_back(tmp_path, times_kept):
    folder = _written(tmp_path / "data")
    ids = folder / "tgt.ids"
    before = ids.stat()
    data = ids.read_bytes()
    ids.write_bytes(data[:3] + bytes([data[3] ^ 1]) + data[4:])
    if times_kept:  # the modification time can be set back; the change time cannot
        os.utime(ids, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(UserError, match="tgt.ids changed since it was written"):
        binarized.open_dataset(folder)


def test_a_file_replaced_by_another_of_the_same_size_is_refused(tmp_path):
    folder = _written(tmp_path / "data")
    ids = folder / "src.ids"
    data = bytearray(ids.read_bytes())
    data[0] ^= 1
    replacement = tmp_path / "other"
    replacement.write_bytes(bytes(data))
    os.replace(replacement, ids)  # another inode
    with pytest.raises(UserError, match="src.ids changed since it was written"):
        binarized.open_dataset(folder)


def test_an_unreadable_record_means_a_full_check(tmp_path, monkeypatch):
    folder = _written(tmp_path / "data")
    (folder / binarized.VERIFIED).write_text("not json")
    read = _hashed(monkeypatch)
    binarized.open_dataset(folder)
    assert sorted(read) == sorted(binarized.read_meta(folder)["files"])
