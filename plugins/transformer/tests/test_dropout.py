"""The CPU dropout of dropout.py: its masks keep 1 - p of the elements and keep the expectation, follow torch's
seed and RNG state, the backward applies the forward's mask, and a training step of the Transformer on the CPU
draws no mask with torch's bernoulli_ (the slow path the module replaces)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from seqxduce_transformer.attention import dropped_attention, key_padding_mask
from seqxduce_transformer.dropout import Dropout, dropout, keep_mask
from seqxduce_transformer.settings import TransformerSettings
from seqxduce_transformer.transformer import Transformer
from torch.profiler import ProfilerActivity, profile

from seqxduce.api import VocabInfo

VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=0, bos_id=1, eos_id=2, shared=True)


@pytest.fixture
def tiny_transformer_step():
    """One training forward and backward of a 2-layer Transformer with embedding, residual, attention and
    activation dropout, after torch.manual_seed(seed): the loss, as a float."""
    torch.manual_seed(0)
    model = Transformer(TransformerSettings(layers=2, d_model=16, d_ff=32, heads=2, dropout=0.3,
                                            attention_dropout=0.2, activation_dropout=0.2), VOCAB).train()
    g = torch.Generator().manual_seed(9)
    src = torch.randint(3, 20, (4, 7), generator=g)
    src[0, 5:] = 0
    tgt = torch.randint(3, 20, (4, 6), generator=g)

    def step(seed: int) -> float:
        torch.manual_seed(seed)
        model.zero_grad()
        loss = model(src, tgt).logits.float().logsumexp(-1).mean()
        loss.backward()
        return loss.item()

    return step


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_the_mask_keeps_one_minus_p_and_the_expectation(p: float) -> None:
    torch.manual_seed(0)
    n = 1_000_000
    mask, scale = keep_mask((n,), 1.0 - p)
    assert mask.dtype == torch.bool and mask.shape == (n,)
    # the kept fraction of a binomial draw: within 6 standard deviations of 1 - p, plus the 2^-16 quantization
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(mask.float().mean().item() - (1 - p)) < 6 * sigma + 2 ** -16
    out = dropout(torch.ones(n), p, True)
    values = out.unique().tolist()
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(scale)
    assert abs(out.mean().item() - 1.0) < 6 * sigma / (1 - p) + 1e-6
    # the scale is the exact inverse of the quantized keep probability
    assert scale == pytest.approx(65536 / round((1 - p) * 65536), rel=1e-12)


def test_masks_follow_torch_seed_and_state_not_threads() -> None:
    x = torch.randn(64, 33, 17)
    torch.manual_seed(5)
    first = dropout(x, 0.3, True)
    second = dropout(x, 0.3, True)
    assert not torch.equal(first, second)  # each call draws a new seed from torch's generator
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        torch.manual_seed(5)
        again = dropout(x, 0.3, True)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(first, again)
    state = torch.get_rng_state()  # what a checkpoint saves
    after = dropout(x, 0.3, True)
    torch.set_rng_state(state)
    assert torch.equal(dropout(x, 0.3, True), after)


def test_the_mask_does_not_repeat_along_a_tensor() -> None:
    torch.manual_seed(3)
    mask, _ = keep_mask((4, 4096), 0.5)
    rows = {tuple(row.tolist()) for row in mask}
    assert len(rows) == 4
    assert not torch.equal(mask[:, :2048], mask[:, 2048:])


def test_backward_applies_the_forwards_mask() -> None:
    torch.manual_seed(1)
    x = torch.randn(200, 50, requires_grad=True)
    out = dropout(x, 0.2, True)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    kept = out != 0
    scale = 65536 / round(0.8 * 65536)
    torch.testing.assert_close(out[kept], x.detach()[kept] * scale)
    torch.testing.assert_close(x.grad, upstream * kept * scale)


def test_eval_and_zero_p_return_the_input_and_one_drops_all() -> None:
    x = torch.randn(10, 10)
    assert dropout(x, 0.3, False) is x
    assert dropout(x, 0.0, True) is x
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))
    module = Dropout(0.3).eval()
    assert module(x) is x
    assert module.state_dict() == {}  # checkpoints written with nn.Dropout load unchanged
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(1.5)


def test_bf16_input_keeps_its_dtype() -> None:
    x = torch.randn(30, 40, dtype=torch.bfloat16, requires_grad=True)
    out = dropout(x, 0.1, True)
    assert out.dtype == torch.bfloat16
    out.sum().backward()
    assert x.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("is_causal", [False, True])
def test_written_out_attention_is_sdpa(is_causal: bool) -> None:
    """dropped_attention with its dropout at 0 is SDPA's math, mask and causal mask included (fp32)."""
    torch.manual_seed(2)
    q, k, v = (torch.randn(3, 4, 7, 16, dtype=torch.float64) for _ in range(3))
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    pad[2, 3:] = True
    mask = None if is_causal else key_padding_mask(pad)
    ours = dropped_attention(q, k, v, mask, is_causal, 0.0)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def test_a_cpu_training_step_draws_no_bernoulli_mask(tiny_transformer_step) -> None:
    """The Transformer's training forward and backward on the CPU, with every kind of dropout on: torch's
    bernoulli_ (the serial Mersenne Twister draw) is not called; the run still drops (outputs differ by seed)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss_a = tiny_transformer_step(seed=1)
    names = {event.key for event in prof.key_averages()}
    assert "aten::bernoulli_" not in names
    assert "aten::native_dropout" not in names
    loss_b = tiny_transformer_step(seed=2)
    assert loss_a != loss_b
    assert tiny_transformer_step(seed=1) == loss_a
