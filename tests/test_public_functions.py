"""Every command is also a function of the package (README "The command line"): the inspection ones included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import cli

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def test_the_package_offers_a_function_per_command_without_importing_torch():
    code = ("import sys, seqxduce; names = ['train', 'decode', 'decode_split', 'evaluate', 'average', 'prepare', "
            "'load_recipe', 'info', 'plot', 'attention', 'recipe_cost']; "
            "assert all(callable(getattr(seqxduce, n)) for n in names); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_info_gives_what_the_info_command_prints(tiny_run):
    facts = seqxduce.info(tiny_run)
    result = CliRunner().invoke(cli, ["info", str(tiny_run), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == json.loads(json.dumps(facts.as_dict()))


def test_recipe_cost_gives_what_recipe_info_prints():
    cost = seqxduce.recipe_cost(RECIPES / "wmt14_en_de_base.toml")
    result = CliRunner().invoke(cli, ["recipe", "info", str(RECIPES / "wmt14_en_de_base.toml")])
    assert result.exit_code == 0, result.output
    assert f"parameters: {cost.parameters:,}" in result.output


def test_plot_and_attention_write_their_pictures(tiny_run, tmp_path):
    pytest.importorskip("matplotlib")
    curves = seqxduce.plot([tiny_run], tmp_path / "curves.png")
    picture = seqxduce.attention(tiny_run, "a b c", tmp_path / "attention.png", kinds=("cross",))
    assert curves.stat().st_size > 0 and picture.stat().st_size > 0
