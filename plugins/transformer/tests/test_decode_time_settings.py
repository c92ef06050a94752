"""`seqxduce decode RUN --set model.KEY=...`: a Universal Transformer's depth changes after training; keys that
would change the trained weights' shapes or meaning are refused in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner
from seqxduce_transformer.settings import TransformerSettings
from seqxduce_transformer.transformer import Transformer

from seqxduce import engine
from seqxduce.api import UserError, VocabInfo
from seqxduce.checkpoint import load_weights
from seqxduce.cli import add_plugin_commands
from seqxduce.components import check_decode_overrides
from seqxduce.decoding.decode import load_run

RECIPE = """
[task]
name = "algorithmic"
kind = "reverse"
train_min_len = 1
train_max_len = 6
valid_min_len = 1
valid_max_len = 6
test_min_len = 1
test_max_len = 6
train_size = 200
valid_size = 10
test_size = 10

[tokenizer]
name = "word"

[model]
name = "universal_transformer"
d_model = 16
d_ff = 32
heads = 2
{extra}

[train]
device = "cpu"
max_tokens = 200
max_steps = 4
warmup_steps = 2
validate_every = 0
valid_decode_examples = 0
checkpoint_every = 4

[decode]
name = "greedy"
max_len_a = 1.0
max_len_b = 2
"""
SOURCES = ["1 2 3", "4 5 6 7", "8"]


@pytest.fixture(scope="module")
def cli():
    return add_plugin_commands()


def train_run(cli, where, extra: str = ""):
    recipe = where / "ut.toml"
    recipe.write_text(RECIPE.format(extra=extra))
    result = CliRunner().invoke(cli, ["train", str(recipe), "--out", str(where / "run")])
    assert result.exit_code == 0, result.output
    return where / "run"


@pytest.fixture(scope="module")
def ut_run(cli, tmp_path_factory):
    return train_run(cli, tmp_path_factory.mktemp("ut"), "steps = 2")


@pytest.fixture(scope="module")
def act_run(cli, tmp_path_factory):
    return train_run(cli, tmp_path_factory.mktemp("act"), "act = true\nact_max_steps = 3")


def logits(run, *overrides: str) -> torch.Tensor:
    loaded = load_run(run, overrides)
    src = torch.tensor([[5, 6, 7, loaded.tokenizers.src.eos_id]])
    tgt = torch.tensor([[loaded.tokenizers.tgt.bos_id, 5, 6]])
    with torch.no_grad():
        return loaded.model(src, tgt).logits


def test_decode_runs_the_shared_layer_as_many_times_as_asked(cli, ut_run, tmp_path):
    assert load_run(ut_run).model.depth == 2
    for steps in (1, 5):
        loaded = load_run(ut_run, [f"model.steps={steps}"])
        assert loaded.model.depth == steps
        assert len(engine.decode(ut_run, SOURCES, overrides=[f"model.steps={steps}"])) == len(SOURCES)
        sources = tmp_path / "src.txt"
        sources.write_text("".join(s + "\n" for s in SOURCES))
        result = CliRunner().invoke(cli, ["decode", str(ut_run), "--input", str(sources), "--set",
                                          f"model.steps={steps}"])
        assert result.exit_code == 0, result.output
    one, two, five = logits(ut_run, "model.steps=1"), logits(ut_run), logits(ut_run, "model.steps=5")
    assert one.shape == two.shape == five.shape == (1, 3, loaded.tokenizers.tgt.vocab_size)
    assert not torch.allclose(one, two) and not torch.allclose(five, two)
    torch.testing.assert_close(logits(ut_run, "model.steps=2"), two, rtol=0, atol=0)


def test_decode_counts_the_shared_layer_calls(ut_run):
    loaded = load_run(ut_run, ["model.steps=4"])
    calls = []
    hook = loaded.model.encoder_layer.register_forward_hook(lambda *a: calls.append(1))
    try:
        loaded.model.encode(torch.tensor([[5, 6, loaded.tokenizers.src.eos_id]]))
    finally:
        hook.remove()
    assert len(calls) == 4


def test_act_decodes_with_a_new_maximum_depth(act_run):
    loaded = load_run(act_run, ["model.act_max_steps=6", "model.act_epsilon=0.5"])
    assert loaded.model.depth == 6 and loaded.model.settings.act_epsilon == 0.5
    src = torch.tensor([[5, 6, 7, loaded.tokenizers.src.eos_id]])
    ponder = loaded.model.annotate(src, torch.tensor([[loaded.tokenizers.tgt.bos_id]]))["source_ponder"]
    assert bool((ponder >= 1).all()) and bool((ponder <= 6).all())


def test_act_refuses_steps_and_names_what_it_can_change(cli, act_run):
    result = CliRunner().invoke(cli, ["decode", str(act_run), "--input", "-", "--set", "model.steps=4"],
                                input="1 2\n")
    assert result.exit_code != 0
    # refused as a setting ACT does not read (recipe.check_unread), naming the one that bounds the depth
    assert "model.steps" in result.output and "act = true" in result.output and "act_max_steps" in result.output


def test_a_shape_changing_override_is_refused_in_one_line(cli, ut_run):
    result = CliRunner().invoke(cli, ["decode", str(ut_run), "--input", "-", "--set", "model.d_model=32"],
                                input="1 2\n")
    assert result.exit_code != 0
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert errors == ["Error: --set model.d_model: model 'universal_transformer' cannot change d_model after "
                      "training; the keys decode can change are: max_positions, steps"]
    assert "Traceback" not in result.output


def test_a_same_shape_but_different_model_is_refused_too(ut_run):
    # heads = 4 keeps every weight's shape (d_k = d_v = d_model / heads), but computes another function
    with pytest.raises(UserError, match="cannot change heads after training"):
        load_run(ut_run, ["model.heads=4"])


def test_other_sections_stay_overridable_at_decode(ut_run):
    assert load_run(ut_run, ["decode.max_len_b=5"]).recipe.decode.settings.max_len_b == 5


def test_a_model_without_decode_time_keys_refuses_every_model_override():
    recipe = SimpleNamespace(model=SimpleNamespace(settings=object(), core=SimpleNamespace(name="other")))
    check_decode_overrides(recipe, ["decode.beam=2", "train.device=cpu"])
    with pytest.raises(UserError, match="'other' cannot change layers after training.*: none"):
        check_decode_overrides(recipe, ["model.layers=2"])


def test_a_train_key_decoding_does_not_read_is_refused(ut_run):
    with pytest.raises(UserError, match=r"^--set train.seed: decoding does not read \[train\] seed .*: device, "
                                        "members, precision$"):
        load_run(ut_run, ["train.seed=3"])
    assert load_run(ut_run, ["train.precision=fp32"]).recipe.train.precision == "fp32"


def test_weights_that_do_not_fit_name_the_first_parameter_that_differs(tmp_path):
    vocab = VocabInfo(src_size=12, tgt_size=12, pad_id=0, bos_id=1, eos_id=2, shared=True)
    small = Transformer(TransformerSettings(layers=1, d_model=16, d_ff=32, heads=2, positions="learned",
                                            max_positions=8), vocab)
    large = Transformer(TransformerSettings(layers=1, d_model=16, d_ff=32, heads=2, positions="learned",
                                            max_positions=12), vocab)
    fix = "decode with the recipe it was trained with"
    with pytest.raises(UserError, match=r"ckpt.pt: does not fit the model, .*: positions.table.weight is \(8, 16\) "
                                        r"in it but \(12, 16\) in the model; decode with"):
        load_weights(large, small.state_dict(), tmp_path / "ckpt.pt", fix)
    sinusoid = Transformer(TransformerSettings(layers=1, d_model=16, d_ff=32, heads=2), vocab)
    with pytest.raises(UserError, match=r"it has a tensor positions.table.weight \(shape \(8, 16\)\) that the "
                                        r"model has not"):
        load_weights(sinusoid, small.state_dict(), tmp_path / "ckpt.pt", fix)
    with pytest.raises(UserError, match=r"it has no tensor positions.table.weight"):
        load_weights(small, sinusoid.state_dict(), tmp_path / "ckpt.pt", fix)
