"""The Transformer of "Attention Is All You Need" (Vaswani et al. 2017) as a seqxduce Model.

    src (B, S) -> embed * sqrt(C) + positions -> dropout -> N encoder layers -> memory (B, S, C)
    tgt_in (B, T) -> embed * sqrt(C) + positions -> dropout -> N decoder layers -> logits (B, T, V)

Decoding: encode() once; init_cache() projects the memory into each layer's cross-attention keys/values
once per source; step() feeds one token per row and writes that position's self-attention keys/values into
the cache's preallocated buffers, so no prefix is ever recomputed; for beam search reorder() only moves the
back-pointers through which each row reads its ancestors' self-attention keys (beam_cache.py), and memory and
cross keys/values stay one row per source, read by the `beam` rows of that source (state.py).

Table 3's variations are settings (settings.py): per-head widths d_k / d_v (attention.py), learned positions
instead of the sinusoids (embedding.py: a position past max_positions is a UserError), and restricted
self-attention over a window of r positions (attention_window; a band mask in training, a cache of the last
r + 1 keys and values in step()). forward_flops_per_token() counts a token's forward FLOPs (flops.py).

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

from seqxduce.api import AttentionWeights, ModelOutput, VocabInfo

from .attention import encoder_self_mask, key_padding_mask
from .attention_maps import record_attention
from .base import EncoderDecoderBase
from .embedding import prepend_bos, training_offset_pair
from .flops import forward_flops
from .layers import DecoderLayer, EncoderLayer, FeedForward
from .settings import TransformerSettings
from .state import DecoderCache, Memory


class Transformer(EncoderDecoderBase):
    """Encoder-decoder Transformer; see the module docstring."""

    settings: TransformerSettings

    def __init__(self, settings: TransformerSettings, vocab: VocabInfo):
        super().__init__(settings, vocab)
        s = settings
        self.encoder = nn.ModuleList(
            EncoderLayer(s, FeedForward(s.d_model, s.d_ff, s.activation_dropout, s.activation))
            for _ in range(s.encoder_layers or s.layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(s, FeedForward(s.d_model, s.d_ff, s.activation_dropout, s.activation))
            for _ in range(s.decoder_layers or s.layers)
        )
        self.finish_init()

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
        self_mask = encoder_self_mask(pad, self.settings.attention_window)  # (B, 1, 1 or S, S) or None
        x = self.embeddings.embed_source(src)  # (B, S, C)
        if self.settings.source_positions == "backward":
            x = self.embed_drop(x + self.positions.backward_rows(pad, offsets))
        else:
            x = self._embed(x, offsets=offsets)
        for layer in self.encoder:
            x = layer(x, self_mask, pad)
        return Memory(self.encoder_norm(x), pad, key_padding_mask(pad))

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
        """Empty self-attention state per layer (per search row), and each layer's cross-attention keys/values,
        projected once per memory row (one per source: beams share them, see state.py)."""
        return DecoderCache(
            layers=[layer.initial_state(memory.rows, memory.states) for layer in self.decoder],
            cross=[layer.cross_attn.memory_kv(memory.states) for layer in self.decoder],
            position=0,
            window=self.settings.attention_window,
        )

    def step(self, tokens: torch.Tensor, memory: Memory, cache: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """tokens (B,) at position cache.position -> log-probs (B, V) float32 for the next one, new cache."""
        x = self._embed(self.embeddings.embed_target(tokens.unsqueeze(1)), offset=cache.position)  # (B, 1, C)
        states = []
        for layer, state, cross in zip(self.decoder, cache.layers, cache.cross):
            x, state = layer.step(x, state, cross, memory)
            states.append(state)
        logits = self.embeddings.logits(self.decoder_norm(x[:, 0]))  # (B, V)
        return (F.log_softmax(logits.float(), dim=-1),
                DecoderCache(states, cache.cross, cache.position + 1, cache.window))

    def forward_flops_per_token(self) -> tuple[int, int]:
        """Forward FLOPs per source and per target token (see flops.py for what is counted)."""
        return forward_flops(list(self.encoder), list(self.decoder), self.embeddings.output)

    def attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> AttentionWeights:
        """Every layer's attention probabilities over one teacher-forced pass (see seqxduce.api.Model)."""
        return record_attention(self, src, tgt_in, [layer.self_attn for layer in self.encoder],
                                [layer.self_attn for layer in self.decoder],
                                [layer.cross_attn for layer in self.decoder])
