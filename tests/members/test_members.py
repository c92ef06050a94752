"""[train] members = N: N seeds of one recipe trained side by side with one set of tokenizer files, decoded as
an ensemble; and `train --tokenizers-from`, which lets two separately started runs be ensembled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import seqxduce
from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.members import members_to_decode
from seqxduce.recipe import load_recipe
from seqxduce.rundir import RunDir
from seqxduce.training.supervisor import member_command, parallel_count
from tests.tiny import TINY_RECIPE

MEMBERS = ["train.members=2", "train.validate_every=0", "train.parallel_members=2"]


@pytest.fixture(scope="module")
def two_members(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ensemble") / "run"
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(TINY_RECIPE), "--out", str(out),
                                                        *sum((["--set", s] for s in MEMBERS), [])])
    assert result.exit_code == 0, result.output
    return out


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def test_members_are_seeded_apart_and_share_one_tokenizer(two_members: Path):
    second = two_members / "members" / "2"
    assert RunDir(two_members).load_recipe().train.seed == 1
    assert RunDir(second).load_recipe().train.seed == 2
    assert RunDir(two_members).load_recipe().train.members == 2  # the run as a whole
    assert RunDir(second).load_recipe().train.members == 1  # a member is an ordinary run
    ours = {p.name: p.read_bytes() for p in two_members.glob("tokenizer*")}
    assert ours and ours == {p.name: p.read_bytes() for p in second.glob("tokenizer*")}
    a, b = _weights(two_members / "checkpoints" / "step_00000006.pt"), _weights(second / "checkpoints" /
                                                                                 "step_00000006.pt")
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_decoding_the_run_is_the_ensemble_of_its_members(two_members: Path):
    runner = CliRunner()
    whole = runner.invoke(add_plugin_commands(), ["decode", str(two_members), "--split", "valid", "--examples", "0"])
    assert whole.exit_code == 0, whole.output
    assert f"+ {two_members / 'members' / '2'}" in whole.output
    explicit = runner.invoke(add_plugin_commands(), ["decode", str(two_members), "--split", "valid", "--examples",
                                                     "0", "--set", "train.members=1", "--ensemble",
                                                     str(two_members / "members" / "2")])
    alone = runner.invoke(add_plugin_commands(), ["decode", str(two_members), "--split", "valid", "--examples", "0",
                                                  "--set", "train.members=1"])
    assert explicit.exit_code == 0 and alone.exit_code == 0
    said = alone.output.splitlines()[1]  # after the threads line
    assert said.startswith("decoding with ") and " + " not in said  # --set train.members=1: the first member alone
    assert whole.stdout == explicit.stdout
    outputs = seqxduce.decode(two_members, ["1 2 3", "4 5"])  # the Python API ensembles them too
    assert [o.text for o in outputs] == [o.text for o in seqxduce.decode(
        two_members / "checkpoints" / "step_00000006.pt", ["1 2 3", "4 5"],
        ensemble=[two_members / "members" / "2"])]


def test_a_member_without_checkpoints_is_one_line_naming_the_fix(two_members: Path, tmp_path: Path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(two_members, copy)
    shutil.rmtree(copy / "members" / "2" / "checkpoints")
    with pytest.raises(UserError, match="member 2 has no checkpoint.*--resume"):
        members_to_decode(RunDir(copy), RunDir(copy).load_recipe())


def test_a_resumed_ensemble_grows_by_the_member_count_it_is_given(two_members: Path, tmp_path: Path):
    """Two members trained, then `--resume --set train.members=3`: the third (seed 3) trains beside the two that
    are done (untouched), and the run's recipe says three, so that decode ensembles all of them."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(two_members, copy)
    done = {d: RunDir(d).step_checkpoints()[-1].read_bytes() for d in (copy, copy / "members" / "2")}
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(copy / "recipe.toml"), "--out", str(copy),
                                                        "--resume", "--set", "train.members=3"])
    assert result.exit_code == 0, result.output
    third = copy / "members" / "3"
    assert RunDir(third).step_checkpoints() and RunDir(third).load_recipe().train.seed == 3
    assert RunDir(copy).load_recipe().train.members == 3
    assert members_to_decode(RunDir(copy), RunDir(copy).load_recipe()) == [copy / "members" / "2", third]
    assert all(RunDir(d).step_checkpoints()[-1].read_bytes() == saved for d, saved in done.items())


def test_a_new_ensemble_refuses_a_folder_with_members_unless_overwrite(two_members: Path, tmp_path: Path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(two_members / "members", copy / "members")
    with pytest.raises(UserError, match="another ensemble's members"):
        seqxduce.train(TINY_RECIPE, out=copy, overrides=MEMBERS)


def test_how_many_train_at_once():
    def recipe(*overrides: str):
        return load_recipe(TINY_RECIPE, ("train.members=3", *overrides))

    assert parallel_count(recipe(), cores=2) == 2
    assert parallel_count(recipe(), cores=8) == 3
    assert parallel_count(recipe("train.parallel_members=1"), cores=8) == 1
    assert parallel_count(recipe("train.device=cuda"), cores=8) == 1  # one GPU: one at a time


def test_member_commands_carry_seed_overrides_and_tokenizers(tmp_path: Path):
    recipe = load_recipe(TINY_RECIPE, ("train.members=3", "train.seed=5"))
    first = member_command(1, recipe, tmp_path, resume=False, overwrite=False, overrides=["train.max_steps=9"])
    third = member_command(3, recipe, tmp_path, resume=True, overwrite=True, overrides=["train.max_steps=9"])
    assert "--single" in first and "--tokenizers-from" in first and "--overwrite" not in first
    assert third[third.index("--out") + 1] == str(tmp_path / "members" / "3")
    assert third[-1] == "--resume"
    sets = [third[i + 1] for i, a in enumerate(third) if a == "--set"]
    assert sets == ["train.max_steps=9", "train.seed=7", "train.members=1"]  # the member's seed last
    assert "--tokenizers-from" not in third  # a resumed member keeps its own


def test_tokenizers_from_copies_another_runs_files(tiny_run: Path, tmp_path: Path):
    out = tmp_path / "other"
    seqxduce.train(TINY_RECIPE, out=out, overrides=["train.max_steps=2", "train.validate_every=0", "train.seed=9"],
                   start=seqxduce.RunStart(tokenizers_from=tiny_run))
    assert {p.name: p.read_bytes() for p in out.glob("tokenizer*")} == \
        {p.name: p.read_bytes() for p in tiny_run.glob("tokenizer*")}
    with pytest.raises(UserError, match="--tokenizers-from .*holds no tokenizer files"):
        seqxduce.train(TINY_RECIPE, out=tmp_path / "third", overrides=["train.max_steps=2"],
                       start=seqxduce.RunStart(tokenizers_from=tmp_path))


def _train_process(out: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "seqxduce", "train", str(TINY_RECIPE), "--out", str(out), "--set",
               "train.members=2", "--set", "train.validate_every=0", "--set", "train.max_steps=100000", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def _wait_for_steps(process: subprocess.Popen, lines: list[str], wanted: set[str]) -> None:
    assert process.stdout is not None
    seen: set[str] = set()
    for line in process.stdout:
        lines.append(line)
        seen.update(tag for tag in wanted if line.startswith(tag) and "| loss" in line)
        if seen == wanted:
            return
    pytest.fail("training ended before every member logged a step:\n" + "".join(lines))


def test_sigterm_reaches_every_member_and_resume_goes_on(tmp_path: Path):
    out = tmp_path / "run"
    process = _train_process(out)
    lines: list[str] = []
    _wait_for_steps(process, lines, {"[member 1]", "[member 2]"})
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, "".join(lines) + rest
    assert "--resume" in rest and "Traceback" not in rest
    saved = [RunDir(d).step_checkpoints() for d in (out, out / "members" / "2")]
    assert all(saved)
    steps = [int(torch.load(s[-1], weights_only=False)["step"]) for s in saved]
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(out / "recipe.toml"), "--out", str(out),
                                                        "--resume", "--set", f"train.max_steps={max(steps) + 2}"])
    assert result.exit_code == 0, result.output
    for d in (out, out / "members" / "2"):
        assert int(torch.load(RunDir(d).step_checkpoints()[-1], weights_only=False)["step"]) == max(steps) + 2


def test_a_failing_member_stops_the_others_and_names_itself(two_members: Path, tmp_path: Path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(two_members, copy)
    for damaged in RunDir(copy / "members" / "2").step_checkpoints():
        damaged.write_bytes(b"not a checkpoint")
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(copy / "recipe.toml"), "--out", str(copy),
                                                        "--resume", "--set", "train.max_steps=100000"])
    assert result.exit_code == 1, result.output
    assert "member 2 of 2" in result.output and "Traceback" not in result.output
    # member 1 was stopped and saved, not left to train 100,000 steps
    assert int(torch.load(RunDir(copy).step_checkpoints()[-1], weights_only=False)["step"]) < 100000


def test_info_names_the_members_decode_ensembles(two_members: Path):
    from seqxduce.inspection.run_info import format_info, run_info

    info = run_info(two_members)
    assert info.members == [str(two_members / "members" / "2")]
    assert f"+ {two_members / 'members' / '2'}" in format_info(info).splitlines()[1]
    assert run_info(two_members / "checkpoints" / "step_00000006.pt").members == []  # one checkpoint named
