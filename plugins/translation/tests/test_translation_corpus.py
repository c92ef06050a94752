"""Parallel corpus checks and WMT-style cleaning, with hand-counted expectations."""

from pathlib import Path

import pytest
from seqxduce_translation.corpus import CleanRules, drop_reason, load_parallel, read_parallel

from seqxduce.api import UserError


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.en", "a\nb\nc\n")
    tgt = write(tmp_path / "train.de", "A\nB\n")
    with pytest.raises(UserError) as err:
        list(read_parallel(src, tgt))
    message = str(err.value)
    assert f"{src} has 3 lines but {tgt} has 2" in message
    with pytest.raises(UserError, match="has 2 lines but .* has 3"):
        load_parallel(tgt, src)


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = write(tmp_path / "s.en", "ok\nfine\n")
    tgt = write(tmp_path / "s.de", b"gut\n\xff\xfe kaputt\n")
    with pytest.raises(UserError, match=rf"{tgt}:2: invalid UTF-8"):
        load_parallel(src, tgt)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="nope.en: no such file"):
        load_parallel(tmp_path / "nope.en", write(tmp_path / "x.de", "a\n"))


def test_crlf_and_unicode_line_separators(tmp_path):
    # only \n ends a line: a U+2028 inside a sentence (Europarl has some) must not shift the alignment
    src = write(tmp_path / "s.en", "one\u2028still one\r\ntwo\n")
    tgt = write(tmp_path / "s.de", "eins\r\nzwei")
    assert list(read_parallel(src, tgt)) == [("one\u2028still one", "eins"), ("two", "zwei")]


def test_drop_reasons():
    rules = CleanRules(max_len=5, max_ratio=2.0)
    assert drop_reason("a b", "", rules) == "empty"
    assert drop_reason("  ", "x", rules) == "empty"
    assert drop_reason("a b c d e f", "a b c d e f", rules) == "too_long"
    assert drop_reason("a b c d e", "a b c d e", rules) == ""
    assert drop_reason("a b c", "a", rules) == "bad_ratio"
    assert drop_reason("a b", "a", rules) == ""  # a ratio of exactly 2 is kept
    assert drop_reason("a b c", "a", CleanRules()) == ""  # limits of 0 are off
    assert drop_reason("", "a", CleanRules(drop_empty=False)) == ""


def test_cleaning_counts(tmp_path, capsys):
    src = write(tmp_path / "t.en", "a b\n\nthis one is far too long\nx y z w\nfine pair\n")
    tgt = write(tmp_path / "t.de", "A B\nleer\nlang\nX\nok\n")
    pairs, stats = load_parallel(src, tgt, CleanRules(max_len=4, max_ratio=3.0))
    assert pairs == [("a b", "A B"), ("fine pair", "ok")]
    assert (stats.read, stats.kept, stats.empty, stats.empty_dropped, stats.too_long, stats.bad_ratio) == (
        5, 2, 1, 1, 1, 1)
    err = capsys.readouterr().err
    assert "5 pairs read, 2 kept; dropped 1 empty, 1 too long, 1 by length ratio" in err


def test_evaluation_splits_keep_everything_but_count_empty(tmp_path, capsys):
    src = write(tmp_path / "v.en", "a\n\nb\n")
    tgt = write(tmp_path / "v.de", "A\nB\n\n")
    pairs, stats = load_parallel(src, tgt, None)
    assert pairs == [("a", "A"), ("", "B"), ("b", "")]
    assert (stats.read, stats.kept, stats.empty, stats.empty_dropped) == (3, 3, 2, 0)
    assert "kept 2 with an empty side" in capsys.readouterr().err
