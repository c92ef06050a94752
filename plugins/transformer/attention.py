"""Multi-head attention over torch's scaled_dot_product_attention, and the padding and band masks it takes.

Masks follow SDPA's boolean convention: True = this key may be attended to. Where nothing needs masking
we pass no mask at all (or is_causal=True), so the fused flash / memory-efficient kernels can run on GPU.
Restricted self-attention (attention_window = r) passes its band as a boolean mask, which SDPA's fused
memory-efficient kernel takes on GPU (the flash kernel takes no mask); incremental decoding needs no mask
at all, since the cache keeps only the last r positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .dropout import dropout as drop


def key_padding_mask(pad: torch.Tensor) -> torch.Tensor:
    """(B, S) True at padding -> SDPA mask (B, 1, 1, S) True at real keys.

    Always a mask, even for a batch without padding: asking the device whether there is any padding would make
    the host wait for it in every forward, and a length-bucketed batch is padded almost always anyway."""
    keep = ~pad
    # a source made only of padding would give softmax over nothing (NaN); let it see its first key
    keep[:, 0] |= pad.all(dim=1)
    return keep[:, None, None, :]


def band_mask(length: int, window: int, causal: bool, device: torch.device | None = None) -> torch.Tensor:
    """(L, L) True where query i may see key j: |i - j| <= window, or 0 <= i - j <= window when causal."""
    position = torch.arange(length, device=device)
    distance = position.unsqueeze(1) - position.unsqueeze(0)  # (L, L) i - j
    allowed = distance.abs() <= window
    return allowed & (distance >= 0) if causal else allowed


def encoder_self_mask(pad: torch.Tensor, window: int) -> torch.Tensor:
    """SDPA mask of encoder self-attention for pad (B, S): the key padding mask, and with window > 0 the
    band of restricted self-attention as well: (B, 1, S, S), True where a query may look."""
    if window <= 0:
        return key_padding_mask(pad)
    length = pad.size(1)
    keep = band_mask(length, window, causal=False, device=pad.device) & ~pad.unsqueeze(1)  # (B, S, S)
    # every query sees itself: a padding query whose whole window is padding would otherwise softmax over
    # nothing, and its NaN would reach real positions through the values of later layers
    keep |= torch.eye(length, dtype=torch.bool, device=pad.device)
    return keep.unsqueeze(1)


def padding_bias(mask: torch.Tensor) -> torch.Tensor:
    """A boolean SDPA mask (True = may attend) as the additive bias a decoding step adds to its scores: 0 where
    attending is allowed, -inf elsewhere (float32; added in place, it takes the scores' dtype)."""
    return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill_(~mask, float("-inf"))


def one_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_k) + bias) v for a decoding step: query (B, H, q, d_k) with q the few queries of one
    key row (1, or a source's beam rows), key/value (B, H, t, d) (views of a cache are fine), bias broadcastable
    to (B, H, q, t) (padding_bias) or None -> (B, H, q, d_v).

    Why not SDPA here: torch's CPU flash kernel tiles for many queries and, with a few, runs a small GEMM and its
    own exp per (row, head) block; two batched matmuls and a softmax over (B, H, q, t) did the same work 1.0-1.3x
    faster on a decoding step's self-attention (256 rows, 4 heads, 15-30 keys; 2026-11-26 log) and 1.2-1.4x on its
    cross-attention with the padding bias (64 rows, 25 keys; 2026-11-27 log), and read a cache view as fast as a
    contiguous copy. Results differ from SDPA's in the last bits (about 5e-7), which parity allows."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * query.size(-1) ** -0.5  # (B, H, q, t)
    if bias is not None:
        scores.add_(bias)
    return torch.matmul(scores.softmax(dim=-1), value)


def trained_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                      is_causal: bool, dropout: float) -> torch.Tensor:
    """SDPA for a training forward, which torch's backward will follow. With no dropout on the CPU in bf16, SDPA
    picks its CPU flash kernel, whose backward took 1.5-3.5x the math kernel's on the shapes of the small recipes
    (fwd + bwd, 64 x 4 heads x 30 x 30: 34.6 against 10.1 ms on one core; a Multi30k step with attention_dropout
    0 1.3-1.6x slower; bench/log/2026-12-02-cpu-train-profile.md), so the math kernel is asked for there; it is
    the kernel SDPA itself takes whenever dropout is on. In fp32 the two were within 10% and SDPA chooses, as it
    does on a GPU and without gradients (the flash forward is the faster one). With dropout on the CPU, that math
    runs written out (dropped_attention), for dropout.py's faster masks."""
    if dropout > 0.0 and query.device.type == "cpu":
        return dropped_attention(query, key, value, mask, is_causal, dropout)
    if dropout == 0.0 and query.device.type == "cpu" and query.dtype == torch.bfloat16 and query.requires_grad:
        with sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=is_causal)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=is_causal, dropout_p=dropout)


def dropped_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                      is_causal: bool, dropout: float) -> torch.Tensor:
    """SDPA's math kernel written out, with dropout.py's CPU dropout on the probabilities: SDPA's own dropout
    draws its mask with torch's bernoulli_, one number at a time (bench/log/2026-12-02-cpu-dropout.md). The
    products run in the inputs' dtype (bf16 under autocast, as autocast's matmul does) and softmax reduces in
    fp32 inside its kernel. mask as SDPA's: boolean, True where a query may look, broadcastable to the scores;
    every query's row must allow at least one key (key_padding_mask and encoder_self_mask see to it)."""
    probabilities = masked_scores(query, key, mask, is_causal).softmax(dim=-1)
    return torch.matmul(drop(probabilities, dropout, True), value)


def masked_scores(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None,
                  is_causal: bool) -> torch.Tensor:
    """The scaled scores q k^T / sqrt(d_k) (B, H, Lq, Lk) of SDPA's math, -inf where SDPA's boolean mask is False
    and, with is_causal, above the diagonal (SDPA's top-left causal mask)."""
    scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5  # (B, H, Lq, Lk)
    if is_causal:
        future = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with `heads` heads of query/key width d_k and value width d_v
    (paper, sec. 3.2.2; d_k = d_v = d_model / heads unless given, as Table 3 rows A and B vary them).

    Keys/values are projected separately from queries (project_kv) so a decoder can project the encoder
    output once and keep it, and append one new key/value per step to a self-attention cache.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, d_k: int = 0, d_v: int = 0):
        super().__init__()
        self.heads = heads
        self.d_k = d_k or d_model // heads
        self.d_v = d_v or d_model // heads
        self.dropout = dropout
        self.query = nn.Linear(d_model, heads * self.d_k)
        # keys then values in one matrix: with d_k = d_v = d_model / heads it is the (2C, C) of earlier checkpoints
        self.key_value = nn.Linear(d_model, heads * (self.d_k + self.d_v))
        self.out = nn.Linear(heads * self.d_v, d_model)
        # a list while attention_maps.record_attention() collects weights; None keeps the fused SDPA path
        self.recorded: list[torch.Tensor] | None = None

    def _split(self, x: torch.Tensor, width: int) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, width).transpose(1, 2)  # (B, H, L, width)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (B, H, L, d_k) and values (B, H, L, d_v) of the inputs x (B, L, C)."""
        key, value = self.key_value(x).split([self.heads * self.d_k, self.heads * self.d_v], dim=-1)
        return self._split(key, self.d_k), self._split(value, self.d_v)

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (B, H, S, d_k / d_v) of the encoder output (B, S, C) for decoding steps, each contiguous:
        project_kv's are strided views of one projection, which the step's matmuls copy on every call (a step's
        cross-attention ran 3.7x slower on them: 682 against 184 us; 2026-11-27 log); one copy per batch instead."""
        key, value = self.project_kv(memory)
        return key.contiguous(), value.contiguous()

    def attend(self, x: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        """Queries from x (B, Lq, C) attend to projected key/value (B, H, Lk, d_k / d_v); returns (B, Lq, C)."""
        batch, length, _ = x.shape
        query = self._split(self.query(x), self.d_k)  # (B, H, Lq, d_k)
        if self.recorded is not None:
            out = self._attend_recording(query, key, value, mask, is_causal)
        elif length == 1 and mask is None and not self.training:
            out = one_query_attention(query, key, value)  # a decoding step's self-attention
        elif self.training:
            out = trained_attention(query, key, value, mask, is_causal, self.dropout)  # (B, H, Lq, d_v)
        else:
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=is_causal)
            # (B, H, Lq, d_v); scaled by 1 / sqrt(d_k)
        return self.out(out.transpose(1, 2).reshape(batch, length, self.heads * self.d_v))

    def attend_beams(self, x: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     bias: torch.Tensor) -> torch.Tensor:
        """A decoding step's self-attention for beam rows read through back-pointers (beam_cache.py): x (M*g, 1, C),
        key/value (M, H, t, g, d_k / d_v) views of a BeamLayerState, bias (M, 1, g, t*g) -inf at the keys a row
        may not read. Each source's g queries score all t*g keys of its rows in one product per head; the bias
        leaves a row's ancestors' keys alone in its softmax (the others weigh exactly 0). Returns (M*g, 1, C)."""
        sources, heads, length, group, d_k = key.shape
        d_v = value.size(-1)
        query = self.query(x).view(sources, group, heads, d_k).transpose(1, 2)  # (M, H, g, d_k)
        out = one_query_attention(query, key.reshape(sources, heads, length * group, d_k),
                                  value.reshape(sources, heads, length * group, d_v), bias)  # (M, H, g, d_v)
        return self.out(out.transpose(1, 2).reshape(sources * group, 1, heads * d_v))

    def attend_step(self, x: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                    bias: torch.Tensor | None, group: int = 1) -> torch.Tensor:
        """A decoding step's cross-attention: x (M*g, 1, C) against key/value (M, H, S, d) with M = B / g rows; rows
        r*g .. r*g+g-1 of x all attend to row r, so the g queries of one source run as one (g, S) attention against
        its keys, which are neither copied nor reordered per hypothesis (state.py). mask (M, 1, 1, S) True at real
        keys, bias the same as padding_bias(mask) (what the step adds to its scores). Returns (M*g, 1, C)."""
        rows = x.size(0)
        query = self.query(x).view(rows // group, group, self.heads, self.d_k).transpose(1, 2)  # (M, H, g, d_k)
        if self.recorded is not None:
            out = self._attend_recording(query, key, value, mask, False)
        elif self.training:
            out = trained_attention(query, key, value, mask, False, self.dropout)
        else:
            out = one_query_attention(query, key, value, bias)  # (M, H, g, d_v)
        return self.out(out.transpose(1, 2).reshape(rows, 1, self.heads * self.d_v))

    def _attend_recording(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        """SDPA written out, keeping the probabilities (B, H, Lq, Lk) in self.recorded (eval mode: no dropout)."""
        weights = masked_scores(query, key, mask, is_causal).float().softmax(dim=-1)
        self.recorded.append(weights.detach())
        return weights.to(value.dtype) @ value  # (B, H, Lq, d_v)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        """Queries from x (B, Lq, C) attend to context (B, Lk, C); returns (B, Lq, C)."""
        key, value = self.project_kv(context)
        return self.attend(x, key, value, mask=mask, is_causal=is_causal)
