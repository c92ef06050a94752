"""Multi-head attention over torch's scaled_dot_product_attention, and the padding mask it takes.

Masks follow SDPA's boolean convention: True = this key may be attended to. Where nothing needs masking
we pass no mask at all (or is_causal=True), so the fused flash / memory-efficient kernels can run on GPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def key_padding_mask(pad: torch.Tensor) -> torch.Tensor | None:
    """(B, S) True at padding -> SDPA mask (B, 1, 1, S) True at real keys; None when no row is padded."""
    if not bool(pad.any()):
        return None
    keep = ~pad
    # a source made only of padding would give softmax over nothing (NaN); let it see its first key
    keep[:, 0] |= pad.all(dim=1)
    return keep[:, None, None, :]


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with `heads` heads (paper, sec. 3.2.2).

    Keys/values are projected separately from queries (project_kv) so a decoder can project the encoder
    output once and keep it, and append one new key/value per step to a self-attention cache.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.query = nn.Linear(d_model, d_model)
        self.key_value = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)
        # a list while attention_maps.record_attention() collects weights; None keeps the fused SDPA path
        self.recorded: list[torch.Tensor] | None = None

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, channels = x.shape
        return x.view(batch, length, self.heads, channels // self.heads).transpose(1, 2)  # (B, H, L, C/H)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (B, H, L, C/H) of the inputs x (B, L, C)."""
        key, value = self.key_value(x).chunk(2, dim=-1)
        return self._split(key), self._split(value)

    def attend(self, x: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        """Queries from x (B, Lq, C) attend to projected key/value (B, H, Lk, C/H); returns (B, Lq, C)."""
        batch, length, channels = x.shape
        query = self._split(self.query(x))  # (B, H, Lq, C/H)
        if self.recorded is not None:
            out = self._attend_recording(query, key, value, mask, is_causal)
        else:
            out = F.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, is_causal=is_causal,
                dropout_p=self.dropout if self.training else 0.0,
            )  # (B, H, Lq, C/H)
        return self.out(out.transpose(1, 2).reshape(batch, length, channels))

    def _attend_recording(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        """SDPA written out, keeping the probabilities (B, H, Lq, Lk) in self.recorded (eval mode: no dropout)."""
        scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5  # (B, H, Lq, Lk)
        if is_causal:
            future = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.float().softmax(dim=-1)
        self.recorded.append(weights.detach())
        return weights.to(value.dtype) @ value  # (B, H, Lq, C/H)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        """Queries from x (B, Lq, C) attend to context (B, Lk, C); returns (B, Lq, C)."""
        key, value = self.project_kv(context)
        return self.attend(x, key, value, mask=mask, is_causal=is_causal)
