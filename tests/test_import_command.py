"""`seqxduce import DIR --from NAME -o RUN` dispatches to the importer plugin registered as NAME, and makes of what
it reads a run every command takes; weights that do not fit the recipe's model are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from click.testing import CliRunner

from seqxduce import components, hookimpl
from seqxduce.api import ImportedModel, Importer
from seqxduce.cli import add_plugin_commands
from seqxduce.recipe import build_recipe
from seqxduce.testing import plugins_registered

RECIPE = {"task": {"name": "algorithmic", "kind": "reverse", "train_size": 50, "valid_size": 5, "test_size": 5},
          "tokenizer": {"name": "word"},
          "model": {"name": "transformer", "layers": 1, "d_model": 16, "d_ff": 32, "heads": 2},
          "decode": {"name": "greedy"}}


class ToyImporter(Importer):
    """Reads a folder holding `toy.json` ({"drop": tensor name}): a fresh word tokenizer over digits and a model's
    weights (less the named tensor, to see the refusal)."""

    def read(self, source: Path, workdir: Path) -> ImportedModel:
        drop = json.loads((source / "toy.json").read_text())["drop"]
        recipe = build_recipe(RECIPE)
        tokenizer = components.new_tokenizer(recipe)
        tokenizer.train(["0 1 2 3 4 5 6 7 8 9"], workdir)
        tokenizer.save(workdir, "toy")
        torch.manual_seed(0)
        model = components.build_model(recipe, components.Tokenizers(tokenizer, tokenizer).vocab())
        weights = {k: v for k, v in model.state_dict().items() if k != drop}
        return ImportedModel(recipe=RECIPE, tokenizers={"src": (workdir, "toy")}, weights=weights,
                             notes=["toy: imported"])


class ToyPlugin:
    @hookimpl
    def register_importers(self, register):
        register("toy", lambda settings: ToyImporter(), help="a toy model folder")


def test_import_dispatches_to_the_plugin_and_the_run_decodes(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "toy.json").write_text(json.dumps({"drop": ""}))
    with plugins_registered(ToyPlugin()):
        cli = add_plugin_commands()
        runner = CliRunner()
        result = runner.invoke(cli, ["import", str(tmp_path / "model"), "--from", "toy", "-o", str(tmp_path / "run")])
        assert result.exit_code == 0, result.output
        assert "toy: imported" in result.output
        listed = runner.invoke(cli, ["plugins", "--kind", "importer"])
        assert "toy" in listed.output and "marian" in listed.output
        decoded = runner.invoke(cli, ["decode", str(tmp_path / "run"), "--input", "-"], input="1 2 3\n")
        assert decoded.exit_code == 0, decoded.output
        again = runner.invoke(cli, ["import", str(tmp_path / "model"), "--from", "toy", "-o", str(tmp_path / "run")])
        assert again.exit_code == 1 and "--overwrite" in again.output


def test_weights_that_do_not_fit_and_unknown_importers_are_refused(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "toy.json").write_text(json.dumps({"drop": "decoder.0.transition.outer.bias"}))
    with plugins_registered(ToyPlugin()):
        runner = CliRunner()
        cli = add_plugin_commands()
        result = runner.invoke(cli, ["import", str(tmp_path / "model"), "--from", "toy", "-o", str(tmp_path / "run")])
        assert result.exit_code == 1 and "decoder.0.transition.outer.bias" in result.output
        assert not (tmp_path / "run" / "recipe.toml").exists()
        unknown = runner.invoke(cli, ["import", str(tmp_path / "model"), "--from", "tyo", "-o", str(tmp_path / "r")])
        assert unknown.exit_code == 1 and "Did you mean 'toy'" in unknown.output
        assert len(unknown.output.strip().splitlines()) == 1
