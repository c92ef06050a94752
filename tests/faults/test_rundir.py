"""Fault injection on the run directory: reused and damaged run folders, stale averages, files in the wrong
place, folders that cannot be written. Each bad case is one line naming the cause, before any heavy work."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat

import pytest
from click.testing import CliRunner

from seqxduce import engine
from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.run_start import RunStart
from tests.fault_tools import QUIET, read_only, run
from tests.tiny import FIXTURES
from tests.tiny import TINY_RECIPE as TINY

FAST = ["train.validate_every=0", "train.valid_decode_examples=0"]


@pytest.fixture(scope="module")
def cli():
    return add_plugin_commands()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of 4 steps with checkpoints at 2 and 4 and their average."""
    out = tmp_path_factory.mktemp("finished") / "run"
    engine.train(TINY, out, overrides=["train.max_steps=4", "train.average_last=2", *FAST])
    return out


def copy_run(run, tmp_path):
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def invoke(cli, *args, input=None):
    result = CliRunner().invoke(cli, [str(a) for a in args], input=input)
    assert "Traceback" not in result.output
    return result


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    return lines[0]


# ------------------------------------------------------------ reused run folders


def test_training_into_another_runs_folder_is_refused_naming_what_is_there(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    before = sorted(p.name for p in run_dir.rglob("*"))
    line = one_error_line(invoke(cli, "train", TINY, "--out", run_dir))
    assert "holds another run's files (recipe.toml, metrics.jsonl, average.pt, checkpoints/step_00000002.pt" in line
    assert "--resume" in line and "--overwrite" in line
    assert sorted(p.name for p in run_dir.rglob("*")) == before


def test_resume_with_a_recipe_file_that_differs_says_the_run_keeps_its_own(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    records = (run_dir / "metrics.jsonl").read_text()
    result = invoke(cli, "train", TINY, "--out", run_dir, "--resume", *QUIET)  # the run was made with --set flags
    assert result.exit_code == 0, result.output
    notice = " ".join(result.output.split())  # the notice as one line, however the console wrapped it
    assert f"train --resume: {TINY} differs from the recipe the run was started with" in notice
    assert "[train] max_steps: " in notice and "4 in the run" in notice and "--set" in notice
    assert (run_dir / "metrics.jsonl").read_text() == records  # finished at its own 4 steps: nothing trained


@pytest.mark.parametrize("given", ["saved", "same sets"])
def test_resume_with_the_runs_own_recipe_says_nothing(cli, finished, tmp_path, given):
    run_dir = copy_run(finished, tmp_path)
    if given == "saved":
        args = [run_dir / "recipe.toml"]
    else:
        sets = ["train.max_steps=4", "train.average_last=2", *FAST]
        args = [TINY, *[part for value in sets for part in ("--set", value)]]
    result = invoke(cli, "train", *args, "--out", run_dir, "--resume", *QUIET)
    assert result.exit_code == 0, result.output
    assert "differs" not in result.output


def test_overwrite_replaces_the_earlier_run_and_its_stale_average(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    for step in (2, 4):  # "checkpoints cleaned to save space": only the average is left of the earlier run
        (run_dir / "checkpoints" / f"step_0000000{step}.pt").unlink()
    result = invoke(cli, "train", TINY, "--out", run_dir, "--overwrite", "--set", "train.max_steps=2",
                    *QUIET)
    assert result.exit_code == 0, result.output
    assert "--overwrite: removed the earlier run's recipe.toml, metrics.jsonl, average.pt, tokenizer" in result.output
    assert not (run_dir / "average.pt").exists()
    assert engine.checkpoint_for(run_dir) == run_dir / "checkpoints" / "step_00000002.pt"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [("train", 2), ("valid", 2)]  # not two runs mixed


def test_resume_and_overwrite_together_are_refused(cli, tmp_path):
    line = one_error_line(invoke(cli, "train", TINY, "--out", tmp_path / "x", "--resume", "--overwrite"))
    assert "not both" in line


def test_train_out_naming_a_file_is_one_line(cli, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    line = one_error_line(invoke(cli, "train", TINY, "--out", tmp_path / "notes.txt"))
    assert "notes.txt: is a file, not a folder" in line
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_checkpoints_folder_replaced_by_a_file_is_one_line(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "checkpoints").write_text("")
    line = one_error_line(invoke(cli, "train", TINY, "--out", run_dir, "--resume"))
    assert "checkpoints: is a file, not a folder" in line


# ------------------------------------------------------------ averages


def test_decode_refuses_an_average_the_run_has_gone_past(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    old_average = (run_dir / "average.pt").read_bytes()
    engine.train(run_dir / "recipe.toml", run_dir, start=RunStart("resume"), overrides=["train.max_steps=6"])
    (run_dir / "average.pt").write_bytes(old_average)  # as if a kill had come before the new one was written
    line = one_error_line(invoke(cli, "decode", run_dir, "--input", "-", input="1 2\n"))
    assert "average.pt: stale, it averages steps 2, 4 but the run went on to step_00000006.pt" in line
    line = one_error_line(invoke(cli, "decode", run_dir / "average.pt", "--input", "-", input="1 2\n"))
    assert "stale" in line
    by_path = invoke(cli, "decode", run_dir / "checkpoints" / "step_00000006.pt", "--input", "-", input="1 2\n")
    assert by_path.exit_code == 0, by_path.output


def test_decode_refuses_an_average_of_another_run(cli, finished, tmp_path):
    other = tmp_path / "other"
    engine.train(TINY, other, overrides=["train.max_steps=4", "train.seed=2", *FAST])
    shutil.copy(finished / "average.pt", other / "average.pt")
    line = one_error_line(invoke(cli, "decode", other, "--input", "-", input="1 2\n"))
    assert "stale, it averages checkpoints of another run than step_00000004.pt" in line


def test_an_average_whose_checkpoints_were_cleaned_away_still_decodes(finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    shutil.rmtree(run_dir / "checkpoints")
    assert engine.checkpoint_for(run_dir) == run_dir / "average.pt"
    assert len(engine.decode(run_dir, ["1 2"])) == 1


def test_a_resumed_run_without_averaging_drops_the_average_only_after_its_final_checkpoint(finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    engine.train(run_dir / "recipe.toml", run_dir, start=RunStart("resume"),
                 overrides=["train.max_steps=6", "train.average_last=0"])
    assert not (run_dir / "average.pt").exists()
    assert engine.checkpoint_for(run_dir).name == "step_00000006.pt"


def test_average_of_checkpoints_of_different_shapes_is_one_line(cli, finished, tmp_path):
    wide = tmp_path / "wide"
    engine.train(TINY, wide, overrides=["train.max_steps=2", "model.d_ff=48", *FAST])
    line = one_error_line(invoke(cli, "average", finished / "checkpoints" / "step_00000004.pt",
                                 wide / "checkpoints" / "step_00000002.pt", "-o", tmp_path / "avg.pt"))
    assert "is (48, 16) in it but (32, 16) in" in line and "average checkpoints of one model only" in line
    assert not (tmp_path / "avg.pt").exists()


def test_average_into_a_missing_folder_is_refused_before_reading(cli, finished, tmp_path):
    line = one_error_line(invoke(cli, "average", finished / "checkpoints" / "step_00000004.pt",
                                 "-o", tmp_path / "nope" / "avg.pt"))
    assert "the folder" in line and "does not exist" in line


# ------------------------------------------------------------ damaged and misplaced checkpoints


def test_decode_passes_over_a_damaged_newest_checkpoint_saying_so(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    (run_dir / "average.pt").unlink()
    newest = run_dir / "checkpoints" / "step_00000004.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    result = invoke(cli, "decode", run_dir, "--input", "-", input="1 2\n")
    assert result.exit_code == 0, result.output
    assert "warning: passing over" in result.stderr and "step_00000004.pt: truncated or damaged" in result.stderr
    assert "decoding with" in result.stderr and "step_00000002.pt" in result.stderr


def test_a_checkpoint_that_is_a_folder_is_one_line(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    (run_dir / "checkpoints" / "step_00000008.pt").mkdir()
    line = one_error_line(invoke(cli, "decode", run_dir / "checkpoints" / "step_00000008.pt", "--input", "-",
                                 input="1 2\n"))
    assert "step_00000008.pt: not a file" in line


def test_a_checkpoint_from_a_model_of_another_shape_names_the_tensor(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)  # its recipe edited after training (decode refuses --set model.d_ff)
    recipe = run_dir / "recipe.toml"
    edited = re.sub(r"(?m)^d_ff = 32\b", "d_ff = 48", recipe.read_text())
    assert edited != recipe.read_text()
    recipe.write_text(edited)
    line = one_error_line(invoke(cli, "decode", run_dir, "--input", "-", input="1 2\n"))
    assert "from a model of another shape:" in line and "is (32, 16) in it but (48, 16) in the model" in line


def test_resume_from_a_step_file_without_optimizer_state_is_one_line(cli, finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    shutil.copy(run_dir / "average.pt", run_dir / "checkpoints" / "step_00000009.pt")
    line = one_error_line(invoke(cli, "train", TINY, "--out", run_dir, "--resume", "--set", "train.max_steps=12"))
    assert "step_00000009.pt: holds no optimizer (an averaged checkpoint?" in line


def test_checkpoints_get_the_mode_of_the_runs_other_files_and_no_save_leaves_a_temporary_file(finished):
    checkpoint_mode = {stat.S_IMODE(p.stat().st_mode) for p in (finished / "checkpoints").iterdir()}
    other_modes = {stat.S_IMODE((finished / name).stat().st_mode) for name in ("recipe.toml", "metrics.jsonl")}
    assert checkpoint_mode == other_modes == {0o666 & ~_umask()}
    assert not [p for p in finished.rglob(".*")]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------ bad inputs


def test_an_empty_training_file_is_named(cli, tmp_path):
    for split, text in (("train", ""), ("valid", "a b\n"), ("test", "a b\n")):
        (tmp_path / f"{split}.en").write_text(text)
        (tmp_path / f"{split}.de").write_text(text)
    recipe = tmp_path / "r.toml"
    recipe.write_text('[task]\nname = "translation"\ndataset = "files"\ndata_dir = "."\nsrc_lang = "en"\n'
                      'tgt_lang = "de"\n\n[tokenizer]\n' + TINY.read_text().split("[tokenizer]")[1])
    line = one_error_line(invoke(cli, "train", recipe, "--out", tmp_path / "run"))
    assert "train.en: the training file is empty" in line


def test_a_task_giving_no_training_examples_is_named(tmp_path, monkeypatch):
    """A task plugin whose training split is empty: the third-party sort task of tests/plugins, made to give
    none (the tests' own plugin, not a built-in one's code)."""
    from seqxduce_sort import SortTask

    monkeypatch.setattr(SortTask, "examples", lambda self, split, data_dir: [])
    with pytest.raises(UserError, match="read no training examples from .*: the training file is empty"):
        engine.train(FIXTURES / "sort.toml", tmp_path / "run", overrides=FAST)


def test_decode_output_into_a_missing_folder_is_refused_before_decoding(cli, finished, tmp_path):
    for option in ("--output", "--annotations"):
        result = invoke(cli, "decode", finished, "--split", "test", option, tmp_path / "missing" / "out.txt")
        assert "folder" in one_error_line(result) and "does not exist" in result.output
        assert "decoding with" not in result.output  # refused before any work


def test_decode_output_into_a_read_only_folder_is_refused_before_decoding(finished, tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    with read_only(target) as prefix:
        result = run("decode", finished, "--split", "test", "--output", target / "out.txt", prefix=prefix)
    assert result.returncode == 1 and "cannot write in" in result.stderr and "decoding with" not in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_resume_in_a_read_only_run_folder_is_refused_before_loading(finished, tmp_path):
    run_dir = copy_run(finished, tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with read_only(run_dir) as prefix:
        result = run("train", TINY, "--out", run_dir, "--resume", "--set", "train.max_steps=8", prefix=prefix)
    assert result.returncode == 1 and "--resume: cannot write in" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
