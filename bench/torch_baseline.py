"""The ratio's baseline for bench/decode_speed.py: the same post-norm Transformer built from plain torch.nn
layers (nn.TransformerEncoder / nn.TransformerDecoder), decoded greedily or with a beam by a small batched
search with a hand-written key/value cache that reuses each nn.TransformerDecoderLayer's own weights.

It is the "floor" of ../shared/tools/peers/peer_torch.py (same layers, same cache, same forced-length search:
eos and pad banned until the last step, best of beam by cumulative log-prob), kept here so that the project's
benchmark runs without the peers harness. Sizes and ids are passed in; nothing here imports seqxduce.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoids(length: int, dim: int) -> torch.Tensor:
    """fairseq/Marian style sinusoid table (sin half, then cos half): (length, dim)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    angle = torch.arange(length, dtype=torch.float32)[:, None] * freq[None, :]
    return torch.cat([angle.sin(), angle.cos()], dim=1)


class TorchSeq2Seq(nn.Module):
    """nn.Transformer{Encoder,Decoder}, post-norm, ReLU, tied embeddings and output projection."""

    def __init__(self, vocab: int, pad: int, d_model: int, heads: int, d_ff: int, enc_layers: int,
                 dec_layers: int, max_positions: int = 1024):
        super().__init__()
        self.d = d_model
        self.emb = nn.Embedding(vocab, d_model, padding_idx=pad)
        nn.init.normal_(self.emb.weight, 0, d_model ** -0.5)
        self.register_buffer("pos", sinusoids(max_positions, d_model), persistent=False)
        enc = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.1, batch_first=True, norm_first=False)
        dec = nn.TransformerDecoderLayer(d_model, heads, d_ff, dropout=0.1, batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(enc, enc_layers, norm=None, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, dec_layers, norm=None)
        self.scale = math.sqrt(d_model)
        self.pad = pad

    def embed(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.emb(tokens) * self.scale + self.pos[offset:offset + tokens.size(1)]

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        pad = src.eq(self.pad)
        pad = pad if bool(pad.any()) else None
        return self.encoder(self.embed(src), src_key_padding_mask=pad), pad


class KVCache:
    """Incremental post-norm forward of model.decoder with its own weights (cross K/V once per row)."""

    def __init__(self, model: TorchSeq2Seq, memory: torch.Tensor, pad: torch.Tensor | None):
        self.m = model
        self.layers = list(model.decoder.layers)
        d = model.d
        self.h = self.layers[0].self_attn.num_heads
        self.dh = d // self.h
        n, s, _ = memory.shape
        self.cross = []
        for layer in self.layers:
            w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            kv = F.linear(memory, w[d:], b[d:]).view(n, s, 2, self.h, self.dh)
            self.cross.append((kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)))
        self.mask = None if pad is None else (~pad)[:, None, None, :]
        self.self_kv: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self.layers)
        self.t = 0

    def reorder(self, index: torch.Tensor) -> None:
        self.self_kv = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.self_kv]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (N, 1) -> logits (N, V)."""
        m, d = self.m, self.m.d
        n = tokens.size(0)
        x = m.embed(tokens, self.t)
        for i, layer in enumerate(self.layers):
            sa = layer.self_attn
            qkv = F.linear(x, sa.in_proj_weight, sa.in_proj_bias).view(n, 1, 3, self.h, self.dh)
            q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))
            if self.self_kv[i] is not None:
                k = torch.cat([self.self_kv[i][0], k], 2)
                v = torch.cat([self.self_kv[i][1], v], 2)
            self.self_kv[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, 1, d)
            x = layer.norm1(x + sa.out_proj(a))
            ca = layer.multihead_attn
            q = F.linear(x, ca.in_proj_weight[:d], ca.in_proj_bias[:d]).view(n, 1, self.h, self.dh)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), *self.cross[i], attn_mask=self.mask)
            x = layer.norm2(x + ca.out_proj(a.transpose(1, 2).reshape(n, 1, d)))
            x = layer.norm3(x + layer.linear2(F.relu(layer.linear1(x))))
        self.t += 1
        return F.linear(x[:, 0], m.emb.weight)


@torch.inference_mode()
def generate(model: TorchSeq2Seq, src: torch.Tensor, beam: int, steps: int, start: int, banned: list[int]
             ) -> torch.Tensor:
    """Exactly `steps` tokens per source (the `banned` ids never chosen), best of beam: (B, steps)."""
    batch = src.size(0)
    memory, pad = model.encode(src)
    if beam > 1:
        memory = memory.repeat_interleave(beam, 0)
        pad = pad.repeat_interleave(beam, 0) if pad is not None else None
    device = src.device
    ys = torch.full((batch * beam, 1), start, dtype=torch.long, device=device)
    cache = KVCache(model, memory, pad)
    scores = torch.zeros(batch, beam, device=device)
    scores[:, 1:] = -math.inf  # every beam starts the same: keep one
    scores = scores.view(-1)
    vocab = model.emb.num_embeddings
    for _ in range(steps):
        logprobs = torch.log_softmax(cache.step(ys[:, -1:]).float(), -1)
        logprobs[:, banned] = -math.inf
        if beam == 1:
            ys = torch.cat([ys, logprobs.argmax(-1, keepdim=True)], 1)
            continue
        top, index = (scores.unsqueeze(1) + logprobs).view(batch, beam * vocab).topk(beam, dim=1)
        origin = (index // vocab + torch.arange(batch, device=device).unsqueeze(1) * beam).view(-1)
        ys = torch.cat([ys[origin], (index % vocab).view(-1, 1)], 1)
        cache.reorder(origin)
        scores = top.view(-1)
    if beam > 1:
        ys = ys[scores.view(batch, beam).argmax(1) + torch.arange(batch, device=device) * beam]
    return ys[:, 1:]
