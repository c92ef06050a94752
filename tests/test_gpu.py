"""GPU paths (bf16 autocast, fused attention, cuda checkpoints); skipped where no CUDA device is visible."""

from pathlib import Path

import pytest
import torch

from seqxduce import engine

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

RECIPE = Path(__file__).resolve().parent / "fixtures" / "tiny.toml"


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_train_and_decode_on_cuda(tmp_path, precision):
    run = tmp_path / precision
    result = engine.train(RECIPE, run, overrides=["train.device=\"cuda\"", f"train.precision=\"{precision}\""])
    assert result.step == 6 and result.metrics["ppl"] < 1e4
    outputs = engine.decode(run, ["1 2 3", "4 5"])
    assert len(outputs) == 2


def test_cuda_checkpoint_decodes_on_cpu(tmp_path):
    run = tmp_path / "run"
    engine.train(RECIPE, run, overrides=["train.device=\"cuda\"", "train.precision=\"bf16\""])
    on_gpu = [o.text for o in engine.decode(run, ["1 2 3 4"])]
    on_cpu = [o.text for o in engine.decode(run, ["1 2 3 4"], overrides=["train.device=\"cpu\""])]
    assert len(on_gpu) == len(on_cpu) == 1
