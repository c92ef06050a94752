"""[train] compile: a compiled training forward gives the losses the eager one gives, and validation, decoding and
checkpoints go on with the plain module (no `_orig_mod.` prefix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from seqxduce import engine
from seqxduce.training.run import compile_enabled
from tests.tiny import TINY_RECIPE as RECIPE

# no dropout: compiled code draws its dropout masks from another generator
SETTINGS = ["model.dropout=0.0", "train.max_steps=3", "train.log_every=1", "train.validate_every=0",
            "train.valid_decode_examples=5", "train.checkpoint_every=100"]


def test_auto_compiles_on_cuda_only():
    assert compile_enabled("auto", torch.device("cuda")) and not compile_enabled("auto", torch.device("cpu"))
    assert compile_enabled("on", torch.device("cpu")) and not compile_enabled("off", torch.device("cuda"))


def test_compile_on_wraps_the_training_forward_only(tmp_path):
    from torch._dynamo.eval_frame import OptimizedModule

    from seqxduce.recipe import load_recipe
    from seqxduce.training.run import assemble

    run = assemble(load_recipe(RECIPE, [*SETTINGS, 'train.compile="on"']), tmp_path / "run")
    assert isinstance(run.wrapped, OptimizedModule) and not isinstance(run.model, OptimizedModule)
    assert run.wrapped._orig_mod is run.model


def _losses(run: Path) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["kind"] == "train"]


@pytest.mark.slow
def test_compiled_training_matches_eager_and_its_run_validates_and_decodes(tmp_path):
    eager = engine.train(RECIPE, tmp_path / "eager", overrides=[*SETTINGS, 'train.compile="off"'])
    compiled = engine.train(RECIPE, tmp_path / "compiled", overrides=[*SETTINGS, 'train.compile="on"'])
    assert len(_losses(tmp_path / "eager")) == 3
    assert _losses(tmp_path / "compiled") == pytest.approx(_losses(tmp_path / "eager"), rel=1e-4)
    assert compiled.metrics["loss"] == pytest.approx(eager.metrics["loss"], rel=1e-4)  # the final validation
    saved = torch.load(tmp_path / "compiled" / "checkpoints" / "step_00000003.pt", weights_only=True)["model"]
    assert saved and not [k for k in saved if "_orig_mod" in k]
    outputs = engine.decode(tmp_path / "compiled", ["a b c"])
    assert len(outputs) == 1
