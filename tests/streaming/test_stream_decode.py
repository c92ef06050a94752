"""`decode` and `score` streamed: outputs equal to decoding the whole input at once, every output form, stdin
and splits, progress lines in a log file, and a decode that continues after a signal or a kill, equal byte for
byte to one that was never stopped."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce.engine as engine
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.stream_files import partial_path, record_path
from tests.fault_tools import run, start, wait_for

NBEST = ["--nbest", "2"]


def invoke(*args, input: str | None = None, env: dict | None = None):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args], input=input, env=env)


def sources(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(str(rng.randint(0, 9)) for _ in range(rng.randint(1, 6))) for _ in range(count)]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_streamed_decode_writes_what_decoding_the_whole_input_at_once_gives(trained_copy_run: Path, tmp_path: Path):
    lines = sources(200)  # one buffer (the first holds 256): the same batches as decoding the whole input
    given = write(tmp_path / "in.txt", lines)
    out, links = tmp_path / "out.txt", tmp_path / "links.txt"
    result = invoke("decode", trained_copy_run, "--input", given, "-o", out, *NBEST, "--alignments", links)
    assert result.exit_code == 0, result.output
    loaded = engine.load_run(trained_copy_run, ["decode.nbest=2"])
    outputs = engine.decode(loaded, lines)
    assert out.read_text().splitlines() == engine.format_outputs(outputs)
    assert links.read_text().splitlines() == engine.alignments(loaded, outputs)
    assert len(out.read_text().splitlines()) == 2 * len(lines)
    assert not partial_path(out).exists() and not record_path(out).exists()


def test_buffers_number_n_best_lines_and_prefixes_by_their_place_in_the_whole_input(
        trained_copy_run: Path, tmp_path: Path):
    lines = sources(300, seed=1)
    prefixes = ["" if i % 3 else lines[i].split()[-1] for i in range(len(lines))]
    given, prefix_file = write(tmp_path / "in.txt", lines), write(tmp_path / "prefix.txt", prefixes)
    out = tmp_path / "out.txt"
    result = invoke("decode", trained_copy_run, "--input", given, "--prefix-file", prefix_file, "-o", out, *NBEST,
                    "--buffer-size", "64")
    assert result.exit_code == 0, result.output
    written = [line.split("\t") for line in out.read_text().splitlines()]
    assert [int(i) for i, _, _ in written] == [i for i in range(len(lines)) for _ in range(2)]
    for i, _, text in written:
        assert text.startswith(prefixes[int(i)])
    wrong = write(tmp_path / "wrong.txt", ["1", "xyzzy"] + [""] * (len(lines) - 2))
    result = invoke("decode", trained_copy_run, "--input", given, "--prefix-file", wrong, "--buffer-size", "64")
    assert result.exit_code == 1 and "--prefix-file" in result.output and ":2: the prefix 'xyzzy'" in result.output
    short = write(tmp_path / "short.txt", prefixes[:10])
    result = invoke("decode", trained_copy_run, "--input", given, "--prefix-file", short)
    assert result.exit_code == 1
    assert "10 prefixes for 300 sources" in result.output and "decoding with" not in result.output  # before loading


def test_stdin_and_a_split_stream_too(trained_copy_run: Path, tmp_path: Path):
    lines = sources(40, seed=2)
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(trained_copy_run), "--input", "-"],
                                input="".join(f"{s}\n" for s in lines))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [o.text for o in engine.decode(trained_copy_run, lines)]
    out = tmp_path / "test.txt"
    result = invoke("decode", trained_copy_run, "--split", "test", "-o", out)
    assert result.exit_code == 0, result.output
    outputs, report = engine.decode_split(trained_copy_run, "test")
    assert out.read_text().splitlines() == [o.text for o in outputs]
    assert report.text and report.text in result.output


def test_progress_goes_to_a_log_file_as_plain_lines(trained_copy_run: Path, tmp_path: Path):
    given = write(tmp_path / "in.txt", sources(600, seed=3))
    result = invoke("decode", trained_copy_run, "--input", given, "-o", tmp_path / "out.txt", "--buffer-size", "100",
                    env={"SEQXDUCE_PROGRESS_SECONDS": "0"})
    assert result.exit_code == 0, result.output
    progress = [line for line in result.output.splitlines() if line.startswith("decode: ")]
    assert progress[0].startswith("decode: 100/600 lines (16.7%), ") and "lines/s, eta " in progress[0]
    assert progress[-1].startswith("decode: 600/600 lines (100.0%)")


def test_a_complete_output_is_left_as_it_is_and_a_stopped_one_is_not_overwritten(
        trained_copy_run: Path, tmp_path: Path):
    given, out = write(tmp_path / "in.txt", sources(50, seed=4)), tmp_path / "out.txt"
    assert invoke("decode", trained_copy_run, "--input", given, "-o", out, "--resume").exit_code == 0  # a first start
    before = out.read_bytes()
    result = invoke("decode", trained_copy_run, "--input", given, "-o", out, "--resume")
    assert result.exit_code == 0 and "is complete already" in result.output and out.read_bytes() == before
    result = invoke("decode", trained_copy_run, "--input", "-", "--resume", input="1\n")
    assert result.exit_code == 1 and "--resume continues a stopped job's --output file" in result.output


def _kill_and_resume(trained_copy_run: Path, tmp_path: Path, given: Path, out: Path, how: int, wait: float,
                     extra: tuple = ()) -> str:
    """Start a decode, stop it with `how` once it wrote a piece and `wait` seconds more, then resume it; the log."""
    args = ("decode", trained_copy_run, "--input", given, "-o", out, "--buffer-size", "64", *extra)
    process = start(*args, log=tmp_path / "stopped.log")
    wait_for(lambda: record_path(out).exists() and json.loads(record_path(out).read_text())["done"] > 0, process)
    time.sleep(wait)
    process.send_signal(how)
    process.wait(timeout=60)
    log = (tmp_path / "stopped.log").read_text()
    if process.returncode == 0:  # it finished before the signal: nothing to resume
        return log
    assert process.returncode == (-how if how == signal.SIGKILL else 128 + how), log
    done = json.loads(record_path(out).read_text())["done"]
    assert done > 0 and done % 64 == 0
    if how == signal.SIGTERM:  # a stop keeps exactly the lines the record counts, and says how to go on
        assert len(partial_path(out).read_text().splitlines()) == done
        assert "SIGTERM: decode stopped after" in log and "--resume to continue" in log
    resumed = run(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    return log


@pytest.mark.slow
def test_a_decode_killed_or_stopped_anywhere_then_resumed_equals_one_never_stopped(
        trained_copy_run: Path, tmp_path: Path):
    given = write(tmp_path / "in.txt", sources(2500, seed=5))
    whole = tmp_path / "whole.txt"
    finished = run("decode", trained_copy_run, "--input", given, "-o", whole, "--buffer-size", "64")
    assert finished.returncode == 0, finished.stderr
    rng = random.Random(7)
    for trial, how in enumerate((signal.SIGKILL, signal.SIGTERM, signal.SIGKILL)):
        out = tmp_path / f"out{trial}.txt"
        _kill_and_resume(trained_copy_run, tmp_path, given, out, how, rng.uniform(0.0, 1.5))
        assert out.read_bytes() == whole.read_bytes(), f"trial {trial} ({how!r})"
        assert not partial_path(out).exists() and not record_path(out).exists()


@pytest.mark.slow
def test_worker_processes_write_what_one_process_writes(trained_copy_run: Path, tmp_path: Path):
    given = write(tmp_path / "in.txt", sources(1500, seed=6))
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    for out, processes in ((one, "1"), (two, "2")):
        result = run("decode", trained_copy_run, "--input", given, "-o", out, "--buffer-size", "100", "--processes",
                     processes, *NBEST)
        assert result.returncode == 0, result.stderr
    assert "2 worker processes of 1 thread(s) each" in result.stderr
    assert two.read_bytes() == one.read_bytes() and len(one.read_text().splitlines()) == 3000


@pytest.mark.slow
def test_a_stop_ends_the_worker_processes_and_a_resume_continues(trained_copy_run: Path, tmp_path: Path):
    given = write(tmp_path / "in.txt", sources(2500, seed=8))
    whole = tmp_path / "whole.txt"
    assert run("decode", trained_copy_run, "--input", given, "-o", whole, "--buffer-size", "64").returncode == 0
    out = tmp_path / "out.txt"
    _kill_and_resume(trained_copy_run, tmp_path, given, out, signal.SIGTERM, 0.3, extra=("--processes", "2"))
    assert out.read_bytes() == whole.read_bytes()
