"""The one atomic, durable writer: a file is its old self or complete, never half of either."""

import os

import pytest

from seqxduce.atomic import atomic_write, atomic_write_text, replace_durably, write_once_text


def test_atomic_write_text_replaces_the_file_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "deep" / "recipe.toml"
    atomic_write_text(path, "a = 1\n")
    atomic_write_text(path, "a = 2\n")
    assert path.read_text(encoding="utf-8") == "a = 2\n"
    assert [p.name for p in path.parent.iterdir()] == ["recipe.toml"]


def test_an_error_while_writing_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_write(path) as handle:
            handle.write(b"new, half")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


def test_replace_durably_moves_a_finished_file_over_the_target(tmp_path):
    part = tmp_path / "data.bin.part"
    part.write_bytes(b"complete")
    (tmp_path / "data.bin").write_bytes(b"stale")
    replace_durably(part, tmp_path / "data.bin")
    assert (tmp_path / "data.bin").read_bytes() == b"complete" and not part.exists()


def test_write_once_creates_a_file_once_and_never_replaces_it(tmp_path, monkeypatch):
    path = tmp_path / "mix.json"
    assert write_once_text(path, "first\n")
    before = path.stat()
    assert not write_once_text(path, "second\n")
    assert path.read_text() == "first\n" and path.stat().st_ino == before.st_ino
    # a writer that checked before the first one wrote: the name is taken, the first file stays
    monkeypatch.setattr(type(path), "is_file", lambda self: False)
    assert not write_once_text(path, "third\n")
    assert path.read_text() == "first\n" and path.stat().st_ino == before.st_ino
    monkeypatch.undo()
    # a file system without hard links: created by a rename instead, still never over an existing file
    monkeypatch.setattr(os, "link", lambda *a: (_ for _ in ()).throw(PermissionError("no links here")))
    other = tmp_path / "other.json"
    assert write_once_text(other, "x\n") and other.read_text() == "x\n"
    assert not write_once_text(other, "y\n") and other.read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix.json", "other.json"]  # no staged file left
