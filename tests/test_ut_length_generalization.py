"""Length generalization support through the CLI: `seqxduce decode --annotations` (the ACT steps of a trained
run's source and output positions), the UT recipes and the benchmark that runs them (the position offsets' own
tests are the transformer plugin's, plugins/transformer/tests/test_position_offsets.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands
from seqxduce.data import encode_source
from seqxduce.decoding.decode import decode_lines, load_run
from seqxduce.recipe import load_recipe
from tests.bench_scripts import load_bench

TINY_RECIPE = """
[task]
name = "algorithmic"
kind = "copy"
train_max_len = 6
valid_max_len = 6
test_max_len = 6
train_size = 60
valid_size = 4
test_size = 4

[tokenizer]
name = "word"

[model]
name = "{model}"
d_model = 16
d_ff = 32
heads = 2
{extra}

[train]
device = "cpu"
max_tokens = 256
max_steps = 3
warmup_steps = 10
validate_every = 0
valid_decode_examples = 4
checkpoint_every = 3

[decode]
name = "greedy"
"""


@pytest.fixture(scope="module")
def cli():
    return add_plugin_commands()


def train_tiny(cli, tmp_path_factory, model: str, extra: str):
    """Train a tiny run for three steps through the CLI; returns its run directory."""
    where = tmp_path_factory.mktemp(model)
    recipe = where / "tiny.toml"
    recipe.write_text(TINY_RECIPE.format(model=model, extra=extra))
    result = CliRunner().invoke(cli, ["train", str(recipe), "--out", str(where / "run")])
    assert result.exit_code == 0, result.output
    return where / "run"


@pytest.fixture(scope="module")
def act_run(cli, tmp_path_factory):
    return train_tiny(cli, tmp_path_factory, "universal_transformer", "act = true\nact_max_steps = 4")


SOURCES = ["1 2 3", "4 5 6 7 8 9 0", "5"]


def source_ponder(run, sources: list[str]) -> list[list[int]]:
    """The encoder's depth steps per source position (its symbols, then eos) that decode --annotations gives."""
    return [[int(n) for n in o.annotations["source_ponder"]] for o in decode_lines(run, sources, annotate=True)]


def test_source_ponder_counts_follow_the_halting_unit(act_run):
    run = load_run(act_run)
    with torch.no_grad():
        run.model.encoder_halting.weight.zero_()
        run.model.encoder_halting.bias.fill_(30.0)  # p ~ 1: every position halts at its first step
    assert source_ponder(run, SOURCES) == [[1] * 4, [1] * 8, [1] * 2]
    with torch.no_grad():
        run.model.encoder_halting.bias.fill_(-30.0)  # p ~ 0: every position runs to act_max_steps
    assert source_ponder(run, SOURCES) == [[4] * 4, [4] * 8, [4] * 2]


def test_decode_annotations_give_source_and_output_ponder_counts(cli, act_run, tmp_path):
    sources = tmp_path / "src.txt"
    sources.write_text("".join(s + "\n" for s in SOURCES))
    notes = tmp_path / "ponder.jsonl"
    result = CliRunner().invoke(cli, ["decode", str(act_run), "--input", str(sources), "--output",
                                      str(tmp_path / "hyp.txt"), "--annotations", str(notes)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in notes.read_text().splitlines()]
    hyps = (tmp_path / "hyp.txt").read_text().splitlines()
    run = load_run(act_run)
    assert [r["index"] for r in records] == [0, 1, 2]
    for record, source, hyp in zip(records, SOURCES, hyps):
        assert record["source_tokens"] == source.split() + [run.tokenizers.src.id_to_token(run.tokenizers.src.eos_id)]
        assert len(record["target_tokens"]) == len(hyp.split()) + 1  # its symbols, then the eos it chose
        assert len(record["target_ponder"]) == len(record["target_tokens"])
        assert all(1 <= n <= 4 for n in record["source_ponder"] + record["target_ponder"])
        # the counts are the model's own, whatever the batch padding: the source decoded alone gives the same
        assert [int(n) for n in record["source_ponder"]] == source_ponder(run, [source])[0]


def test_decode_annotations_of_output_positions_are_the_ones_taken_while_decoding(act_run):
    """annotate() teacher-forces the decoded output; step() must have halted each position at the same step."""
    run = load_run(act_run)
    model = run.model
    torch.manual_seed(0)
    with torch.no_grad():
        model.decoder_halting.weight.normal_(0.0, 3.0)  # make halting differ between positions
        model.decoder_halting.bias.fill_(1.0)
    src = torch.tensor([encode_source(run.tokenizers.src, "1 2 3")])
    taken: list[float] = []
    memory = model.encode(src)
    cache = model.init_cache(memory)
    tgt_in = torch.tensor([[run.tokenizers.tgt.bos_id, 5, 6, 7, 8, 9]])
    original = model._recur

    def recording(*args, **kwargs):
        x, halting = original(*args, **kwargs)
        if halting is not None and not kwargs.get("stop_early", True):  # a decoder step()
            taken.append(float(halting.updates[0, 0]))
        return x, halting

    model._recur = recording
    try:
        for position in range(tgt_in.size(1)):
            _, cache = model.step(tgt_in[:, position], memory, cache)
    finally:
        del model._recur
    assert len(set(taken)) > 1  # positions halted at different depths, so the comparison means something
    assert model.annotate(src, tgt_in)["target_ponder"][0].tolist() == taken


def test_decode_annotations_of_a_transformer_run_are_one_clear_line(cli, tmp_path_factory, tmp_path):
    run = train_tiny(cli, tmp_path_factory, "transformer", "layers = 1")
    sources = tmp_path / "src.txt"
    sources.write_text("1 2\n")
    result = CliRunner().invoke(cli, ["decode", str(run), "--input", str(sources), "--annotations",
                                      str(tmp_path / "a.jsonl")])
    assert result.exit_code != 0
    assert "no per-position figures" in result.output and "Traceback" not in result.output


RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@pytest.mark.parametrize("kind", ["copy", "reverse", "addition"])
def test_ut_recipes_load_with_the_paper_lengths(kind):
    recipe = load_recipe(RECIPES / f"ut_{kind}.toml")
    task, model = recipe.task.settings, recipe.model.settings
    assert (task.kind, task.train_max_len, task.test_min_len, task.test_max_len) == (kind, 40, 400, 400)
    assert recipe.model.core.name == "universal_transformer" and model.act
    assert model.position_offset_max == 400
    assert task.operands == "separate"  # the paper's 'a + b'


def test_the_paired_addition_recipe_is_the_measured_cpu_setup():
    recipe = load_recipe(RECIPES / "ut_addition_paired.toml")
    task, model = recipe.task.settings, recipe.model.settings
    assert (task.kind, task.operands, task.lsb_first, task.train_max_len) == ("addition", "paired", True, 40)
    assert (recipe.model.core.name, model.act, model.position_offset_max) == ("universal_transformer", False, 0)


def bench_module():
    return load_bench("length_generalization.py")


@pytest.mark.parametrize("size", ["cpu", "paper"])
def test_bench_builds_a_valid_recipe_for_every_model_and_task(size):
    bench = bench_module()
    args = argparse.Namespace(offset_max=400, test_len=400, device="cpu", seed=1, set=["train.lr_scale=0.5"])
    for task in bench.TASKS:
        for kind in bench.MODELS:
            recipe = bench.recipe_for(task, kind, bench.SIZES[size], args)
            assert recipe.train.lr_scale == 0.5  # --set comes last
            # every model keeps the recipe's position handling
            assert recipe.model.settings.source_bos is (task != "copy")
            assert recipe.model.settings.source_positions == ("backward" if task == "reverse" else "forward")
            assert recipe.task.settings.kind == task
            assert recipe.task.settings.test_min_len == recipe.task.settings.test_max_len == 400
            assert recipe.train.max_steps == bench.SIZES[size]["steps"]
            assert recipe.model.settings.position_offset_max == 400
            assert recipe.model.settings.d_model == bench.SIZES[size]["d_model"]
            assert getattr(recipe.model.settings, "act", False) == (kind == "ut_act")


def test_bench_table_marks_paired_addition_as_not_the_papers_task():
    bench = bench_module()
    row = dict(model="ut", char_acc=0.5, seq_acc=0.1)
    separate = [dict(row, task="addition", operands="separate"), dict(row, task="copy", operands="separate")]
    assert bench.table(separate, ["copy", "addition"], ["ut"]).splitlines()[0] == "| model | copy | addition |"
    paired = [dict(row, task="addition", operands="paired"), dict(row, task="copy", operands="separate")]
    header = bench.table(paired, ["copy", "addition"], ["ut"]).splitlines()[0]
    assert header == "| model | copy | addition (ours: paired operands, not the paper's 'a + b') |"
