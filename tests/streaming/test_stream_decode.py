"""`decode` and `score` streamed: outputs equal to decoding the whole input at once, every output form, stdin
and splits, progress lines in a log file, and a decode that continues after a signal or a kill, equal byte for
byte to one that was never stopped."""

from __future__ import annotations

import json
import random
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce.engine as engine
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.stream_files import job_path, partial_path, record_path
from tests.fault_tools import HANG_GUARD_S, run, start, wait_for

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
    assert "decoding with" not in result.output, "found complete before any model loaded"
    result = invoke("decode", trained_copy_run, "--input", "-", "--resume", input="1\n")
    assert result.exit_code == 1 and "--resume continues a stopped job's --output file" in result.output
    other = write(tmp_path / "other.txt", sources(20, seed=40))  # a complete output of another input is not done
    result = invoke("decode", trained_copy_run, "--input", other, "-o", out, "--resume")
    assert result.exit_code == 1 and f"{out} is complete, but another job wrote it (input: " in result.output
    assert "decoding with" not in result.output
    assert out.read_bytes() == before
    job_path(out).unlink()  # an output nothing says the origin of: not taken as done either
    result = invoke("decode", trained_copy_run, "--input", given, "-o", out, "--resume")
    assert result.exit_code == 1 and "nothing records which job wrote it" in result.output
    partial_path(out).write_text("precious\n")  # a partial file without a record is not overwritten
    result = invoke("decode", trained_copy_run, "--input", given, "-o", out)
    assert result.exit_code == 1 and "is there without a record" in result.output
    assert partial_path(out).read_text() == "precious\n"


# A signal at each moment of a decode's life (tests/faults/held.py holds the process there), and what it must
# give: (exit status, what the stopped command leaves). A stop or a kill never loses a written line, never leaves
# files that --resume refuses, and the same command with --resume then writes the file of a decode never stopped.
STOPPED, KILLED = 128 + signal.SIGTERM, -signal.SIGKILL
OUTCOMES = {
    # the model loaded, no file opened: the command ends at once, nothing written
    ("loaded", signal.SIGTERM): (STOPPED, "nothing"),
    # the files open, no buffer done: stopped at once, a record of 0 lines
    ("opened", signal.SIGTERM): (STOPPED, "record"),
    ("opened", signal.SIGKILL): (KILLED, "record"),
    # between pieces: after the piece in hand, the partial file holding exactly the lines the record counts
    ("piece", signal.SIGTERM): (STOPPED, "record"),
    ("piece", signal.SIGKILL): (KILLED, "record"),
    # every piece written, the files not yet final: a stop ends nothing (the job ends complete, exit 0); a kill
    # leaves a record at the input's end, which no buffer starts at, and a resume makes the files final
    ("written", signal.SIGTERM): (0, "complete"),
    ("written", signal.SIGKILL): (KILLED, "record"),
    # the files final
    ("finished", signal.SIGTERM): (0, "complete"),
    ("finished", signal.SIGKILL): (KILLED, "complete"),
}


def _signalled_at(moment: str, how: int, trained_copy_run: Path, tmp_path: Path, given: Path, out: Path,
                  extra: tuple = ()) -> str:
    """Decode `given` into `out`, held at `moment` and sent `how` there; check what it left against OUTCOMES,
    then resume it with the same command; the stopped process's log."""
    args = ("decode", trained_copy_run, "--input", given, "-o", out, "--buffer-size", "64", *extra)
    marker, log = tmp_path / f"held-{moment}", tmp_path / f"{moment}-{how}.log"
    process = start(moment, marker, *args, log=log, module=("tests.faults.held",))
    wait_for(marker.exists, process)
    process.send_signal(how)
    marker.unlink()
    process.wait(timeout=HANG_GUARD_S)
    said = log.read_text()
    status, left = OUTCOMES[moment, how]
    assert process.returncode == status, said
    record = json.loads(record_path(out).read_text()) if record_path(out).exists() else None
    if left == "nothing":
        assert record is None and not partial_path(out).exists() and not out.exists(), said
        assert "SIGTERM: decode stopped before writing any line" in said
    elif left == "record":
        assert record is not None and not out.exists(), said
        assert (record["done"] == 0) == (moment == "opened"), record
        if how == signal.SIGTERM:  # a stop keeps exactly the lines the record counts, and says how to go on
            assert len(partial_path(out).read_text().splitlines()) == record["done"]
            assert "SIGTERM: decode stopped after" in said and "--resume to continue" in said
    else:
        assert record is None and not partial_path(out).exists() and out.exists(), said
        if how == signal.SIGTERM:
            assert f"SIGTERM: came after the last line was written; {out} is complete" in said
    resumed = run(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    return said


@pytest.fixture(scope="module")
def stopped_input(trained_copy_run: Path, tmp_path_factory) -> tuple[Path, bytes]:
    """An input of several buffers (its last one short) and its output decoded by a process never stopped."""
    folder = tmp_path_factory.mktemp("stopped")
    given, whole = write(folder / "in.txt", sources(500, seed=5)), folder / "whole.txt"
    finished = run("decode", trained_copy_run, "--input", given, "-o", whole, "--buffer-size", "64")
    assert finished.returncode == 0, finished.stderr
    return given, whole.read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("moment, how", list(OUTCOMES), ids=[f"{m}-{signal.Signals(h).name}" for m, h in OUTCOMES])
def test_a_decode_signalled_at_any_moment_then_resumed_equals_one_never_stopped(
        moment: str, how: int, trained_copy_run: Path, stopped_input: tuple[Path, bytes], tmp_path: Path):
    given, whole = stopped_input
    out = tmp_path / "out.txt"
    _signalled_at(moment, how, trained_copy_run, tmp_path, given, out)
    assert out.read_bytes() == whole
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
@pytest.mark.parametrize("moment", ["piece", "written"])
def test_a_stop_ends_the_worker_processes_and_a_resume_continues(
        moment: str, trained_copy_run: Path, stopped_input: tuple[Path, bytes], tmp_path: Path):
    """With a pool of worker processes: stopped between pieces (the workers ended with it), or after its last
    piece while the pool ends (the job complete)."""
    given, whole = stopped_input
    out = tmp_path / "out.txt"
    said = _signalled_at(moment, signal.SIGTERM, trained_copy_run, tmp_path, given, out, extra=("--processes", "2"))
    assert "2 worker processes of 1 thread(s) each" in said
    assert out.read_bytes() == whole


def test_a_decode_waiting_for_stdin_stops_on_a_signal(trained_copy_run: Path, tmp_path: Path):
    """Reading the next buffer is dropped as a buffer under way is: a decode of a pipe that sends nothing more
    stops on SIGTERM, instead of waiting for lines that never come (the signal lands while the model loads or
    while it waits for input: either way the command ends with its line and 143)."""
    log = tmp_path / "stdin.log"
    process = start("decode", trained_copy_run, "--input", "-", log=log, stdin=subprocess.PIPE)
    process.stdin.write("1 2 3\n")
    process.stdin.flush()
    wait_for(lambda: "decoding with" in log.read_text(), process)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=HANG_GUARD_S)
    process.stdin.close()
    assert process.returncode == 128 + signal.SIGTERM, log.read_text()
    assert "SIGTERM: decode stopped" in log.read_text()


def test_as_targets_is_a_job_of_its_own_and_writes_one_line_per_source(trained_copy_run: Path, tmp_path: Path):
    lines = sources(40, seed=7)
    given, out = write(tmp_path / "in.txt", lines), tmp_path / "out.txt"
    assert invoke("decode", trained_copy_run, "--input", given, "-o", out, "--resume").exit_code == 0
    plain = out.read_bytes()
    # the task's outputs (its postprocess) and its training targets are one form here: the copy task writes its
    # targets as it prints them, so the lines agree; the job is still another one, and not taken as done
    result = invoke("decode", trained_copy_run, "--input", given, "-o", out, "--resume", "--as-targets")
    assert result.exit_code == 1 and "another job wrote it (as_targets: " in result.output
    targets = tmp_path / "targets.txt"
    result = invoke("decode", trained_copy_run, "--input", given, "-o", targets, "--as-targets", "--set",
                    "decode.nbest=2")
    assert result.exit_code == 0, result.output
    assert targets.read_bytes() == plain  # the best of the recipe's two, one line per source
    result = invoke("decode", trained_copy_run, "--input", given, "--as-targets", "--nbest", "2")
    assert result.exit_code == 2 and "give one of the two" in result.output
