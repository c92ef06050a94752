"""Every command through click's CliRunner, on the tiny recipe."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from seqxduce import Example, Report, Task, engine, hookimpl
from seqxduce.api import read_lines
from seqxduce.cli import add_plugin_commands
from tests.conftest import plugins_registered
from tests.near_ties import assert_same_texts
from tests.tiny import TINY_RECIPE as RECIPE

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def cli():
    return add_plugin_commands()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cli):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    result = CliRunner().invoke(cli, ["train", str(RECIPE), "--out", str(out), "--set", "train.average_last=2"])
    assert result.exit_code == 0, result.output
    return out


def invoke(cli, *args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def test_plugins_lists_every_kind_with_its_package(cli):
    result = invoke(cli, "plugins")
    assert result.exit_code == 0, result.output
    for line in ("tasks:", "tokenizers:", "models:", "decoders:"):
        assert line in result.output
    assert "transformer" in result.output and "seqxduce-sort" in result.output


def test_recipe_show_prints_defaults(cli):
    result = invoke(cli, "recipe", "show", RECIPE, "--set", "train.max_steps=9")
    assert result.exit_code == 0, result.output
    assert "max_steps = 9" in result.output and "eps = 1e-09" in result.output


def test_train_writes_a_complete_run_directory(run_dir):
    names = {p.name for p in run_dir.iterdir()}
    assert {"recipe.toml", "metrics.jsonl", "checkpoints", "average.pt"} <= names
    assert any(n.startswith("tokenizer") for n in names)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["step"] for r in train] == [2, 4, 6]
    assert {"loss", "ppl", "lr", "tokens_per_s"} <= set(train[0])
    assert valid and "valid_sequence_accuracy" in valid[-1] and "ppl" in valid[-1]


def test_train_refuses_to_overwrite_a_run(cli, run_dir):
    result = invoke(cli, "train", RECIPE, "--out", run_dir)
    assert result.exit_code != 0
    assert "holds another run's files (recipe.toml, metrics.jsonl, average.pt, " in result.output
    assert "--resume" in result.output and "--overwrite" in result.output and "Traceback" not in result.output


def test_decode_input_file_and_stdin(cli, run_dir, tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("1 2 3\n4 5\n3\n")
    from_file = invoke(cli, "decode", run_dir, "--input", src)
    assert from_file.exit_code == 0, from_file.output
    assert "decoding with" in from_file.stderr and "average.pt" in from_file.stderr
    # sources are batched by length; outputs come back in input order, each as it is decoded alone (but for a
    # near-tie, which a batch of another shape may resolve otherwise: tests/near_ties.py)
    alone = [engine.decode(run_dir, [source])[0].text for source in ("1 2 3", "4 5", "3")]
    assert_same_texts(run_dir, ["1 2 3", "4 5", "3"], alone, from_file.stdout.splitlines())
    from_stdin = invoke(cli, "decode", run_dir, "--input", "-", input="1 2 3\n4 5\n3\n")
    assert from_stdin.stdout == from_file.stdout
    nbest = invoke(cli, "decode", run_dir, "--input", src, "--set", "decode.nbest=2")
    lines = nbest.stdout.splitlines()
    assert len(lines) == 6 and [line.split("\t")[0] for line in lines] == ["0", "0", "1", "1", "2", "2"]


def test_decode_split_reports_the_metric(cli, run_dir, tmp_path):
    result = invoke(cli, "decode", run_dir, "--split", "test", "--output", tmp_path / "hyp.txt")
    assert result.exit_code == 0, result.output
    assert "sequence_accuracy" in result.output
    assert len((tmp_path / "hyp.txt").read_text().splitlines()) == 20


def test_evaluate_with_task_and_with_run(cli, run_dir, tmp_path):
    (tmp_path / "hyp").write_text("1 2\n3 4\n")
    (tmp_path / "ref").write_text("1 2\n4 3\n")
    by_task = invoke(cli, "evaluate", tmp_path / "hyp", tmp_path / "ref", "--task", "algorithmic")
    assert by_task.exit_code == 0, by_task.output
    assert "0.5" in by_task.output
    by_run = invoke(cli, "evaluate", tmp_path / "hyp", tmp_path / "ref", "--recipe", run_dir)
    assert by_run.exit_code == 0 and by_run.output == by_task.output
    (tmp_path / "short").write_text("1 2\n")
    mismatch = invoke(cli, "evaluate", tmp_path / "short", tmp_path / "ref", "--task", "algorithmic")
    assert mismatch.exit_code != 0 and "has 1 lines but" in mismatch.output


def test_average_command(cli, run_dir, tmp_path):
    steps = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-2:]
    result = invoke(cli, "average", *steps, "-o", tmp_path / "avg.pt")
    assert result.exit_code == 0, result.output
    a, b = (torch.load(p, weights_only=True)["model"] for p in steps)
    avg = torch.load(tmp_path / "avg.pt", weights_only=True)["model"]
    name = next(n for n in avg if avg[n].is_floating_point())
    assert torch.allclose(avg[name], (a[name] + b[name]) / 2, atol=1e-6)


def test_corrupt_checkpoint_is_one_clear_line(cli, run_dir, tmp_path):
    bad = tmp_path / "step_00000001.pt"
    bad.write_bytes(b"not a checkpoint")
    (tmp_path / "recipe.toml").write_text((run_dir / "recipe.toml").read_text())
    for f in run_dir.iterdir():
        if f.name.startswith("tokenizer") and f.is_file():
            (tmp_path / f.name).write_bytes(f.read_bytes())
    result = invoke(cli, "decode", bad, "--input", "-", input="1 2\n")
    assert result.exit_code != 0
    assert "not a checkpoint (not a file torch.save wrote)" in result.output and "Traceback" not in result.output


def test_user_errors_are_one_line_without_traceback(cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(RECIPE.read_text().replace("d_model = 16", "d_modle = 16"))
    result = invoke(cli, "train", bad, "--out", tmp_path / "x")
    assert result.exit_code != 0
    assert "unknown key [model] d_modle" in result.output and "Did you mean 'd_model'" in result.output
    assert "Traceback" not in result.output
    missing = invoke(cli, "prepare", tmp_path / "nope.toml")
    assert missing.exit_code != 0 and "no such recipe file" in missing.output


class PreparedTask(Task):
    """A task whose prepare() builds a data file once, as a download would."""

    def prepare(self, data_dir: Path) -> None:
        data = data_dir / "pairs.txt"
        if data.is_file():
            return
        data_dir.mkdir(parents=True, exist_ok=True)
        data.write_text("1 2\t2 1\n", encoding="utf-8")

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        return [Example(*line.split("\t")) for line in read_lines(data_dir / "pairs.txt")]

    def score(self, hypotheses, references, sources=None) -> Report:
        return Report({}, primary="")


class PreparedTaskPlugin:
    @hookimpl
    def register_tasks(self, register):
        register("prepared", lambda settings: PreparedTask())


def test_prepare_command_builds_the_data_relative_to_the_recipe_once(cli, tmp_path):
    recipe = tmp_path / "recipes" / "prepared.toml"
    recipe.parent.mkdir()
    recipe.write_text('[task]\nname = "prepared"\ndata_dir = "../data"\n[tokenizer]\nname = "word"\n'
                      '[model]\nname = "transformer"\n', encoding="utf-8")
    with plugins_registered(PreparedTaskPlugin()):
        result = invoke(cli, "prepare", recipe)
        assert result.exit_code == 0, result.output
        data = tmp_path / "data" / "pairs.txt"
        where = result.output.splitlines()[-1].removeprefix("data ready in ")
        assert Path(where).resolve() == data.parent.resolve(), result.output
        assert data.read_text(encoding="utf-8") == "1 2\t2 1\n"
        data.write_text("3\t3\n", encoding="utf-8")  # a second prepare must keep what is there
        again = invoke(cli, "prepare", recipe)
        assert again.exit_code == 0, again.output
        assert data.read_text(encoding="utf-8") == "3\t3\n"
