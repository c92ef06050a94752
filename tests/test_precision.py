"""The same training code path under bf16 autocast and fp16 with loss scaling (on the CPU here)."""

import math

import pytest
import torch

from seqxduce.recipe import load_recipe
from seqxduce.training.run import assemble
from seqxduce.training.trainer import Trainer
from tests.tiny import TINY_RECIPE as RECIPE


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains(tmp_path, precision):
    trainer = Trainer(assemble(load_recipe(RECIPE, [f'train.precision="{precision}"', "train.max_steps=3",
                                           "train.validate_every=0"]), tmp_path / "run"))
    before = {k: v.clone() for k, v in trainer.parts.model.state_dict().items()}
    result = trainer.run()
    assert math.isfinite(result.metrics["loss"])
    after = trainer.parts.model.state_dict()
    assert all(after[k].dtype == before[k].dtype for k in before)  # master weights stay fp32
    assert any(not torch.equal(after[k], before[k]) for k in before)
    if precision == "fp16":
        assert trainer.parts.scaler.is_enabled() and trainer.parts.scaler.get_scale() > 0
