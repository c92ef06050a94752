"""`decode --input F --constraints C`: the constraints file read line by line in step with the input, through
buffers, worker processes and a stop and resume (the resume checks it is the same file), and every mistake in it
refused in one line before any decoding."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

import seqxduce
from seqxduce.decoding.stream_files import record_path
from tests.fault_tools import HANG_GUARD_S, run, start, wait_for
from tests.streaming.test_stream_decode import _signalled_at, invoke, sources, write


def phrase_lines(given: list[str], seed: int = 0) -> list[str]:
    """Per source, one symbol it lacks that must appear, and, for every other source, its first symbol that must
    not (a copy model would write it)."""
    rng = random.Random(seed)
    lines = []
    for k, source in enumerate(given):
        absent = [s for s in "0123456789" if s not in source.split()] or ["0"]
        phrases = [rng.choice(absent)] + ([f"!{source.split()[0]}"] if k % 2 else [])
        lines.append("\t".join(phrases))
    return lines


def holds(text: str, word: str) -> bool:
    return word in text.split()


def test_a_constraints_file_is_read_in_step_and_each_output_keeps_its_line(trained_copy_run: Path, tmp_path: Path):
    given = sources(150, seed=11)
    lines = phrase_lines(given)
    source_file, constraints = write(tmp_path / "in.txt", given), write(tmp_path / "c.txt", lines)
    out, two = tmp_path / "out.txt", tmp_path / "two.txt"
    result = invoke("decode", trained_copy_run, "--input", source_file, "--constraints", constraints, "-o", out,
                    "--buffer-size", "32")
    assert result.exit_code == 0, result.output
    outputs = out.read_text().splitlines()
    assert len(outputs) == len(given)
    for text, line in zip(outputs, lines):
        for phrase in line.split("\t"):
            negative = phrase.startswith("!")
            assert holds(text, phrase[1:] if negative else phrase) != negative, (text, line)
    # as the Python API decodes them, and the same with worker processes
    api = seqxduce.decode(trained_copy_run, given, constraints=lines)
    assert [o.text for o in api] == outputs
    result = run("decode", trained_copy_run, "--input", source_file, "--constraints", constraints, "-o", two,
                 "--buffer-size", "32", "--processes", "2")
    assert result.returncode == 0, result.stderr
    assert two.read_bytes() == out.read_bytes()


@pytest.mark.slow
def test_a_stopped_decode_with_constraints_resumes_to_the_same_file_and_only_with_the_same_file(
        trained_copy_run: Path, tmp_path: Path):
    given = sources(300, seed=12)
    source_file = write(tmp_path / "in.txt", given)
    constraints = write(tmp_path / "c.txt", phrase_lines(given))
    whole = tmp_path / "whole.txt"
    finished = run("decode", trained_copy_run, "--input", source_file, "--constraints", constraints, "-o", whole,
                   "--buffer-size", "64")
    assert finished.returncode == 0, finished.stderr
    out = tmp_path / "out.txt"
    _signalled_at("piece", signal.SIGTERM, trained_copy_run, tmp_path, source_file, out,
                  extra=("--constraints", constraints))
    assert out.read_bytes() == whole.read_bytes()
    # stopped again, then resumed with other constraints: another job, refused in one line
    again, other = tmp_path / "again.txt", write(tmp_path / "other.txt", phrase_lines(given, seed=1))
    args = ("decode", trained_copy_run, "--input", source_file, "-o", again, "--buffer-size", "64")
    marker = tmp_path / "held-again"
    process = start("piece", marker, *args, "--constraints", constraints, log=tmp_path / "again.log",
                    module=("tests.faults.held",))
    wait_for(marker.exists, process)
    process.send_signal(signal.SIGTERM)
    marker.unlink()
    process.wait(timeout=HANG_GUARD_S)
    assert record_path(again).exists()
    refused = run(*args, "--constraints", other, "--resume")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "constraints_file" in refused.stderr or "constraints" in refused.stderr
    resumed = run(*args, "--constraints", constraints, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert again.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize(("lines", "message"), [
    (["1", "2"], r"--constraints .*c.txt: 2 lines for 3 sources; give one line of tab-separated phrases"),
    (["1", "2\t\t3", "4"], r"--constraints .*c.txt:2: an empty phrase"),
    (["1", "!", "4"], r"--constraints .*c.txt:2: an empty phrase"),
    (["1", "\u2603", "4"], r"--constraints .*c.txt:2: the phrase '\u2603' has a part the target vocabulary cannot"),
    (["1", "1\t2\t3", "4"], r"--constraints .*c.txt:2: 3 phrases must appear, more than the beam \(2\)"),
])
def test_a_mistake_in_the_constraints_file_is_refused_in_one_line(trained_copy_run: Path, tmp_path: Path, lines,
                                                                   message):
    source_file = write(tmp_path / "in.txt", ["1 2 3", "4 5", "6"])
    constraints = write(tmp_path / "c.txt", lines)
    result = invoke("decode", trained_copy_run, "--input", source_file, "--constraints", constraints)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and __import__("re").search(message, error[0]), result.output


def test_ctranslate2_refuses_phrases_that_must_appear_before_it_loads(trained_copy_run: Path, tmp_path: Path):
    source_file = write(tmp_path / "in.txt", ["1 2 3"])
    constraints = write(tmp_path / "c.txt", ["4"])
    result = invoke("decode", trained_copy_run, "--input", source_file, "--constraints", constraints, "--engine",
                    "ctranslate2")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--engine ctranslate2" in result.output and "phrases every output must hold" in result.output
