"""The one atomic, durable writer: a file is its old self or complete, never half of either."""

import pytest

from seqxduce.atomic import atomic_write, atomic_write_text, replace_durably


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
