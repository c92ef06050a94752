"""`seqxduce distill`: a tiny teacher decodes a student's training split, the outputs are kept once as a set keyed by
the teacher's checkpoints, its search and the data, and the student trains on them; a stopped distillation
resumes to the same set; the original pairs' share; the refusals, each before any decoding."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from seqxduce import engine
from seqxduce.api import Example, UserError
from seqxduce.cli import cli
from seqxduce.corpus.distilled import (
    RECORD,
    DistilledSet,
    DistilledTask,
    originals_chosen,
)
from seqxduce.decoding.stream_files import partial_path, record_path
from seqxduce.rundir import RunDir
from tests.fault_tools import HANG_GUARD_S, REPO, env, run, start, wait_for
from tests.tiny import TINY_RECIPE
from tests.tiny_teacher import Lines, made_by_hand


def distill(*args: object) -> object:
    result = CliRunner().invoke(cli, ["distill", *map(str, args)])
    return result


def only_set(cache: Path) -> DistilledSet:
    found = sorted(cache.glob("distilled-*"))
    assert len(found) == 1, found
    return DistilledSet(found[0])


def test_the_student_trains_on_what_the_teacher_decodes(teacher: Path, cache: Path, tmp_path: Path) -> None:
    result = distill(teacher, TINY_RECIPE, "--out", tmp_path / "student")
    assert result.exit_code == 0, result.output
    made = only_set(cache)
    assert made.complete and json.loads(made.record_file.read_text())["pairs"] == 300
    # the targets are the teacher's own decode of the sources, line for line
    decoded = tmp_path / "decoded.txt"
    by_decode = CliRunner().invoke(cli, ["decode", str(teacher), "--input", str(made.sources), "-o", str(decoded)])
    assert by_decode.exit_code == 0, by_decode.output
    assert made.targets.read_bytes() == decoded.read_bytes()
    # and the task's training split is what the student read: its sources, in order, with the teacher's outputs
    originals = engine.load_recipe(TINY_RECIPE)
    from seqxduce.components import build_task, data_dir

    task = build_task(originals)
    given = task.examples("train", data_dir(originals))
    assert made.sources.read_text().splitlines() == [e.source for e in given]
    assert made.originals.read_text().splitlines() == [e.target for e in given]
    student = RunDir(tmp_path / "student")
    saved = student.load_recipe()
    assert Path(saved.distill.targets) == made.folder
    assert student.step_checkpoints(), "the student trained"
    # the student's [tokenizer] is the teacher's: it took the teacher's files
    assert (tmp_path / "student" / "tokenizer.vocab").read_bytes() == (teacher / "tokenizer.vocab").read_bytes()
    assert "takes the teacher's tokenizer files" in result.output


def test_a_student_fine_tuned_from_another_run_starts_from_its_weights(teacher: Path, cache: Path,
                                                                      tmp_path: Path) -> None:
    """--init-from: the student starts from a run's weights (here the teacher's own checkpoint; in a study, the
    student's model trained on the original pairs) and trains on the distilled set; not with --resume."""
    import torch

    source = RunDir(teacher).step_checkpoints()[-1]
    out = tmp_path / "student"
    result = distill(teacher, TINY_RECIPE, "--out", out, "--init-from", source, "--set", "train.max_steps=0")
    assert result.exit_code == 0, result.output
    assert f"initialised from {source}" in result.output
    given = torch.load(source, weights_only=True)["model"]
    first = torch.load(out / "checkpoints" / "step_00000000.pt", weights_only=True)["model"]
    assert given.keys() == first.keys() and all(torch.equal(given[k], first[k]) for k in given)
    assert Path(RunDir(out).load_recipe().distill.targets) == only_set(cache).folder
    refused = distill(teacher, TINY_RECIPE, "--out", out, "--init-from", source, "--resume")
    assert refused.exit_code != 0 and "--init-from starts a new run" in refused.output, refused.output
    assert "Traceback" not in refused.output


def test_the_set_is_made_once_and_keyed_by_the_teachers_checkpoint_and_search(teacher: Path, cache: Path,
                                                                               tmp_path: Path) -> None:
    fewer_steps = ("--set", "train.max_steps=2")
    first = distill(teacher, TINY_RECIPE, "--out", tmp_path / "a", *fewer_steps)
    assert first.exit_code == 0, first.output
    made = only_set(cache)
    # a second student of the same teacher decodes nothing
    again = distill(teacher, TINY_RECIPE, "--out", tmp_path / "b", *fewer_steps)
    assert again.exit_code == 0, again.output
    assert f"made already: {made.folder}" in again.output and only_set(cache) == made
    # another search, or another checkpoint of the teacher, is another teacher
    other_search = distill(teacher, TINY_RECIPE, "--out", tmp_path / "c", *fewer_steps,
                           "--teacher-set", "decode.beam=1")
    assert other_search.exit_code == 0, other_search.output
    step_4 = teacher / "checkpoints" / "step_00000004.pt"
    other_checkpoint = distill(teacher, TINY_RECIPE, "--out", tmp_path / "d", *fewer_steps, "--checkpoint", step_4)
    assert other_checkpoint.exit_code == 0, other_checkpoint.output
    folders = {Path(RunDir(tmp_path / x).load_recipe().distill.targets) for x in "abcd"}
    assert len(folders) == 3 and len(list(cache.glob("distilled-*"))) == 3


def test_a_stopped_distillation_resumes_to_the_set_of_one_never_stopped(teacher: Path, tmp_path: Path) -> None:
    """SIGTERM while the teacher decodes (held after its first piece of two: 256 of 300 sources): its line names the
    same command (or --auto-resume), which continues the decode where it stopped, to the set of a distillation never
    stopped, byte for byte; --resume, which continues a student's checkpoint, is refused before any decoding."""
    whole_cache, stopped_cache = tmp_path / "whole", tmp_path / "stopped"
    given = ("distill", teacher, TINY_RECIPE, "--set", "train.max_steps=2")
    args = (*given, "--auto-resume")
    whole = run(*args, "--out", tmp_path / "s1", extra_env={"SEQXDUCE_CACHE": str(whole_cache)})
    assert whole.returncode == 0, whole.stderr
    marker, log = tmp_path / "held", tmp_path / "held.log"
    stopped_env = {"SEQXDUCE_CACHE": str(stopped_cache)}
    process = start("piece", marker, *args, "--out", tmp_path / "s2", log=log, module=("tests.faults.held",),
                    extra_env=stopped_env)
    wait_for(marker.exists, process)
    process.send_signal(signal.SIGTERM)
    marker.unlink()
    process.wait(timeout=HANG_GUARD_S)
    said = log.read_text()
    assert process.returncode == 128 + signal.SIGTERM, said
    stopped = only_set(stopped_cache)
    assert not stopped.complete and not (stopped.folder / RECORD).exists()
    kept = json.loads(record_path(stopped.targets).read_text())["done"]
    assert kept == 256 and len(partial_path(stopped.targets).read_text().splitlines()) == kept, said
    assert not (tmp_path / "s2" / "checkpoints").exists(), "no student step before the set is whole"
    assert "kept in" in said and "run the same command (or it with --auto-resume) to continue" in said, said
    assert "--resume to continue" not in said
    refused = run(*given, "--resume", "--out", tmp_path / "s2", extra_env=stopped_env)
    assert refused.returncode == 1, refused.stderr
    assert "holds no student checkpoint to continue; drop --resume" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and "decoding with" not in refused.stderr
    assert json.loads(record_path(stopped.targets).read_text())["done"] == kept, "nothing decoded"
    resumed = run(*args, "--out", tmp_path / "s2", extra_env=stopped_env)
    assert resumed.returncode == 0, resumed.stderr
    assert only_set(stopped_cache).targets.read_bytes() == only_set(whole_cache).targets.read_bytes()
    assert RunDir(tmp_path / "s2").step_checkpoints()


def test_under_torchrun_the_ranks_make_the_set_of_one_process_and_train_the_student(teacher: Path,
                                                                                     tmp_path: Path) -> None:
    """Two gloo ranks: rank 0 writes the sources, each rank decodes its share of them into the one set (the
    streamed decode under torchrun), and the student trains on it; the set equals one process's, byte for byte.
    With word_kd the teacher's distributions are shared: each rank computes a piece of the pass (who takes which
    is settled by file locks, not a collective), and the pieces merge to what one process computes."""
    args = ("distill", teacher, TINY_RECIPE, "--set", "train.max_steps=2", "--set", 'train.device="cpu"',
            "--set", "distill.word_kd=0.5")
    alone = run(*args, "--out", tmp_path / "alone", extra_env={"SEQXDUCE_CACHE": str(tmp_path / "c1")})
    assert alone.returncode == 0, alone.stderr
    ranks = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                            "-m", "seqxduce", *map(str, args), "--out", str(tmp_path / "ranks")], capture_output=True,
                           text=True, env={**env(), "SEQXDUCE_CACHE": str(tmp_path / "c2")}, cwd=REPO,
                           timeout=HANG_GUARD_S)
    assert ranks.returncode == 0, ranks.stderr[-3000:]
    # both pieces computed (by their ranks, or one taken over by the rank that finished first) and merged
    assert "piece 1 of 2" in ranks.stderr and "piece 2 of 2" in ranks.stderr, ranks.stderr[-3000:]
    made = only_set(tmp_path / "c2")
    assert made.complete and made.targets.read_bytes() == only_set(tmp_path / "c1").targets.read_bytes()
    assert RunDir(tmp_path / "ranks").step_checkpoints()
    (by_ranks,), (by_one,) = ([p for p in (tmp_path / c).glob("soft-*") if p.is_dir()] for c in ("c2", "c1"))
    assert by_ranks.name == by_one.name  # the same teacher, k and ids: the same key
    ranked, single = (np.load(folder / "probs.npy").astype(np.float32) for folder in (by_ranks, by_one))
    # the same probabilities, within float16's rounding of sums taken in another order (one thread or two);
    # the near-uniform tiny teacher's ties may order its tokens otherwise, so they are compared sorted
    assert np.allclose(np.sort(ranked, axis=1), np.sort(single, axis=1), atol=2e-3)


def test_a_share_of_the_original_pairs_trains_beside_the_distilled_ones(tmp_path: Path) -> None:
    pairs = [(f"s{i}", f"t{i}") for i in range(200)]
    distilled = made_by_hand(tmp_path / "set", pairs, [f"d{i}" for i in range(200)])
    task = Lines(pairs)
    alone = list(DistilledTask(task, distilled).stream("train", tmp_path))
    assert alone == [Example(f"s{i}", f"d{i}") for i in range(200)]
    half = list(DistilledTask(task, distilled, 0.5).stream("train", tmp_path))
    assert len(half) == 300
    chosen = originals_chosen(200, 0.5)
    assert chosen.sum() == 100
    expected = []
    for i in range(200):
        expected.append(Example(f"s{i}", f"d{i}"))
        if chosen[i]:
            expected.append(Example(f"s{i}", f"t{i}"))
    assert half == expected  # each original right after its distilled pair, the same choice every time
    every = list(DistilledTask(task, distilled, 1.0).stream("train", tmp_path))
    assert len(every) == 400
    # the share is part of what the prepared data are keyed by (the files' names): each share its own
    files = {r: DistilledTask(task, distilled, r).data_files("train", tmp_path)[-1] for r in (0.0, 0.5, 1.0)}
    assert len(set(files.values())) == 3 and all(f.is_file() for f in files.values())
    # the other splits are the task's own
    assert DistilledTask(task, distilled, 0.5).examples("valid", tmp_path) == []


def test_each_pair_keeps_its_corpus_and_forced_prefix_and_a_set_of_one_corpus_holds_neither(tmp_path: Path) -> None:
    """A task of several corpora (a multilingual translation's): each pair's corpus and target prefix are kept
    beside the sources, the teacher decodes with the prefixes, and the student's pairs, its originals too, carry
    both; a task of one corpus writes no such file (its sets are what they were)."""
    tagged = [Example(f"s{i}", f"<2{lang}> t{i}", corpus=f"en-{lang}", prefix=f"<2{lang}>")
              for i, lang in enumerate(["de"] * 3 + ["fr"] * 2)]
    distilled = DistilledSet(tmp_path / "set")
    assert distilled.write_sources(iter(tagged), "test") == 5
    assert distilled.corpora.read_text().splitlines() == ["en-de"] * 3 + ["en-fr"] * 2
    assert distilled.prefixes.read_text().splitlines() == ["<2de>"] * 3 + ["<2fr>"] * 2
    distilled.targets.write_text("".join(f"{e.prefix} d{i}\n" for i, e in enumerate(tagged)))
    distilled.finish(5, {"made": "by hand"})
    task = Lines([(e.source, e.target) for e in tagged])
    every = list(DistilledTask(task, distilled, 1.0).stream("train", tmp_path))
    assert every[:2] == [Example("s0", "<2de> d0", corpus="en-de", prefix="<2de>"),
                         Example("s0", "<2de> t0", corpus="en-de", prefix="<2de>")]
    assert [e.corpus for e in every] == ["en-de"] * 6 + ["en-fr"] * 4
    assert distilled.corpora in DistilledTask(task, distilled).data_files("train", tmp_path)

    plain = made_by_hand(tmp_path / "plain", [("s", "t")], ["d"])
    assert sorted(p.name for p in plain.folder.iterdir()) == ["distilled.json", "originals.txt", "sources.txt",
                                                              "targets.txt"]
    assert list(DistilledTask(Lines([("s", "t")]), plain).stream("train", tmp_path)) == [Example("s", "d")]


def test_the_shares_file_made_by_two_processes_at_once_is_the_first_ones(tmp_path: Path, monkeypatch) -> None:
    """Every rank of a torchrun world asks for the share's file at once, and its time keys the prepared data: a
    second writer that found no file yet must not replace the first's (two times gave two keys, and a rank waited
    for a dataset nobody wrote). Both "see no file" here, as two racing processes do."""
    distilled = made_by_hand(tmp_path / "set", [("s", "t")], ["d"])
    first = distilled.mix_file(0.5).stat()
    monkeypatch.setattr(Path, "is_file", lambda self: False)  # the second process checked before the first wrote
    second = distilled.mix_file(0.5).stat()
    assert (second.st_ino, second.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    monkeypatch.undo()
    assert not [p for p in distilled.folder.iterdir() if p.name.endswith(".tmp")]


def test_a_set_whose_outputs_are_short_is_never_marked_whole(tmp_path: Path) -> None:
    pairs = [("a", "b"), ("c", "d")]
    with pytest.raises(UserError, match="1 teacher outputs for 2 sources"):
        made_by_hand(tmp_path / "set", pairs, ["x"])
    assert not DistilledSet(tmp_path / "set").complete


def test_a_line_break_inside_a_source_is_refused_naming_the_pair(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="the source of training pair 2 holds a line break"):
        DistilledSet(tmp_path / "set").write_sources(iter([Example("a", "b"), Example("c\nd", "e")]), "test")


def tiny_copy(path: Path, text: str = "") -> Path:
    """The tiny recipe written elsewhere, naming the tiny recipe's data folder (the teacher's), plus text."""
    data = TINY_RECIPE.parent / "data"
    path.write_text(TINY_RECIPE.read_text().replace("[task]\n", f'[task]\ndata_dir = "{data}"\n') + text)
    return path


def test_refusals_come_before_any_decoding(teacher: Path, cache: Path, tmp_path: Path) -> None:
    # a student recipe given to train: distill makes its set
    student = tiny_copy(tmp_path / "student.toml", '\n[distill]\nteacher = "teacher.toml"\n')
    trained = CliRunner().invoke(cli, ["train", str(student), "--out", str(tmp_path / "x")])
    assert trained.exit_code == 1 and "run `seqxduce distill TEACHER_RUN" in trained.output, trained.output
    assert not (tmp_path / "x").exists()
    # [distill] teacher names the teacher's recipe: a teacher run of another model is refused
    tiny_copy(tmp_path / "teacher.toml").write_text((tmp_path / "teacher.toml").read_text().replace(
        "d_model = 16", "d_model = 32"))
    other = distill(teacher, student, "--out", tmp_path / "y")
    assert other.exit_code == 1, other.output
    assert "[model] d_model = 16 there, but the recipe [distill] teacher names (teacher.toml) has 32" in other.output
    tiny_copy(tmp_path / "teacher.toml")
    # a recipe that names a distilled set already
    named = distill(teacher, TINY_RECIPE, "--out", tmp_path / "z", "--set", f"distill.targets={tmp_path}")
    assert named.exit_code == 1 and "distill sets it itself" in named.output, named.output
    # a teacher that is not a run directory
    missing = distill(tmp_path / "nothing", TINY_RECIPE, "--out", tmp_path / "z")
    assert missing.exit_code != 0
    assert not list(cache.glob("distilled-*")), "nothing was decoded"
    # a student run trained on one set, continued with another teacher search: refused before decoding
    first = distill(teacher, student, "--out", tmp_path / "s", "--set", "train.max_steps=2")
    assert first.exit_code == 0, first.output
    other_search = distill(teacher, student, "--out", tmp_path / "s", "--set", "train.max_steps=2",
                           "--auto-resume", "--teacher-set", "decode.beam=1")
    assert other_search.exit_code == 1 and "was trained on the distilled set" in other_search.output
    assert len(list(cache.glob("distilled-*"))) == 1


def test_the_sets_key_takes_the_datas_bytes_not_their_place_or_time(tmp_path: Path) -> None:
    # a set costs hours of decoding at scale: a copy of the data elsewhere, or a new session's checkout of the same
    # files with new times, must find the set made already; a changed byte must not
    from seqxduce.distillation.making import data_content

    class Files:
        def __init__(self, folder: Path):
            self.folder = folder

        def data_files(self, split: str, data_dir: Path) -> list[Path]:
            return [self.folder / "train.en", self.folder / "train.de"]

    first, copy = tmp_path / "a", tmp_path / "b"
    for folder in (first, copy):
        folder.mkdir()
        (folder / "train.en").write_text("a house\n")
        (folder / "train.de").write_text("ein Haus\n")
    key = data_content(Files(first), first, [])
    os.utime(first / "train.en", (1, 1))
    assert data_content(Files(first), first, []) == key == data_content(Files(copy), copy, [])
    (copy / "train.de").write_text("ein Hans\n")
    assert data_content(Files(copy), copy, []) != key


def test_the_speed_benchmark_times_teacher_member_and_student_on_the_same_sources(teacher: Path, tmp_path: Path,
                                                                                    monkeypatch, capsys) -> None:
    """A teacher of two members, as the Multi30k one: CTranslate2 decodes its first member's own export."""
    pytest.importorskip("ctranslate2")
    from tests.bench_scripts import load_bench

    members = tmp_path / "members"
    engine.train(TINY_RECIPE, members, overrides=["train.members=2", "train.max_steps=2"])
    bench = load_bench("distill_speed.py")
    monkeypatch.setattr("sys.argv", ["distill_speed.py", "--teacher", str(members), "--student", str(teacher),
                                     "--sentences", "6", "--repeats", "1"])
    bench.main()
    table = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    rows = table[1:]  # under the header
    assert [(row[0].lstrip("| "), row[1]) for row in rows] == [
        ("teacher ensemble", "seqxduce"), ("teacher member 1", "seqxduce"), ("student", "seqxduce"),
        ("teacher member 1", "ctranslate2"), ("student", "ctranslate2")]
    assert rows[0][4] == "1.00" and rows[1][5].rstrip(" |") == "1.00" and all(float(row[3]) > 0 for row in rows)
    assert [row[2] for row in rows] == ["fp32", "fp32", "fp32", "float32", "float32"]
