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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_restricted_self_attention_runs_in_the_fused_kernel_and_matches_the_cpu(dtype):
    from seqxduce_transformer.settings import TransformerSettings
    from seqxduce_transformer.transformer import Transformer
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from seqxduce.api import VocabInfo

    vocab = VocabInfo(src_size=40, tgt_size=40, pad_id=0, bos_id=1, eos_id=2, shared=True)
    torch.manual_seed(0)
    settings = TransformerSettings(layers=2, d_model=64, d_ff=128, heads=4, d_k=16, d_v=16, attention_window=3)
    model = Transformer(settings, vocab).eval()
    src, tgt = torch.randint(3, 40, (4, 21)), torch.randint(3, 40, (4, 17))
    src[0, 15:] = 0
    expected = model(src, tgt).logits
    model.cuda()
    # the band mask must not push SDPA off its fused memory-efficient kernel (this fails if it cannot run)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), torch.autocast("cuda", dtype=dtype,
                                                                      enabled=dtype != torch.float32):
        logits = model(src.cuda(), tgt.cuda()).logits
    tolerance = 2e-3 if dtype == torch.float32 else 0.1
    torch.testing.assert_close(logits.float().cpu(), expected, rtol=0, atol=tolerance)
