"""Model.attention_weights for both models: one teacher-forced pass that keeps every attention's probabilities.

Decoding never pays for this: MultiHeadAttention only writes its probabilities out while its `recorded` list is
set, which happens here, for the length of one pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from seqxduce.api import AttentionWeights

from .attention import MultiHeadAttention


@contextlib.contextmanager
def recording(modules: Sequence[MultiHeadAttention]) -> Iterator[None]:
    """While open, each module appends the probabilities of every call to its `recorded` list."""
    for module in modules:
        module.recorded = []
    try:
        yield
    finally:
        for module in modules:
            module.recorded = None


@torch.no_grad()
def record_attention(model: nn.Module, src: torch.Tensor, tgt_in: torch.Tensor,
                     encoder: Sequence[MultiHeadAttention], decoder: Sequence[MultiHeadAttention],
                     cross: Sequence[MultiHeadAttention], unit: str = "layer") -> AttentionWeights:
    """Run model(src, tgt_in) in eval mode and return what each group of attention modules computed, in call
    order: one tensor per layer for a stack of layers, one per depth step for one layer applied repeatedly."""
    groups = (encoder, decoder, cross)
    was_training = model.training
    model.eval()
    try:
        with recording([m for group in groups for m in group]):
            model(src, tgt_in)
            found = [[w for m in group for w in m.recorded] for group in groups]
    finally:
        model.train(was_training)
    return AttentionWeights(encoder=found[0], decoder=found[1], cross=found[2], unit=unit)
