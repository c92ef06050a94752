"""Streaming over processes that torchrun starts, `score` streamed, and CTranslate2 streamed: each writes what
one process of seqxduce's own search writes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce.engine as engine
from seqxduce.cli import add_plugin_commands
from tests.fault_tools import HANG_GUARD_S, REPO, run, start, wait_for
from tests.streaming.test_stream_decode import sources, write


def _torchrun(*args: object) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "seqxduce", *(str(a) for a in args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_two_torchrun_ranks_write_one_output_equal_to_one_process(trained_copy_run: Path, tmp_path: Path):
    given = write(tmp_path / "in.txt", sources(900, seed=11))
    one, ranks = tmp_path / "one.txt", tmp_path / "ranks.txt"
    alone = run("decode", trained_copy_run, "--input", given, "-o", one, "--buffer-size", "100", "--nbest", "2")
    assert alone.returncode == 0, alone.stderr
    shared = _torchrun("decode", trained_copy_run, "--input", given, "-o", ranks, "--buffer-size", "100",
                       "--nbest", "2")
    assert shared.returncode == 0, shared.stderr[-3000:]
    assert ranks.read_bytes() == one.read_bytes() and len(one.read_text().splitlines()) == 1800
    scores_one, scores_ranks = tmp_path / "s1.txt", tmp_path / "s2.txt"
    targets = write(tmp_path / "tgt.txt", sources(900, seed=12))
    assert run("score", trained_copy_run, "--source", given, "--target", targets, "-o", scores_one,
               "--buffer-size", "100").returncode == 0
    shared = _torchrun("score", trained_copy_run, "--source", given, "--target", targets, "-o", scores_ranks,
                       "--buffer-size", "100")
    assert shared.returncode == 0, shared.stderr[-3000:]
    assert scores_ranks.read_bytes() == scores_one.read_bytes()


# Scores of the same pair computed in batches of other shapes (buffers of 50 against the whole input) differ in
# their last float bits (about 1e-6 here); printed to four decimals, a rounding may then move the last digit by
# one: equal within 1.5e-4 (a pair scored against another source or target differs by whole nats).
SCORE_TOLERANCE = 1.5e-4


def assert_scores_close(got: list[str], expected: list[str]) -> None:
    assert len(got) == len(expected)
    for number, (a, b) in enumerate(zip(got, expected), start=1):
        a_cols, b_cols = [float(x) for x in a.split("\t")], [float(x) for x in b.split("\t")]
        assert len(a_cols) == len(b_cols) and all(abs(x - y) <= SCORE_TOLERANCE for x, y in zip(a_cols, b_cols)), \
            f"line {number}: {a!r} streamed, {b!r} scored whole"


@pytest.mark.slow
def test_a_stop_under_torchrun_is_said_once_and_resumed_by_the_same_command(trained_copy_run: Path,
                                                                            tmp_path: Path):
    """SIGTERM to the launcher (as a scheduler sends it): torchrun forwards it to both ranks, rank 0 alone says
    that it stops and where the lines are kept; the same command with --resume then finishes the output equal to
    one process's."""
    import json
    import signal

    from seqxduce.decoding.stream_files import record_path

    given = write(tmp_path / "in.txt", sources(500, seed=13))
    out, log, marker = tmp_path / "out.txt", tmp_path / "stopped.log", tmp_path / "held"
    args = ("decode", trained_copy_run, "--input", given, "-o", out, "--buffer-size", "64")
    # rank 0, the one that writes, held after its first piece (tests/faults/held.py): the signal lands mid-job
    launcher = start("--standalone", "--nproc_per_node", "2", "-m", "tests.faults.held", "piece", marker, *args,
                     log=log, module=("torch.distributed.run",))
    wait_for(marker.exists, launcher)
    launcher.send_signal(signal.SIGTERM)
    marker.unlink()
    launcher.wait(timeout=HANG_GUARD_S)
    said = log.read_text()
    assert launcher.returncode != 0 and json.loads(record_path(out).read_text())["done"] > 0, said
    assert said.count("SIGTERM: stopping") == 1, said
    assert said.count("SIGTERM: decode stopped after") == 1 and "--resume to continue" in said, said
    assert "Received 15 death signal, shutting down workers" in said  # torchrun's own words (README)
    resumed = _torchrun(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    alone = tmp_path / "one.txt"
    assert run("decode", trained_copy_run, "--input", given, "-o", alone, "--buffer-size", "64").returncode == 0
    assert out.read_bytes() == alone.read_bytes()


def test_score_streams_what_scoring_the_whole_input_gives(trained_copy_run: Path, tmp_path: Path):
    lines, targets = sources(300, seed=13), sources(300, seed=14)
    src, tgt, out = write(tmp_path / "s.txt", lines), write(tmp_path / "t.txt", targets), tmp_path / "o.txt"
    result = CliRunner().invoke(add_plugin_commands(), ["score", str(trained_copy_run), "--source", str(src),
                                                        "--target", str(tgt), "-o", str(out), "--normalize",
                                                        "--buffer-size", "50"])
    assert result.exit_code == 0, result.output
    expected = engine.format_scores(engine.score(trained_copy_run, lines, targets), normalize=True)
    assert_scores_close(out.read_text().splitlines(), expected)
    short = write(tmp_path / "short.txt", targets[:5])
    result = CliRunner().invoke(add_plugin_commands(), ["score", str(trained_copy_run), "--source", str(src),
                                                        "--target", str(short)])
    assert result.exit_code == 1 and "has 300 lines but --target" in result.output


def test_ctranslate2_streams_what_it_decoded_at_once(trained_copy_run: Path, tmp_path: Path):
    pytest.importorskip("ctranslate2")
    lines = sources(400, seed=15)
    given, out = write(tmp_path / "in.txt", lines), tmp_path / "out.txt"
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(trained_copy_run), "--input", str(given),
                                                        "-o", str(out), "--engine", "ctranslate2", "--nbest", "2",
                                                        "--buffer-size", "128"])
    assert result.exit_code == 0, result.output
    from seqxduce.decoding.changes import flag_changes

    expected = engine.format_outputs(engine.decode(trained_copy_run, lines, changes=flag_changes(nbest=2),
                                                   engine="ctranslate2"))
    assert_nbest_close(out.read_text().splitlines(), expected)


def assert_nbest_close(got: list[str], expected: list[str]) -> None:
    """N-best lines (`index<TAB>score<TAB>text`) of the same sources decoded in batches of other shapes: the same
    texts per source, their scores within SCORE_TOLERANCE (CTranslate2 too changes a score's last bits with the
    batch); two hypotheses may trade places only where their scores are that close."""
    def grouped(lines: list[str]) -> dict[str, list[tuple[str, float]]]:
        table: dict[str, list[tuple[str, float]]] = {}
        for line in lines:
            index, score, text = line.split("\t")
            table.setdefault(index, []).append((text, float(score)))
        return table

    mine, theirs = grouped(got), grouped(expected)
    assert mine.keys() == theirs.keys() and len(got) == len(expected)
    for index, hypotheses in mine.items():
        assert sorted(t for t, _ in hypotheses) == sorted(t for t, _ in theirs[index]), index
        scores = dict(theirs[index])
        for rank, (text, score) in enumerate(hypotheses):
            assert abs(score - scores[text]) <= SCORE_TOLERANCE, (index, text, score, scores[text])
            if text != theirs[index][rank][0]:  # another order: only between scores as close as that
                assert abs(score - theirs[index][rank][1]) <= SCORE_TOLERANCE, (index, hypotheses, theirs[index])


def test_ctranslate2_takes_a_prefix_file_and_ranks_as_the_native_search(trained_copy_run: Path, tmp_path: Path):
    """CTranslate2's target_prefix, rescored as seqxduce's beam scores (what follows the prefix): the same outputs
    as seqxduce's search, but where CTranslate2 cannot end an output right after its prefix (it never does)."""
    pytest.importorskip("ctranslate2")
    lines = sources(120, seed=16)
    prefixes = [""] * 40 + [line.split()[0] for line in lines[40:80]] + ["9 9"] * 40  # none, likely, unlikely
    given, prefix_file = write(tmp_path / "in.txt", lines), write(tmp_path / "prefix.txt", prefixes)
    outs = {}
    for name in ("seqxduce", "ctranslate2"):
        outs[name] = tmp_path / f"{name}.txt"
        result = CliRunner().invoke(add_plugin_commands(), [
            "decode", str(trained_copy_run), "--input", str(given), "--prefix-file", str(prefix_file), "-o",
            str(outs[name]), "--engine", name, "--nbest", "2", "--set", "decode.alpha=1.0"])
        assert result.exit_code == 0, result.output
    native = [line.split("\t") for line in outs["seqxduce"].read_text().splitlines()]
    ct2 = [line.split("\t") for line in outs["ctranslate2"].read_text().splitlines()]
    best_native, best_ct2 = native[::2], ct2[::2]
    for (i, _, text), prefix in zip(best_ct2, prefixes):
        assert text.startswith(prefix), (i, text, prefix)
    comparable = [(a, b) for a, b, p in zip(best_native, best_ct2, prefixes) if a[2].strip() != p.strip()]
    assert len(comparable) >= 80  # 95 here: the unlikely prefixes mostly go on
    same = sum(a[2] == b[2] and abs(float(a[1]) - float(b[1])) < 1e-3 for a, b in comparable)
    assert same >= 0.99 * len(comparable), f"{same} of {len(comparable)}"


@pytest.mark.slow
def test_ctranslate2_stopped_on_a_run_directory_then_resumed_equals_one_never_stopped(
        trained_copy_run: Path, tmp_path: Path):
    """A run directory is exported into a new temporary folder by each command: the resume record keys the model
    by the checkpoint the export was made from, so the same command line with --resume continues the job."""
    pytest.importorskip("ctranslate2")


    given = write(tmp_path / "in.txt", sources(500, seed=17))
    args = ("decode", trained_copy_run, "--input", given, "--engine", "ctranslate2", "--buffer-size", "64", "-o")
    whole, out = tmp_path / "whole.txt", tmp_path / "out.txt"
    assert run(*args, whole).returncode == 0
    marker, log = tmp_path / "held", tmp_path / "stopped.log"
    process = start("piece", marker, *args, out, log=log, module=("tests.faults.held",))
    wait_for(marker.exists, process)
    process.send_signal(signal.SIGTERM)
    marker.unlink()
    assert process.wait(timeout=HANG_GUARD_S) == 128 + signal.SIGTERM, log.read_text()
    resumed = run(*args, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == whole.read_bytes()


def test_ctranslate2_refuses_worker_processes_on_a_run_directory_before_any_work(
        trained_copy_run: Path, tmp_path: Path):
    pytest.importorskip("ctranslate2")
    given, out = write(tmp_path / "in.txt", sources(30, seed=18)), tmp_path / "out.txt"
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(trained_copy_run), "--input", str(given),
                                                        "-o", str(out), "--engine", "ctranslate2", "--processes", "2"])
    assert result.exit_code == 1 and "is not an export folder (each worker would export" in result.output
    assert "decoding with" not in result.output and not list(tmp_path.glob("out.txt*"))


@pytest.mark.parametrize("setting", ["renormalize=true", "early_stopping=false", 'limit_eos="free"'])
def test_ctranslate2_says_it_does_not_renormalize_nor_stop_as_hugging_face_and_refuses_being_asked_to(
        setting: str, trained_copy_run: Path, tmp_path: Path):
    """A recipe that holds renormalize or a Hugging Face stopping rule (an imported Marian model's) decodes with a
    warning; the setting given on the command line, where it would change nothing, is refused in one line naming
    the engine and the setting."""
    key, value = setting.split("=")
    pytest.importorskip("ctranslate2")
    given = write(tmp_path / "in.txt", sources(3, seed=19))
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(trained_copy_run), "--input", str(given),
                                                        "--engine", "ctranslate2", "--set",
                                                        f"decode.{setting}"])
    assert result.exit_code == 1
    assert f"--set decode.{setting}: the ctranslate2 engine does not read [decode] {key}" in result.output
    run = tmp_path / "run"
    shutil.copytree(trained_copy_run, run)
    recipe = run / "recipe.toml"
    default = {"renormalize": "false", "early_stopping": '"never"', "limit_eos": '"scored"'}[key]
    assert f"{key} = {default}" in recipe.read_text()
    recipe.write_text(recipe.read_text().replace(f"{key} = {default}", f"{key} = {value}"))
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(run), "--input", str(given),
                                                        "--engine", "ctranslate2"])
    assert result.exit_code == 0, result.output
    assert f"warning: [decode] {key} = {value} is not applied by --engine ctranslate2" in result.stderr
