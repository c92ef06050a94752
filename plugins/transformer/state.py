"""What flows between encode, init_cache, step and reorder: the encoder memory and the decoding cache.

Both are immutable in use: step() returns a new cache, so a caller may keep an old one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _select(tensor: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    return None if tensor is None else tensor.index_select(0, index)


@dataclass
class Memory:
    """The encoder's output for a batch, with what cross-attention needs to ignore padding."""

    states: torch.Tensor  # (B, S, C) final encoder representation
    pad: torch.Tensor  # (B, S) True at source padding
    mask: torch.Tensor | None  # (B, 1, 1, S) SDPA mask, True at real keys; None when nothing is padded
    ponder: torch.Tensor | None = None  # (B, S) ACT steps N per source position (0 at padding); UT + ACT only

    def select(self, index: torch.Tensor) -> Memory:
        """The rows `index` (B',) of this batch, in that order."""
        return Memory(self.states.index_select(0, index), self.pad.index_select(0, index),
                      _select(self.mask, index), _select(self.ponder, index))


@dataclass
class LayerState:
    """One decoder layer's (or one UT depth step's) incremental state."""

    # (B, H, t, d_k) self-attention keys of the positions decoded so far (the last window + 1 when restricted)
    key: torch.Tensor | None
    value: torch.Tensor | None  # (B, H, t, d_v)
    conv: torch.Tensor | None = None  # (B, k-1, C) last transition inputs of a causal sepconv; else None

    def select(self, index: torch.Tensor) -> LayerState:
        return LayerState(_select(self.key, index), _select(self.value, index), _select(self.conv, index))


@dataclass
class DecoderCache:
    """Per-layer (per-depth-step for the UT) self-attention state, cross-attention keys/values, position."""

    layers: list[LayerState]
    # (B, H, S, d_k / d_v) encoder keys and values, projected once: one pair per Transformer layer; one pair
    # for the Universal Transformer, whose depth steps share the layer and so the projection
    cross: list[tuple[torch.Tensor, torch.Tensor]]
    position: int  # index of the next target position (0 = the one after feeding bos)

    def select(self, index: torch.Tensor) -> DecoderCache:
        """The rows `index` (B',) of this cache, in that order."""
        return DecoderCache([layer.select(index) for layer in self.layers],
                            [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.cross],
                            self.position)
