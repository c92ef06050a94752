"""Which SDPA kernel a training forward takes: on the CPU in bf16 without dropout the math kernel (torch's CPU
flash kernel has a slow backward there), elsewhere SDPA's own choice; the gradients agree with an fp32 reference
as closely either way."""

from __future__ import annotations

import pytest
import torch
from seqxduce_transformer import attention
from seqxduce_transformer.attention import MultiHeadAttention
from torch.profiler import profile

FLASH_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
MATH = "aten::_scaled_dot_product_attention_math"


def attention_ops(layer: MultiHeadAttention, x: torch.Tensor, dtype: torch.dtype, backward: bool) -> set[str]:
    with profile() as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out = layer(x, x)
        if backward:
            out.float().sum().backward()
    return {e.key for e in prof.key_averages() if "attention" in e.key}


@pytest.fixture
def layer() -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(d_model=32, heads=4, dropout=0.0)


def test_a_bf16_training_forward_on_the_cpu_takes_the_math_kernel(layer):
    x = torch.randn(3, 7, 32, requires_grad=True)
    layer.train()
    ops = attention_ops(layer, x, torch.bfloat16, backward=True)
    assert MATH in ops and FLASH_BACKWARD not in ops


def test_without_gradients_or_in_fp32_sdpa_chooses_as_before(layer):
    x = torch.randn(3, 7, 32)
    layer.eval()
    with torch.no_grad():
        assert MATH not in attention_ops(layer, x, torch.bfloat16, backward=False)  # the flash forward is faster
    layer.train()
    x.requires_grad_(True)
    assert FLASH_BACKWARD in attention_ops(layer, x, torch.float32, backward=True)


def sdpa_choosing(query, key, value, mask, is_causal, dropout):
    """What a training forward called before: SDPA choosing its kernel (the CPU flash kernel here)."""
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=is_causal,
                                                            dropout_p=dropout)


def test_the_math_kernels_gradients_are_as_close_to_fp32_as_the_flash_kernels(layer, monkeypatch):
    x = torch.randn(4, 9, 32)
    layer.train()

    def gradient(dtype: torch.dtype) -> torch.Tensor:
        layer.zero_grad()
        given = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out = layer(given, given)
        out.float().pow(2).sum().backward()
        return given.grad.clone()

    reference = gradient(torch.float32)
    math = gradient(torch.bfloat16)
    monkeypatch.setattr(attention, "trained_attention", sdpa_choosing)
    assert FLASH_BACKWARD in attention_ops(layer, x.clone().requires_grad_(True), torch.bfloat16, backward=True)
    flash = gradient(torch.bfloat16)
    scale = reference.abs().max()
    math_error, flash_error = ((g - reference).abs().max() / scale for g in (math, flash))
    # bf16 keeps 8 bits of mantissa: both within a few of its steps (2^-8 = 0.4%) of the fp32 gradient
    assert 0 < math_error < 0.05 and 0 < flash_error < 0.05
    assert math_error < 2 * flash_error + 1e-3
