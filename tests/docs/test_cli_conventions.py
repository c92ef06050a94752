"""The conventions users of the field's tools reach for: -h, -o/--output, average RUN --last N, plain help."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from seqxduce import checkpoint
from seqxduce.cli import add_plugin_commands, cli
from tests.tiny import TINY_RECIPE


@pytest.mark.parametrize("args", [[], ["train"], ["decode"], ["recipe"], ["recipe", "show"], ["average"],
                                  ["info"], ["plot"], ["translate"], ["parse"]])
def test_dash_h_is_help_everywhere_plugin_commands_included(args):
    group = add_plugin_commands()
    short = CliRunner().invoke(group, [*args, "-h"])
    long = CliRunner().invoke(group, [*args, "--help"])
    assert short.exit_code == 0, short.output
    assert short.output == long.output and short.output.startswith("Usage:")
    assert "-h, --help" in short.output


@pytest.mark.parametrize("spelling", ["-o", "--output", "--out"])
def test_train_takes_its_run_directory_as_dash_o_or_output_or_out(tmp_path, spelling):
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", str(TINY_RECIPE), spelling, str(out), "--set", "train.max_steps=2",
                                      "--set", "train.validate_every=0"])
    assert result.exit_code == 0, result.output
    assert (out / "recipe.toml").is_file()


def test_average_last_n_averages_the_runs_newest_step_checkpoints(tiny_run, tmp_path):
    steps = sorted((tiny_run / "checkpoints").glob("step_*.pt"))
    assert len(steps) >= 3
    result = CliRunner().invoke(cli, ["average", str(tiny_run), "--last", "2", "-o", str(tmp_path / "last2.pt")])
    assert result.exit_code == 0, result.output
    assert steps[-1].name in result.output and steps[-2].name in result.output
    explicit = CliRunner().invoke(cli, ["average", str(steps[-2]), str(steps[-1]), "-o", str(tmp_path / "two.pt")])
    assert explicit.exit_code == 0, explicit.output
    a, b = (checkpoint.load(tmp_path / name)["model"] for name in ("last2.pt", "two.pt"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    three = checkpoint.load(steps[-3])["model"]
    assert any(not torch.equal(a[k], three[k]) for k in a)  # the oldest of three was left out


@pytest.mark.parametrize("args, expected", [
    (["--last", "99"], "step checkpoint(s)"),
    (["--last", "2", "EXTRA"], "give one run directory"),
])
def test_average_last_refuses_in_one_line(tiny_run, tmp_path, args, expected):
    args = [a if a != "EXTRA" else str(tiny_run) for a in args]
    result = CliRunner().invoke(cli, ["average", str(tiny_run), *args, "-o", str(tmp_path / "x.pt")])
    assert result.exit_code != 0
    assert expected in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "x.pt").exists()


def test_info_and_recipe_info_say_which_is_for_a_run_and_which_for_a_recipe():
    top = CliRunner().invoke(cli, ["info", "-h"]).output
    recipe = CliRunner().invoke(cli, ["recipe", "info", "-h"]).output
    assert "trained run" in top and "recipe info" in top
    assert "before training" in recipe and "seqxduce info" in recipe


@pytest.mark.parametrize("args, usage", [
    (["decode"], "decode [OPTIONS] RUN"), (["info"], "info [OPTIONS] RUN"),
    (["attention"], "attention [OPTIONS] RUN"), (["plot"], "plot [OPTIONS] RUN..."),
    (["translate"], "translate [OPTIONS] RUN"), (["parse"], "parse [OPTIONS] RUN"),
    (["train"], "train [OPTIONS] RECIPE"), (["recipe", "show"], "show [OPTIONS] RECIPE"),
    (["recipe", "info"], "info [OPTIONS] RECIPE"),
])
def test_one_metavar_for_a_run_and_one_for_a_recipe(args, usage):
    result = CliRunner().invoke(add_plugin_commands(), [*args, "-h"])
    assert usage in result.output.splitlines()[0], result.output
