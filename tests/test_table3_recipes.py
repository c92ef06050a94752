"""recipes/wmt14_en_de_table3/: every row of the paper's Table 3 as a recipe; `recipe info` prints parameters and
training FLOPs; bench/table3.py scales each row's change to Multi30k."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import VocabInfo
from seqxduce.cli import add_plugin_commands
from seqxduce.inspection.cost import training_cost
from seqxduce.recipe import load_recipe
from tests.bench_scripts import load_bench
from tests.tiny import TINY_RECIPE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TABLE3 = ROOT / "recipes" / "wmt14_en_de_table3"

# The paper's Table 3, written out again here (not read from the recipes): what each row changes from base.
ROWS: dict[str, dict[str, object]] = {
    "a_heads1": {"model.heads": 1, "model.d_k": 512, "model.d_v": 512},
    "a_heads4": {"model.heads": 4, "model.d_k": 128, "model.d_v": 128},
    "a_heads16": {"model.heads": 16, "model.d_k": 32, "model.d_v": 32},
    "a_heads32": {"model.heads": 32, "model.d_k": 16, "model.d_v": 16},
    "b_dk16": {"model.d_k": 16},
    "b_dk32": {"model.d_k": 32},
    "c_layers2": {"model.layers": 2},
    "c_layers4": {"model.layers": 4},
    "c_layers8": {"model.layers": 8},
    "c_dmodel256": {"model.d_model": 256, "model.d_k": 32, "model.d_v": 32},
    "c_dmodel1024": {"model.d_model": 1024, "model.d_k": 128, "model.d_v": 128},
    "c_dff1024": {"model.d_ff": 1024},
    "c_dff4096": {"model.d_ff": 4096},
    "d_dropout_0.0": {"model.dropout": 0.0},
    "d_dropout_0.2": {"model.dropout": 0.2},
    "d_label_smoothing_0.0": {"train.label_smoothing": 0.0},
    "d_label_smoothing_0.2": {"train.label_smoothing": 0.2},
    "e_learned_positions": {"model.positions": "learned"},
    "big": {"model.preset": "big", "model.d_model": 1024, "model.d_ff": 4096, "model.heads": 16,
            "model.dropout": 0.3, "train.max_steps": 300000},
}


def flat(path: Path) -> dict[str, object]:
    """Every resolved value of a recipe as section.key."""
    return {f"{section}.{key}": value for section, values in load_recipe(path).resolved().items()
            for key, value in values.items()}


def differences(path: Path, base: Path) -> dict[str, object]:
    mine, theirs = flat(path), flat(base)
    return {key: value for key, value in mine.items() if theirs[key] != value}


def bench_module():
    return load_bench("table3.py")


@pytest.fixture(scope="module")
def cli():
    return add_plugin_commands()


def test_there_is_one_recipe_per_row_and_the_base():
    assert sorted(p.stem for p in TABLE3.glob("*.toml")) == sorted([*ROWS, "base"])


@pytest.mark.parametrize("name", ["base", *ROWS])
def test_every_recipe_loads_through_recipe_show(cli, name):
    result = CliRunner().invoke(cli, ["recipe", "show", str(TABLE3 / f"{name}.toml")])
    assert result.exit_code == 0, result.output
    shown = tomllib.loads(result.output)
    assert shown["train"]["average_last"] == 0  # 6.2: Table 3 uses no checkpoint averaging
    assert shown["task"]["valid_set"] == "wmt13"  # newstest2013, Table 3's development set


@pytest.mark.parametrize("name", list(ROWS))
def test_each_recipe_differs_from_the_base_row_by_exactly_its_row(name):
    assert differences(TABLE3 / f"{name}.toml", TABLE3 / "base.toml") == ROWS[name]


@pytest.mark.parametrize("name", ["base", *ROWS])
def test_each_recipe_cites_its_row(name):
    text = (TABLE3 / f"{name}.toml").read_text()
    row = f"({name[0].upper()})" if name[1] == "_" else name  # a_heads1: row (A); base, big: their own rows
    assert f"# Table 3, row {row}: " in text.splitlines()[1]
    for key in ROWS.get(name, {}):
        line = next(line for line in text.splitlines() if line.startswith(key.split(".")[1] + " "))
        assert "Table 3" in line and "this row's change" in line


def test_the_table3_base_is_the_base_recipe_without_checkpoint_averaging():
    base = ROOT / "recipes" / "wmt14_en_de_base.toml"
    changed = differences(TABLE3 / "base.toml", base)
    assert changed == {"task.data_dir": "../../data/wmt14", "model.d_k": 64, "model.d_v": 64,
                       "train.average_last": 0}
    assert load_recipe(TABLE3 / "base.toml").path("../../data/wmt14").resolve() == \
        load_recipe(base).path("../data/wmt14").resolve()
    assert training_cost(load_recipe(TABLE3 / "base.toml"), TABLE3).parameters == \
        training_cost(load_recipe(base), base.parent).parameters  # d_k = d_v = 64 is the default 512 / 8


def test_parameter_counts_follow_the_papers_column():
    paper = {name: figures[2] for name, figures in bench_module().PAPER.items() if figures[2] is not None}
    ours = {name: training_cost(load_recipe(TABLE3 / f"{name}.toml"), TABLE3).parameters / 1e6 for name in paper}
    # the paper rounds to millions and its vocabulary is "about 37000": compare each row's change from base
    for name in paper:
        theirs, mine = paper[name] - paper["base"], ours[name] - ours["base"]
        assert abs(mine - theirs) <= max(1.0, 0.03 * abs(theirs)), (name, mine, theirs)
    assert abs(ours["base"] - 65) < 2.5 and abs(ours["big"] - 213) < 2.5


def test_training_flops_of_the_base_recipe_count_every_weight_matrix_by_hand():
    d, ff, vocab, n = 512, 2048, 37000, 6
    encoder_layer = 4 * d * d + 2 * d * ff  # Q, K, V, O and the two feed-forward matrices
    cross_kv = 2 * d * d  # cross-attention K, V: once per source token and decoder layer
    decoder_layer = 8 * d * d + 2 * d * ff
    source = 2 * (n * encoder_layer + n * cross_kv)
    target = 2 * (n * (decoder_layer - cross_kv) + vocab * d)
    tokens = 6250 * 8  # max_tokens x update_freq: half source, half target
    cost = training_cost(load_recipe(TABLE3 / "base.toml"), TABLE3)
    assert cost.tokens_per_step == tokens and cost.counted_by_model
    assert cost.flops_per_step == 3 * (tokens / 2 * source + tokens / 2 * target)


@pytest.mark.parametrize("name", ["base", *ROWS])
def test_recipe_info_prints_parameters_and_flops_of_every_row(cli, name):
    result = CliRunner().invoke(cli, ["recipe", "info", str(TABLE3 / f"{name}.toml")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("parameters: ") and lines[1].startswith("training FLOPs: ")


def test_recipe_info_prints_the_base_rows_figures(cli):
    result = CliRunner().invoke(cli, ["recipe", "info", str(TABLE3 / "base.toml"), "--set", "train.max_steps=10"])
    lines = result.output.splitlines()
    assert lines[0] == "parameters: 63,082,496 (63.1M; vocabulary 37000 from [tokenizer] vocab_size)"
    assert lines[1].startswith("training FLOPs: 9.45e+12 per step (50000 tokens per process")
    assert lines[1].endswith("9.45e+13 for max_steps = 10")


def test_the_universal_transformer_projects_cross_attention_once_for_all_depth_steps():
    vocab = VocabInfo(src_size=30, tgt_size=30, pad_id=0, bos_id=1, eos_id=2, shared=True)
    width = dict(d_model=16, d_ff=32, heads=2)
    transformer = Transformer(TransformerSettings(layers=3, **width), vocab).forward_flops_per_token()
    universal = UniversalTransformer(UniversalSettings(steps=3, **width), vocab).forward_flops_per_token()
    cross_kv = 2 * (2 * 16 * 16)
    assert universal == (transformer[0] - 2 * cross_kv, transformer[1])


def test_flops_fall_back_to_two_per_parameter_and_token(monkeypatch):
    recipe = load_recipe(TABLE3 / "base.toml")
    monkeypatch.delattr(Transformer, "forward_flops_per_token")
    cost = training_cost(recipe, TABLE3)
    assert not cost.counted_by_model
    assert cost.flops_per_step == 3 * cost.tokens_per_step * 2 * cost.parameters


def test_without_a_vocabulary_size_recipe_info_says_when_it_is_known(cli):
    result = CliRunner().invoke(cli, ["recipe", "info", str(ROOT / "recipes" / "quickstart.toml")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("parameters and FLOPs: unknown until the tokenizer is trained")


def test_recipe_info_on_a_trained_run_counts_its_saved_vocabulary(cli, tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", str(TINY_RECIPE), "--out", str(run),
                                      "--set", "train.max_steps=1"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["recipe", "info", str(run / "recipe.toml")])
    assert result.exit_code == 0, result.output
    assert f"from the tokenizer saved in {run}" in result.output.splitlines()[0]


# ------------------------------------------------------------------ bench/table3.py


def bench_args(**values) -> argparse.Namespace:
    args = bench_module().parse_args([])
    for key, value in values.items():
        setattr(args, key, value)
    return args


def test_bench_scales_each_rows_change_to_the_small_base():
    bench = bench_module()
    args = bench_args(budget=50)
    expected = {
        "base": dict(layers=3, d_model=128, d_ff=512, heads=8, d_k=16, d_v=16),
        "a_heads1": dict(heads=1, d_k=128, d_v=128),
        "a_heads32": dict(heads=32, d_k=4, d_v=4),
        "b_dk16": dict(d_k=4, d_v=16),
        "c_layers2": dict(layers=1),
        "c_layers8": dict(layers=4),
        "c_dmodel256": dict(d_model=64, d_k=8, d_v=8),
        "c_dff4096": dict(d_ff=1024),
        "e_learned_positions": dict(positions="learned"),
        "big": dict(d_model=256, d_ff=1024, heads=16, d_k=16, dropout=0.3),
    }
    for name, values in expected.items():
        recipe, _ = bench.recipe_for(name, args)
        settings = recipe.model.settings
        assert {key: getattr(settings, key) for key in values} == values, name
        assert recipe.train.max_steps == 50  # the same budget for every row, big included
    recipe, change = bench.recipe_for("d_label_smoothing_0.2", args)
    assert recipe.train.label_smoothing == 0.2 and change == {"label_smoothing": 0.2}
    assert recipe.task.settings.dataset == "multi30k" and recipe.decode.settings.beam == 4


def test_bench_builds_a_valid_recipe_for_every_row():
    bench = bench_module()
    assert set(bench.PAPER) == {*ROWS, "base"}
    for name in bench.PAPER:
        recipe, _ = bench.recipe_for(name, bench_args(budget=10))
        assert recipe.train.max_steps == 10


def test_bench_claims_hold_on_the_papers_own_perplexities():
    bench = bench_module()
    paper_ppl = {name: figures[0] for name, figures in bench.PAPER.items()}
    assert all(check.holds(paper_ppl) for check in bench.CHECKS)
    swapped = dict(paper_ppl, a_heads1=4.0)  # a single head better than 8: the claim fails
    assert bench.CHECKS[0].holds(swapped) is False
    assert bench.CHECKS[0].holds({"base": 5.0}) is None  # not run


def test_bench_tables_mark_what_did_not_match():
    bench = bench_module()
    results = [dict(row="base", change={}, ppl=20.0, bleu=10.0, params=2.4e6, cpu_s=100.0),
               dict(row="a_heads1", change={"heads": 1}, ppl=19.0, bleu=11.0, params=2.4e6, cpu_s=90.0),
               dict(row="b_dk16", change={"d_k": 4}, ppl=21.0, bleu=9.0, params=2.3e6, cpu_s=90.0)]
    table = bench.results_table(results)
    assert "| a_heads1 | heads=1 | 2.40M | 19.00 | 11.0 | 5.29 | 24.9 | - | 90 |" in table
    checks = bench.checks_table(results).splitlines()
    single = next(line for line in checks if line.startswith("| (A) single head"))
    assert "| **no** | **no** | yes | yes |" in single
    dk = next(line for line in checks if line.startswith("| (B) smaller d_k hurts"))
    assert "yes (1 of 2 pairs run)" in dk
