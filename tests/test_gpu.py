"""GPU paths (bf16/fp16 autocast, fused attention, cuda checkpoints) checked against the CPU's figures on the same
checkpoint; skipped where no CUDA device is visible."""

import math

import pytest
import torch

from seqxduce import engine
from seqxduce.data import collate, encode_pairs
from seqxduce.decoding.decode import LoadedRun, load_run
from seqxduce.device import autocast_context
from tests.near_ties import assert_same_texts
from tests.tiny import TINY_RECIPE as RECIPE

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ON_CUDA = ['train.device="cuda"']
ON_CPU = ['train.device="cpu"', 'train.precision="fp32"']
# how far a log-probability computed under autocast may stray from the CPU's fp32 one: bf16 keeps 8 bits of
# mantissa, fp16 11; fp32 differs only in the order of summation
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 1e-1}


def valid_logprobs(run: LoadedRun) -> torch.Tensor:
    """Teacher-forced log-probabilities of the run's model at every target position of its valid split, computed
    on the run's device under its precision; (positions, V) float32 on the CPU."""
    examples = run.task.examples("valid", run.recipe.path(run.recipe.task.core.data_dir))
    pairs, _ = encode_pairs(examples, run.tokenizers.src, run.tokenizers.tgt, 1024, 1024)
    vocab = run.tokenizers.vocab()
    batch = collate(pairs, vocab.pad_id, vocab.bos_id, vocab.eos_id).to(run.device)
    with torch.no_grad(), autocast_context(run.device, run.recipe.train.precision):
        logits = run.model(batch.src, batch.tgt_in).logits  # (B, T, V)
    return torch.log_softmax(logits.float(), dim=-1)[batch.tgt_out != vocab.pad_id].cpu()


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_a_model_trained_on_cuda_computes_on_cuda_what_it_computes_on_the_cpu(tmp_path, precision):
    run = tmp_path / precision
    result = engine.train(RECIPE, run, overrides=[*ON_CUDA, f'train.precision="{precision}"'])
    assert result.step == 6 and math.isfinite(result.metrics["loss"])
    on_cuda = load_run(run)
    assert on_cuda.device.type == "cuda"
    on_cpu = load_run(run, ON_CPU)
    torch.testing.assert_close(valid_logprobs(on_cuda), valid_logprobs(on_cpu), rtol=0.0,
                               atol=TOLERANCE[precision])


def test_a_cuda_checkpoint_decodes_on_the_cpu_to_the_same_outputs(tmp_path):
    run = tmp_path / "run"
    engine.train(RECIPE, run, overrides=ON_CUDA)
    sources = [ex.source for ex in load_run(run, ON_CPU).task.examples("valid", run)]
    on_cuda = engine.decode(run, sources)
    on_cpu = engine.decode(run, sources, overrides=ON_CPU)
    # another device's kernels: the same outputs but for a near-tie within the scores' tolerance
    assert_same_texts(run, sources, [o.text for o in on_cpu], [o.text for o in on_cuda], ON_CPU,
                      tie=TOLERANCE["fp32"])
    for gpu, cpu in zip(on_cuda, on_cpu):
        if gpu.text == cpu.text:
            assert gpu.nbest[0][1].score == pytest.approx(cpu.nbest[0][1].score, abs=TOLERANCE["fp32"])


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
