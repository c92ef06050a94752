"""Length generalization support: random training position offsets and `seqxduce decode --annotations` (the
ACT steps of a trained run's source and output positions)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from seqxduce_transformer.embedding import SinusoidalPositions, sinusoid_table, training_offset_pair, training_offsets
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import UserError, VocabInfo
from seqxduce.cli import add_plugin_commands
from seqxduce.data import encode_source
from seqxduce.decoding.decode import decode_lines, load_run
from seqxduce.recipe import load_recipe
from tests.bench_scripts import load_bench

PAD, BOS, EOS = 0, 1, 2
VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=PAD, bos_id=BOS, eos_id=EOS, shared=True)
WIDTH = dict(d_model=16, d_ff=32, heads=2, dropout=0.0)


def build(kind: str, offset_max: int, seed: int = 0, **extra):
    """A tiny Transformer or UT (+ACT) without dropout, so train and eval mode differ only in positions."""
    torch.manual_seed(seed)
    if kind == "transformer":
        return Transformer(TransformerSettings(layers=2, position_offset_max=offset_max, **WIDTH, **extra), VOCAB)
    settings = UniversalSettings(steps=2, act=kind == "ut_act", act_max_steps=3, position_offset_max=offset_max,
                                 **WIDTH, **extra)
    return UniversalTransformer(settings, VOCAB)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """src (2, 5), tgt_in (2, 4); row 1 of src padded after 3 tokens."""
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, PAD, PAD]])
    tgt = torch.tensor([[BOS, 3, 4, 5], [BOS, 8, 9, 10]])
    return src, tgt


KINDS = ("transformer", "ut", "ut_act")


def test_rows_start_each_row_at_its_offset():
    positions = SinusoidalPositions(8, 16)
    rows = positions.rows(5, torch.tensor([0, 3, 14]))  # 14 + 5 > 16: the table grows
    table = sinusoid_table(32, 8)
    assert rows.shape == (3, 5, 8)
    assert torch.allclose(rows[0], table[0:5])
    assert torch.allclose(rows[1], table[3:8])
    assert torch.allclose(rows[2], table[14:19])


def test_training_offsets_only_in_training_mode_and_within_range():
    module = torch.nn.Linear(1, 1)
    assert training_offsets(module.eval(), 7, 4, torch.device("cpu")) is None
    assert training_offsets(module.train(), 0, 4, torch.device("cpu")) is None
    torch.manual_seed(0)
    offsets = training_offsets(module.train(), 7, 1000, torch.device("cpu"))
    assert offsets.shape == (1000,)
    assert int(offsets.min()) == 0 and int(offsets.max()) == 7  # both ends of [0, 7] are drawn


@pytest.mark.parametrize("kind", KINDS)
def test_eval_outputs_do_not_depend_on_position_offset_max(kind):
    src, tgt = batch()
    off, on = build(kind, 0).eval(), build(kind, 50).eval()
    on.load_state_dict(off.state_dict())
    assert torch.equal(off(src, tgt).logits, on(src, tgt).logits)


@pytest.mark.parametrize("kind", KINDS)
def test_training_mode_shifts_positions_only_when_offsets_are_on(kind):
    src, tgt = batch()
    for offset_max, shifted in ((0, False), (50, True)):
        model = build(kind, offset_max)
        evaluated = model.eval()(src, tgt).logits
        torch.manual_seed(3)
        trained = model.train()(src, tgt).logits
        assert torch.allclose(trained, evaluated, atol=1e-6) is not shifted


def test_transformer_training_forward_equals_eval_with_the_drawn_offsets():
    src, tgt = batch()
    model = build("transformer", 50)
    torch.manual_seed(3)
    trained = model.train()(src, tgt).logits
    torch.manual_seed(3)
    offsets = torch.randint(0, 51, (2,))  # the same draw training_offsets makes
    assert offsets[0] != offsets[1]
    model.eval()
    expected = model.embeddings.logits(model.decode(tgt, model.encode(src, offsets), offsets))
    assert torch.allclose(trained, expected, atol=1e-6)


def test_offset_pair_is_one_draw_when_shared_and_two_when_independent():
    module = torch.nn.Linear(1, 1)
    assert training_offset_pair(module.eval(), 7, "independent", 4, torch.device("cpu")) == (None, None)
    source, target = training_offset_pair(module.train(), 7, "shared", 4, torch.device("cpu"))
    assert source is target
    torch.manual_seed(0)
    source, target = training_offset_pair(module.train(), 400, "independent", 1000, torch.device("cpu"))
    assert not torch.equal(source, target)
    assert int(target.min()) >= 0 and int(target.max()) <= 400


@pytest.mark.parametrize("kind", ("transformer", "ut"))
def test_independent_offsets_start_source_and_target_at_their_own_draws(kind):
    src, tgt = batch()
    model = build(kind, 50)
    model.settings.position_offsets = "independent"
    torch.manual_seed(3)
    trained = model.train()(src, tgt).logits
    torch.manual_seed(3)
    source, target = torch.randint(0, 51, (2,)), torch.randint(0, 51, (2,))  # the draws training makes
    assert not torch.equal(source, target)
    model.eval()
    if kind == "transformer":
        states = model.decode(tgt, model.encode(src, source), target)
    else:
        states, _ = model._decode(tgt, model._encode(src, source)[0], target)
    assert torch.allclose(trained, model.embeddings.logits(states), atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_offsets_differ_per_sequence(kind):
    src = torch.tensor([[3, 4, 5, 6]] * 4)  # four identical rows
    tgt = torch.tensor([[BOS, 3, 4, 5]] * 4)
    model = build(kind, 1000).train()
    torch.manual_seed(5)
    logits = model(src, tgt).logits  # (4, 4, V)
    for i in range(1, 4):
        assert not torch.allclose(logits[0], logits[i], atol=1e-4)
    assert torch.allclose(*model.eval()(src, tgt).logits[:2])  # in eval they are the same again


@pytest.mark.parametrize("extra", ({}, {"source_positions": "backward", "source_bos": True}))
@pytest.mark.parametrize("kind", KINDS)
def test_incremental_decoding_is_unaffected_by_offsets(kind, extra):
    src, tgt = batch()
    model = build(kind, 50, **extra).eval()
    full = torch.log_softmax(model(src, tgt).logits, dim=-1)  # (B, T, V)
    memory = model.encode(src)
    cache = model.init_cache(memory)
    for t in range(tgt.size(1)):
        logprobs, cache = model.step(tgt[:, t], memory, cache)
        assert torch.allclose(logprobs, full[:, t], atol=1e-5)


def test_backward_rows_count_down_to_each_rows_last_real_token():
    positions = SinusoidalPositions(8, 4)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    table = sinusoid_table(64, 8)
    rows = positions.backward_rows(pad)
    assert torch.allclose(rows[0], table[[4, 3, 2, 1, 0]])
    assert torch.allclose(rows[1], table[[2, 1, 0, 0, 0]])  # padding clamped to the last real position
    shifted = positions.backward_rows(pad, torch.tensor([10, 40]))
    assert torch.allclose(shifted[1, :3], table[[42, 41, 40]])


@pytest.mark.parametrize("kind", KINDS)
def test_source_bos_equals_the_bos_written_into_the_source(kind):
    src, tgt = batch()
    marked, plain = build(kind, 0, source_bos=True).eval(), build(kind, 0).eval()
    plain.load_state_dict(marked.state_dict())
    with_bos = torch.cat([torch.full((2, 1), BOS), src], dim=1)
    assert marked.encode(src).states.shape[1] == src.size(1) + 1
    assert torch.allclose(marked(src, tgt).logits, plain(with_bos, tgt).logits, atol=1e-6)
    if kind != "transformer":  # ponder counts stay one per source position
        assert marked.annotate(src, tgt)["source_ponder"].shape == src.shape


@pytest.mark.parametrize("kind", KINDS)
def test_backward_source_positions_change_the_encoder_only(kind):
    src, tgt = batch()
    backward, forward = build(kind, 0, source_positions="backward").eval(), build(kind, 0).eval()
    forward.load_state_dict(backward.state_dict())
    assert not torch.allclose(backward(src, tgt).logits, forward(src, tgt).logits, atol=1e-4)
    # right padding does not move a row's positions: they count from its own last real token
    one = src[1:, :3]
    assert torch.allclose(backward.encode(one).states, backward.encode(src[1:]).states[:, :3], atol=1e-5)


def test_negative_offset_max_is_a_user_error():
    with pytest.raises(UserError, match="position_offset_max"):
        Transformer(TransformerSettings(position_offset_max=-1, **WIDTH), VOCAB)


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
        assert record["source_tokens"] == source.split() + [run.tokenizers.src.id_to_token(EOS)]
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
    tgt_in = torch.tensor([[BOS, 5, 6, 7, 8, 9]])
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
    args = argparse.Namespace(offset_max=400, test_len=400, device="cpu", seed=1, set=["train.lr=0.002"])
    for task in bench.TASKS:
        for kind in bench.MODELS:
            recipe = bench.recipe_for(task, kind, bench.SIZES[size], args)
            assert recipe.train.lr == 0.002  # --set comes last
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
