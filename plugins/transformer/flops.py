"""Forward FLOPs per token of the Transformer and the Universal Transformer, from the modules themselves.

A token costs 2 FLOPs per multiply-add of every weight matrix it passes through: a source token the encoder
layers and, once, each decoder layer's cross-attention key/value projection; a target token the rest of the
decoder layers and the output projection. A Universal Transformer's token passes through its shared layer
once per depth step (with ACT: act_max_steps, an upper bound). Attention's length-dependent products
(Q K^T and the weighted sum of values: 2 * L * heads * (d_k + d_v) multiply-adds per token and attention
layer, about L / (6 d_model) of a base layer's weights, under 1% for sentences of 25 tokens), softmax,
normalisation and embedding look-ups are not counted. Works on a model built on the meta device.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn


def multiply_adds(modules: Iterable[nn.Module]) -> int:
    """Multiply-adds per position of the linear and convolution weights in these modules (and their children)."""
    seen: set[int] = set()
    total = 0
    for module in modules:
        for child in module.modules():
            if isinstance(child, (nn.Linear, nn.Conv1d)) and id(child.weight) not in seen:
                seen.add(id(child.weight))
                total += child.weight.numel()  # a depthwise Conv1d's (C, 1, k): C * k multiply-adds per position
    return total


def cross_key_values(decoder: Iterable[nn.Module]) -> int:
    """Multiply-adds per source position of the decoder layers' cross-attention key/value projections."""
    return sum(m.cross_attn.key_value.weight.numel() for m in decoder if isinstance(getattr(m, "cross_attn", None),
                                                                                     nn.Module))


def forward_flops(encoder: list[nn.Module], decoder: list[nn.Module], output: nn.Module,
                  repeat: int = 1) -> tuple[int, int]:
    """(per source token, per target token) forward FLOPs when the encoder and decoder modules run `repeat`
    times each (a Universal Transformer's depth); cross-attention keys/values are projected once."""
    cross = cross_key_values(decoder)
    source = repeat * multiply_adds(encoder) + cross
    target = repeat * (multiply_adds(decoder) - cross) + multiply_adds([output])
    return 2 * source, 2 * target
