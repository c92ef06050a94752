"""The Transformer of "Attention Is All You Need" (Vaswani et al. 2017) as a seqxduce Model.

    src (B, S) -> embed * sqrt(C) + positions -> dropout -> N encoder layers -> memory (B, S, C)
    tgt_in (B, T) -> embed * sqrt(C) + positions -> dropout -> N decoder layers -> logits (B, T, V)

Decoding: encode() once; init_cache() projects the memory into each layer's cross-attention keys/values
once; step() feeds one token per row and appends that position's self-attention keys/values to the cache,
so no prefix is ever recomputed; reorder() selects rows of memory and cache for beam search.

Random position offsets (position_offset_max > 0, the Universal Transformer paper's device for length
generalization): in training mode forward() draws one offset per sequence in [0, position_offset_max] and
starts both its source and its target positions there (jointly, so position i of the target still lines up
with position i of the source; position_offsets = "independent" draws one for each side instead);
encode()/decode() take those offsets. In eval mode, and in step(), positions
start at 0, so decoding is unaffected. With source_positions = "backward" the source's positions count down
to its eos (position 0, plus the offset), in training and decoding alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqxduce.api import Model, ModelOutput, VocabInfo

from .attention import key_padding_mask
from .embedding import Embeddings, SinusoidalPositions, init_xavier, prepend_bos, training_offset_pair
from .layers import DecoderLayer, EncoderLayer, FeedForward
from .settings import TransformerSettings, check_transformer
from .state import DecoderCache, Memory


def final_norm(d_model: int, pre_norm: bool) -> nn.Module:
    """Pre-norm stacks end in a LayerNorm (their residual stream is never normalised); post-norm needs none."""
    return nn.LayerNorm(d_model) if pre_norm else nn.Identity()


class Transformer(nn.Module, Model):
    """Encoder-decoder Transformer; see the module docstring."""

    def __init__(self, settings: TransformerSettings, vocab: VocabInfo):
        super().__init__()
        check_transformer(settings)
        s = settings
        self.settings = s
        self.vocab = vocab
        pre_norm = s.norm == "pre"
        self.embeddings = Embeddings(vocab, s.d_model, s.share_embeddings, s.tie_output)
        self.positions = SinusoidalPositions(s.d_model, s.max_positions)
        self.embed_drop = nn.Dropout(s.dropout)
        self.encoder = nn.ModuleList(
            EncoderLayer(s.d_model, s.heads, FeedForward(s.d_model, s.d_ff, s.activation_dropout),
                         s.dropout, s.attention_dropout, pre_norm)
            for _ in range(s.encoder_layers or s.layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(s.d_model, s.heads, FeedForward(s.d_model, s.d_ff, s.activation_dropout),
                         s.dropout, s.attention_dropout, pre_norm)
            for _ in range(s.decoder_layers or s.layers)
        )
        self.encoder_norm = final_norm(s.d_model, pre_norm)
        self.decoder_norm = final_norm(s.d_model, pre_norm)
        if s.init == "xavier":
            init_xavier(self, s.d_model)

    def _embed(self, x: torch.Tensor, offset: int = 0, offsets: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled embeddings (B, L, C) plus positions offset.. (or offsets[b].. per row), with dropout."""
        if offsets is not None:
            return self.embed_drop(x + self.positions.rows(x.size(1), offsets))  # (B, L, C)
        return self.embed_drop(x + self.positions(x.size(1), offset))

    def encode(self, src: torch.Tensor, offsets: torch.Tensor | None = None) -> Memory:
        """src (B, S) -> Memory with states (B, S, C) (S + 1 with source_bos); offsets (B,): first position
        per row (default 0)."""
        if self.settings.source_bos:
            src = prepend_bos(src, self.vocab.bos_id)
        pad = src == self.vocab.pad_id  # (B, S)
        mask = key_padding_mask(pad)  # (B, 1, 1, S) or None
        x = self.embeddings.embed_source(src)  # (B, S, C)
        if self.settings.source_positions == "backward":
            x = self.embed_drop(x + self.positions.backward_rows(pad, offsets))
        else:
            x = self._embed(x, offsets=offsets)
        for layer in self.encoder:
            x = layer(x, mask, pad)
        return Memory(self.encoder_norm(x), pad, mask)

    def decode(self, tgt_in: torch.Tensor, memory: Memory, offsets: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced decoder states (B, T, C) for tgt_in (B, T); offsets as in encode()."""
        x = self._embed(self.embeddings.embed_target(tgt_in), offsets=offsets)  # (B, T, C)
        for layer in self.decoder:
            x = layer(x, layer.cross_attn.project_kv(memory.states), memory.mask)
        return self.decoder_norm(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> ModelOutput:
        """Logits (B, T, V) for next-token prediction; in training, positions may start at random offsets."""
        s = self.settings
        src_offsets, tgt_offsets = training_offset_pair(self, s.position_offset_max, s.position_offsets,
                                                        src.size(0), src.device)  # (B,) each
        memory = self.encode(src, src_offsets)
        return ModelOutput(logits=self.embeddings.logits(self.decode(tgt_in, memory, tgt_offsets)))

    def init_cache(self, memory: Memory) -> DecoderCache:
        """Empty self-attention state per layer, and each layer's cross-attention keys/values, projected once."""
        batch = memory.states.size(0)
        return DecoderCache(
            layers=[layer.initial_state(batch, memory.states) for layer in self.decoder],
            cross=[layer.cross_attn.project_kv(memory.states) for layer in self.decoder],
            position=0,
        )

    def step(self, tokens: torch.Tensor, memory: Memory, cache: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """tokens (B,) at position cache.position -> log-probs (B, V) float32 for the next one, new cache."""
        x = self._embed(self.embeddings.embed_target(tokens.unsqueeze(1)), offset=cache.position)  # (B, 1, C)
        states = []
        for layer, state, cross in zip(self.decoder, cache.layers, cache.cross):
            x, state = layer.step(x, state, cross, memory.mask)
            states.append(state)
        logits = self.embeddings.logits(self.decoder_norm(x[:, 0]))  # (B, V)
        return F.log_softmax(logits.float(), dim=-1), DecoderCache(states, cache.cross, cache.position + 1)

    def reorder(self, memory: Memory, cache: DecoderCache | None,
                index: torch.Tensor) -> tuple[Memory, DecoderCache | None]:
        """Keep rows `index` (B',) of memory and cache (cache may be None)."""
        return memory.select(index), None if cache is None else cache.select(index)
