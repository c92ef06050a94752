"""`seqxduce export RUN --to ctranslate2` and `seqxduce decode DIR --engine ctranslate2` through the CLI: what the
folder holds, what is refused in one line, and the engine's outputs and metric beside seqxduce's own."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands
from seqxduce.export.exporting import METADATA_FILE
from tests.near_ties import assert_same_texts

pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install -e '.[ctranslate2]')")


# CTranslate2's kernels are not ours: its scores agree with ours to 1e-3 (tests/test_export_parity.py), so two
# outputs scoring within that of each other may come out the other way there
CT2_TIE = 1e-3


def split_of_test(run: Path) -> list:
    """The run's test split, as decode --split test reads it."""
    from seqxduce import components
    from seqxduce.decoding.decode import load_run

    loaded = load_run(run)
    return loaded.task.examples("test", components.data_dir(loaded.recipe))


def run_cli(*args: str):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


@pytest.fixture(scope="module")
def exported(tiny_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "ct2"
    result = run_cli("export", tiny_run, "--to", "ctranslate2", "-o", out)
    assert result.exit_code == 0, result.output
    return out


def test_export_folder_holds_model_tokenizer_recipe_and_metadata(tiny_run, exported):
    names = {p.name for p in exported.iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "recipe.toml", METADATA_FILE} <= names
    assert "tokenizer.vocab" in names  # the run's word vocabulary, shared
    meta = json.loads((exported / METADATA_FILE).read_text())
    assert meta["engine"] == "ctranslate2" and meta["quantization"] == "none"
    assert meta["checkpoint"].endswith("average.pt") and meta["averaged_steps"] == [4, 6]
    assert meta["seqxduce_version"] and meta["ctranslate2_version"]
    vocabulary = json.loads((exported / "shared_vocabulary.json").read_text())
    assert vocabulary[:4] == ["<pad>", "<s>", "</s>", "<unk>"]  # our special ids, in our order
    config = json.loads((exported / "config.json").read_text())
    assert config["add_source_eos"] is True and config["decoder_start_token"] == "<s>"


def test_engine_decodes_the_export_through_the_task_pipeline_as_seqxduce_does(tiny_run, exported):
    same = ["--set", "decode.alpha=0"]  # CTranslate2 has no GNMT length penalty (see ct2_decoding.py)
    ours = run_cli("decode", tiny_run, "--split", "test", *same)
    theirs = run_cli("decode", exported, "--engine", "ctranslate2", "--split", "test", *same)
    assert ours.exit_code == 0, ours.output
    assert theirs.exit_code == 0, theirs.output
    metric = [line for line in ours.output.splitlines() if "sequence_accuracy" in line]
    sources = [example.source for example in split_of_test(tiny_run)]
    assert len(sources) == 20
    assert_same_texts(tiny_run, sources, ours.stdout.splitlines()[-20:], theirs.stdout.splitlines()[-20:],
                      ["decode.alpha=0"], tie=CT2_TIE)
    assert metric and "sequence_accuracy" in theirs.output
    if ours.stdout.splitlines()[-20:] == theirs.stdout.splitlines()[-20:]:  # no near-tie went the other way
        assert metric[0] in theirs.output  # the same outputs, the same figure


def test_engine_decodes_a_run_directory_by_exporting_it_first(tiny_run, tmp_path):
    sources = tmp_path / "in.txt"
    sources.write_text("1 2 3\n4 5\n")
    ours = run_cli("decode", tiny_run, "--input", sources, "--set", "decode.alpha=0")
    theirs = run_cli("decode", tiny_run, "--engine", "ctranslate2", "--input", sources, "--set", "decode.alpha=0")
    assert theirs.exit_code == 0, theirs.output
    assert_same_texts(tiny_run, ["1 2 3", "4 5"], ours.stdout.splitlines()[-2:], theirs.stdout.splitlines()[-2:],
                      ["decode.alpha=0"], tie=CT2_TIE)


def test_quantized_export_decodes(tiny_run, tmp_path):
    out = tmp_path / "int8"
    assert run_cli("export", tiny_run, "-o", out, "--quantization", "int8").exit_code == 0
    assert json.loads((out / METADATA_FILE).read_text())["quantization"] == "int8"
    result = run_cli("decode", out, "--engine", "ctranslate2", "--split", "test")
    assert result.exit_code == 0, result.output


def test_a_non_empty_output_is_refused_and_an_export_replaced_only_with_overwrite(tiny_run, exported, tmp_path):
    result = run_cli("export", tiny_run, "-o", exported)
    assert result.exit_code != 0 and "--overwrite" in result.output
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    result = run_cli("export", tiny_run, "-o", other, "--overwrite")
    assert result.exit_code != 0 and "not an export" in result.output
    assert (other / "notes.txt").read_text() == "mine"


def test_an_ensemble_run_exports_one_member_at_a_time(tiny_run, tmp_path):
    run = tmp_path / "members"
    shutil.copytree(tiny_run, run)
    recipe = run / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("members = 1", "members = 2"))
    result = run_cli("export", run, "-o", tmp_path / "out")
    assert result.exit_code != 0 and "--member K" in result.output and "Traceback" not in result.output
    result = run_cli("export", run, "-o", tmp_path / "out", "--member", "1")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / METADATA_FILE).read_text())["member"] == 1
    assert "members = 1" in (tmp_path / "out" / "recipe.toml").read_text()
    result = run_cli("export", run, "-o", tmp_path / "out3", "--member", "3")
    assert result.exit_code != 0 and "members 1..2" in result.output


def test_the_engine_decodes_an_ensemble_runs_first_member_as_seqxduces_engine_reads_it(tiny_run, tmp_path):
    """`--set train.members=1` decodes member 1 alone with either engine; the ensemble as a whole is refused by
    CTranslate2 in one line naming both ways to one model."""
    run = tmp_path / "members"
    shutil.copytree(tiny_run, run)
    recipe = run / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("members = 1", "members = 2"))
    sources = tmp_path / "in.txt"
    sources.write_text("1 2 3\n4 5\n")
    one = ("--input", sources, "--set", "decode.alpha=0", "--set", "train.members=1")
    ours = run_cli("decode", run, *one)
    theirs = run_cli("decode", run, "--engine", "ctranslate2", *one)
    assert theirs.exit_code == 0, theirs.output
    assert_same_texts(tiny_run, ["1 2 3", "4 5"], ours.stdout.splitlines()[-2:], theirs.stdout.splitlines()[-2:],
                      ["decode.alpha=0"], tie=CT2_TIE)
    whole = run_cli("decode", run, "--engine", "ctranslate2", "--input", sources)
    assert whole.exit_code != 0 and "--set train.members=1" in whole.output and "--member K" in whole.output
    assert "Traceback" not in whole.output


def test_without_ctranslate2_the_cli_names_the_extra(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import fails as if not installed
    result = run_cli("export", tiny_run, "-o", tmp_path / "out")
    assert result.exit_code != 0 and "pip install -e '.[ctranslate2]'" in result.output
    result = run_cli("decode", tiny_run, "--engine", "ctranslate2", "--split", "test")
    assert result.exit_code != 0 and "pip install -e '.[ctranslate2]'" in result.output
    assert not (tmp_path / "out").exists()


def test_engine_refuses_a_search_it_does_not_have(exported):
    result = run_cli("decode", exported, "--engine", "ctranslate2", "--split", "test", "--set", "decode.name=sampling")
    assert result.exit_code != 0 and "decode.name" in result.output


def test_the_readme_deploy_example_runs_on_a_sentencepiece_export(tmp_path, capsys):
    """README's five lines, as written, with DIR and the sentence replaced: the export is all they need."""
    import re

    import seqxduce
    from seqxduce.testing import repository_root
    from tests.tiny import TINY_RECIPE

    run = tmp_path / "sp"
    seqxduce.train(seqxduce.load_recipe(TINY_RECIPE, ["tokenizer.name=sentencepiece", "tokenizer.vocab_size=20",
                                                      "train.max_steps=2", "train.validate_every=0"]), out=run)
    out = tmp_path / "deploy"
    assert run_cli("export", run, "-o", out).exit_code == 0
    readme = (repository_root(Path(__file__)) / "README.md").read_text()
    deploy = readme.split("\n## Deploy\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", deploy, re.S).group(1)
    assert len(code.strip().splitlines()) == 5
    exec(code.replace("DIR", str(out)).replace("Ein Hund rennt.", "1 2 3"), {})
    printed = capsys.readouterr().out.strip()
    assert set(printed) <= set("0123456789 ")  # the task's symbols, decoded by the exported sentencepiece model


def test_a_model_without_the_capability_is_refused_by_name(tiny_run, tmp_path, monkeypatch):
    """A third party's model inherits Model.export, which offers nothing: the core says so in one line. (The
    run's built model is given the base class's export, so that no plugin's code is touched.)"""
    import types

    from seqxduce import components
    from seqxduce.api import Model

    built_by = components.build_components

    def without_export(*args, **kwargs):
        built = built_by(*args, **kwargs)
        built.model.export = types.MethodType(Model.export, built.model)
        return built

    monkeypatch.setattr(components, "build_components", without_export)
    result = run_cli("export", tiny_run, "-o", tmp_path / "out")
    assert result.exit_code != 0 and "offers no export to ctranslate2" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_the_translator_takes_torchs_thread_count_on_the_cpu(exported, monkeypatch):
    """CTranslate2's default of 4 threads would oversubscribe a 2-core machine; the engine takes as many as
    torch's decoding does."""
    import ctranslate2
    import torch

    from seqxduce.export.ct2_decoding import load_export

    made = []
    real = ctranslate2.Translator
    monkeypatch.setattr(ctranslate2, "Translator", lambda *a, **kw: made.append(kw) or real(*a, **kw))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    loaded = load_export(exported, ["train.device=cpu"])
    assert made == [{"device": "cpu", "compute_type": "default", "intra_threads": 1}]
    assert loaded.translator.device == "cpu"
