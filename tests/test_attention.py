"""Attention weights as a model capability (Model.attention_weights: a model without it says so) and `seqxduce
attention` pictures (the Transformer's and the UT's own maps are tested in plugins/transformer/tests)."""

import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from seqxduce.api import Model, VocabInfo
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.decode import load_run
from seqxduce.inspection.attention_maps import attention_view
from seqxduce.inspection.attention_plot import grid_size, plan_rows
from seqxduce.inspection.plotting import pixel_size
from tests.tiny import TINY_RECIPE

VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=0, bos_id=1, eos_id=2, shared=True)
SRC = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])  # (2, 5), the second row padded
TGT_IN = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0]])  # (2, 4)
HERE = Path(__file__).resolve().parent


def test_a_model_without_the_capability_says_so():
    class Bare(Model):
        forward = encode = init_cache = step = reorder = None

    assert Bare().attention_weights(SRC, TGT_IN) is None


@pytest.fixture(scope="module")
def ut_run(tmp_path_factory) -> Path:
    """The tiny recipe with a Universal Transformer with ACT, trained 4 steps."""
    out = tmp_path_factory.mktemp("runs") / "ut"
    model = ["model.name=universal_transformer", "model.d_model=16", "model.d_ff=32", "model.heads=2",
             "model.act=true", "model.act_max_steps=3"]
    args = ["train", str(TINY_RECIPE), "--out", str(out), "--set", "train.max_steps=4"]
    for value in model:
        args += ["--set", value]
    result = CliRunner().invoke(add_plugin_commands(), args)
    assert result.exit_code == 0, result.output
    return out


def invoke(*args):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def check_png(path: Path, size: tuple[int, int]) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == size
        image.verify()  # a complete, uncorrupted file
    with Image.open(path) as image:
        # a picture, not a blank page: many distinct colours
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50


def test_attention_command_draws_every_kind_layer_and_head(tiny_run, tmp_path):
    output = tmp_path / "attention.png"
    result = invoke("attention", tiny_run, "--input", "1 2 3", "--output", output, "--dpi", "50")
    assert result.exit_code == 0, result.output
    view = attention_view(load_run(tiny_run), "1 2 3")
    rows = plan_rows(view, ("encoder", "decoder", "cross"), None)
    assert [(p.kind, p.layer) for p in rows] == [("encoder", 0), ("decoder", 0), ("cross", 0)]
    width, height, bars = grid_size(view, rows, heads=2)
    assert not bars  # a Transformer has no per-position figures
    check_png(output, pixel_size(width, height, 50))
    assert f"{pixel_size(width, height, 50)[0]}x{pixel_size(width, height, 50)[1]} pixels" in result.stdout


def test_attention_command_draws_a_given_target_and_chosen_heads(tiny_run, tmp_path):
    output = tmp_path / "cross.png"
    result = invoke("attention", tiny_run, "--input", "1 2 3 4", "--target", "4 3 2 1", "--kind", "cross",
                    "--heads", "2", "--layers", "-1", "--output", output)
    assert result.exit_code == 0, result.output
    view = attention_view(load_run(tiny_run), "1 2 3 4", target="4 3 2 1")
    assert view.source_tokens == ["1", "2", "3", "4", "</s>"]
    assert view.input_tokens == ["<s>", "4", "3", "2", "1"]
    assert view.output_tokens == ["4", "3", "2", "1", "</s>"]
    width, height, _ = grid_size(view, plan_rows(view, ("cross",), [-1]), heads=1)
    check_png(output, pixel_size(width, height, 100))


def test_universal_transformer_attention_has_ponder_bars_per_depth_step(ut_run, tmp_path):
    output = tmp_path / "ut.png"
    result = invoke("attention", ut_run, "--input", "1 2 3", "--mean-heads", "--output", output)
    assert result.exit_code == 0, result.output
    view = attention_view(load_run(ut_run), "1 2 3")
    assert view.unit == "depth step"
    assert set(view.figures) == {"source_ponder", "target_ponder"}
    assert len(view.figures["source_ponder"]) == len(view.source_tokens)
    assert all(1 <= n <= 3 for n in view.figures["source_ponder"])
    rows = plan_rows(view, ("encoder", "decoder", "cross"), None)
    # one grid row per depth step that ran, per kind
    assert [p.layer for p in rows if p.kind == "encoder"] == list(range(len(view.maps["encoder"])))
    width, height, bars = grid_size(view, rows, heads=1)
    assert bars
    check_png(output, pixel_size(width, height, 100))


@pytest.mark.parametrize("args, message", [
    (["--layers", "3"], "--layers 3: the model has 1 layers"),
    (["--heads", "0"], "--heads 0: the model has 2 heads"),
    (["--heads", "x"], "--heads x: give numbers separated by commas"),
    (["--heads", "1", "--mean-heads"], "not both"),
    (["--output", "picture.jpg"], "ending in .png"),
    (["--dpi", "600", "--input", " ".join(["1"] * 80)], "choose fewer with --kind, --layers and --heads"),
])
def test_attention_command_errors_are_one_line(tiny_run, tmp_path, args, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("attention", tiny_run, "--input", "1 2", *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_attention_without_matplotlib_says_how_to_install_it(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import matplotlib.figure now fails
    result = invoke("attention", tiny_run, "--input", "1 2", "--output", tmp_path / "a.png")
    assert result.exit_code != 0
    assert "pip install -e '.[plot]'" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "a.png").exists()
