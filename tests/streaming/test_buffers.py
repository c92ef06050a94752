"""The streaming pieces without a model: the buffers' grid, reading an input no further than one buffer ahead,
and the output files a stopped job leaves and a resumed one continues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqxduce.api import UserError, count_lines, iter_lines
from seqxduce.decoding.stream_files import OutputFiles, partial_path, record_path
from seqxduce.decoding.streaming import BufferGrid, InProcess, Piece, read_buffers, stream
from seqxduce.stopping import StopRequest


def test_the_grid_grows_from_the_first_buffer_to_its_size_and_starts_only_where_it_says():
    grid = BufferGrid(size=1000, first=100)
    spans = [span for span, _ in zip(grid.spans(), range(6))]
    assert spans == [(0, 100), (100, 200), (300, 400), (700, 800), (1500, 1000), (2500, 1000)]
    assert [grid.is_start(p) for p in (0, 100, 300, 700, 1500, 2500)] == [True] * 6
    assert not grid.is_start(150) and not grid.is_start(1000)
    assert [span for span, _ in zip(BufferGrid(size=3, first=256).spans(), range(3))] == [(0, 3), (3, 3), (6, 3)]
    with pytest.raises(UserError, match="--buffer-size 0"):
        BufferGrid(size=0)


def test_an_input_is_read_no_further_than_the_buffer_in_hand():
    taken: list[int] = []

    def lines():
        for i in range(50):
            taken.append(i)
            yield f"line {i}"

    buffers = read_buffers(lines(), BufferGrid(size=16, first=4))
    first = next(buffers)
    assert (first.start, first.items) == (0, ["line 0", "line 1", "line 2", "line 3"])
    assert len(taken) == 4  # not one item beyond the buffer
    second = next(buffers)
    assert (second.start, len(second.items), len(taken)) == (4, 8, 12)
    rest = list(buffers)
    assert [(b.start, len(b.items)) for b in rest] == [(12, 16), (28, 16), (44, 6)]
    assert [x for b in [first, second, *rest] for x in b.items] == [f"line {i}" for i in range(50)]


def test_a_resumed_read_skips_whole_buffers_and_keeps_none_of_them():
    buffers = list(read_buffers((str(i) for i in range(40)), BufferGrid(size=16, first=4), skip=12))
    assert [(b.start, b.items[0]) for b in buffers] == [(12, "12"), (28, "28")]


def test_lines_are_read_as_read_lines_reads_them(tmp_path: Path):
    path = tmp_path / "in.txt"
    path.write_bytes("a\r\nb\n\nlast é".encode())
    assert list(iter_lines(path)) == ["a", "b", "", "last é"] and count_lines(path) == 4
    path.write_bytes(b"a\nb\n")
    assert count_lines(path) == 2
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(UserError, match=r"in.txt:2: invalid UTF-8"):
        list(iter_lines(path))


def _piece(start: int, n: int) -> Piece:
    return Piece(start, n, {"output": [f"out {i}" for i in range(start, start + n)],
                            "alignments": [f"{i}-{i}" for i in range(start, start + n)]})


def _files(tmp_path: Path, job: dict | None = None) -> OutputFiles:
    return OutputFiles({"output": tmp_path / "out.txt", "alignments": tmp_path / "align.txt"}, job or {"model": "a"})


def test_a_stopped_job_keeps_its_pieces_and_a_resume_cuts_what_the_record_does_not_count(tmp_path: Path):
    files = _files(tmp_path)
    assert files.open(resume=False)
    files.write(_piece(0, 3))
    files.write(_piece(3, 2))
    files.close()
    out = partial_path(tmp_path / "out.txt")
    assert out.read_text() == "".join(f"out {i}\n" for i in range(5)) and not (tmp_path / "out.txt").exists()
    with out.open("a") as torn:  # a kill in the middle of the next piece's write
        torn.write("out 5\nout")
    with pytest.raises(UserError, match=r"a stopped job left .*out.txt.partial \(5 input lines done\); add --resume"):
        _files(tmp_path).open(resume=False)
    with pytest.raises(UserError, match=r"written by another job \(model: 'a' then, 'b' now\)"):
        _files(tmp_path, {"model": "b"}).open(resume=True)
    again = _files(tmp_path)
    assert again.open(resume=True) and again.done == 5
    again.write(_piece(5, 2))
    again.finish()
    assert (tmp_path / "out.txt").read_text() == "".join(f"out {i}\n" for i in range(7))
    assert (tmp_path / "align.txt").read_text() == "".join(f"{i}-{i}\n" for i in range(7))
    assert not out.exists() and not record_path(tmp_path / "out.txt").exists()
    # the same command again with --resume: the output is complete, nothing to do
    assert not _files(tmp_path).open(resume=True)


def test_a_record_the_files_do_not_match_is_refused_in_one_line(tmp_path: Path):
    files = _files(tmp_path)
    files.open(resume=False)
    files.write(_piece(0, 3))
    files.close()
    partial_path(tmp_path / "align.txt").write_text("")  # shorter than the record says
    with pytest.raises(UserError, match="missing or shorter than its record says"):
        _files(tmp_path).open(resume=True)
    record_path(tmp_path / "out.txt").write_text("{not json")
    with pytest.raises(UserError, match="unreadable"):
        _files(tmp_path).open(resume=True)


def test_stream_writes_every_piece_in_order_and_counts_them(tmp_path: Path):
    files = OutputFiles({"output": tmp_path / "o.txt"}, {})
    files.open(resume=False)

    def process(buffer):
        return Piece(buffer.start, len(buffer.items), {"output": [s.upper() for s in buffer.items]})

    done = stream(InProcess(process), read_buffers((f"s{i}" for i in range(10)), BufferGrid(4, 2)), files,
                  StopRequest())
    files.finish()
    assert done == 10 and (tmp_path / "o.txt").read_text() == "".join(f"S{i}\n" for i in range(10))
    assert json.loads(json.dumps({"ok": True}))  # the record is JSON (read back by the resume above)


def test_what_a_split_keeps_for_its_metric_is_read_back_by_a_resume_and_then_removed(tmp_path: Path):
    files = OutputFiles({"output": tmp_path / "test.hyp"}, {}, keep=True)
    files.open(resume=False)
    files.write(Piece(0, 2, {"output": ["a", "b"]}, kept=[{"text": "a", "figures": {}},
                                                          {"text": "b", "figures": {"invalid": 1.0}}]))
    files.close()
    again = OutputFiles({"output": tmp_path / "test.hyp"}, {}, keep=True)
    assert again.open(resume=True)
    assert again.kept == [{"text": "a", "figures": {}}, {"text": "b", "figures": {"invalid": 1.0}}]
    again.write(Piece(2, 1, {"output": ["c"]}, kept=[{"text": "c", "figures": {}}]))
    again.finish()
    assert (tmp_path / "test.hyp").read_text() == "a\nb\nc\n"
    # no partial, record or kept file left; the job's key beside the output (a later --resume compares it)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".test.hyp.job.json", "test.hyp"]
