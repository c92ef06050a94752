"""The Universal Transformer (Dehghani et al. 2019), optionally with Adaptive Computation Time (Graves 2016).

One encoder layer and one decoder layer (the Transformer's own EncoderLayer / DecoderLayer, see layers.py)
are applied recurrently in depth with the same weights at every step t = 1..T. Before each step the
coordinate signal P^t = position sinusoid + timestep signal (sinusoid of t, or a learned vector per t) is
added to the state, so the residual carries it too (as the paper's equation writes it, and as tensor2tensor
adds its timing signals before the attention unit); with post-norm:

    A^t = LayerNorm((H^{t-1} + P^t) + MultiHeadSelfAttention(H^{t-1} + P^t))
    H^t = LayerNorm(A^t + Transition(A^t))

The decoder step adds, between the two, attention over the encoder's final representation. With
transition = "sepconv" the transition is a depthwise-separable convolution, centred in the encoder and
causal in the decoder.

ACT (act = true; see act.py): each position halts on its own, at most act_max_steps steps; a halted
position's carried state H is frozen (it still serves as keys/values, with the current P^t added, for the
positions that go on), and the stack's output is the ACT-weighted state. The loop ends once every real
position has halted. forward() returns the ponder cost act_loss_weight * (mean over real source positions
of N + R + mean over real target positions of N + R) as ModelOutput.aux_loss, and stats ponder_mean /
ponder_max (steps N over real source and target positions). encode() records each source position's N in
Memory.ponder (B, S) (0 at padding), and annotate(src, tgt_in) gives source and output positions' counts for
`seqxduce decode --annotations` (without ACT every real position takes `steps` steps).

Incremental decoding: the cache holds one LayerState per depth step (that step's self-attention keys and
values of all positions decoded so far, and for sepconv the last kernel-1 transition inputs), plus the
encoder keys/values, projected once and shared by every depth step (same weights, same memory). With ACT,
step() runs the new position through all act_max_steps depth steps, halting decisions made from its own
halting probabilities exactly as in forward(): the keys/values cached at depth step n are those of the
state entering step n, which for a position that halted earlier is its frozen state (plus P^n). forward()
computes exactly these for halted positions too, so step() and forward() agree; forward() may stop early
only because once all positions have halted further steps change nothing.

The depth is not part of the weights (with the sinusoid timestep signal): `seqxduce decode RUN --set
model.steps=N` (with ACT, model.act_max_steps) runs the trained shared layer N times (settings.py,
decode_time_keys). d_k / d_v, learned positions and attention_window work as in the Transformer.

Random position offsets (position_offset_max > 0): as in the Transformer (transformer.py), training-mode
forward() starts each sequence's source and target positions at one shared random offset (or one each,
position_offsets = "independent"); the timestep
signal is not offset; eval mode and step() use positions from 0. With source_positions = "backward" the
source's positions count down to its eos (position 0, plus the offset).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from seqxduce.api import AttentionWeights, ModelOutput, VocabInfo

from .act import Halting
from .attention import encoder_self_mask, key_padding_mask
from .attention_maps import record_attention
from .base import EncoderDecoderBase
from .embedding import prepend_bos, sinusoid_table, training_offset_pair
from .flops import forward_flops
from .layers import DecoderLayer, EncoderLayer, FeedForward, SepConvTransition, Transition
from .settings import UniversalSettings
from .state import DecoderCache, LayerState, Memory


class TimestepSignal(nn.Module):
    """The depth-step part of P^t: sinusoid of t (like a position), or a learned vector per step."""

    def __init__(self, kind: str, dim: int, steps: int):
        super().__init__()
        self.learned = nn.Embedding(steps, dim) if kind == "learned" else None
        if self.learned is None:
            self.register_buffer("table", sinusoid_table(steps + 1, dim), persistent=False)

    def forward(self, step: int) -> torch.Tensor:
        """(C,) signal of depth step `step` (1-based)."""
        if self.learned is not None:
            return self.learned.weight[step - 1]
        return self.table[step]


def make_transition(s: UniversalSettings) -> Transition:
    """The transition function the settings name."""
    if s.transition == "sepconv":
        return SepConvTransition(s.d_model, s.d_ff, s.conv_kernel, s.activation_dropout, s.activation)
    return FeedForward(s.d_model, s.d_ff, s.activation_dropout, s.activation)


class UniversalTransformer(EncoderDecoderBase):
    """Universal Transformer encoder-decoder; see the module docstring."""

    settings: UniversalSettings

    def ct2_refusal(self) -> str | None:
        s = self.settings
        what = "with ACT (act = true)" if s.act else f"({s.steps} depth steps of one shared layer)"
        return (f"[model] name = universal_transformer {what}: CTranslate2 has no Universal Transformer "
                "(layers shared in depth, timestep signal); only the Transformer can be exported")

    def hf_refusal(self) -> str | None:
        return ("[model] name = universal_transformer: no transformers class computes a Universal Transformer "
                "(one layer shared in depth, a timestep signal); only the Transformer can be exported")

    def __init__(self, settings: UniversalSettings, vocab: VocabInfo):
        super().__init__(settings, vocab)
        s = settings
        self.depth = s.act_max_steps if s.act else s.steps
        self.timesteps = TimestepSignal(s.timestep_signal, s.d_model, self.depth)
        self.encoder_layer = EncoderLayer(s, make_transition(s))
        self.decoder_layer = DecoderLayer(s, make_transition(s))
        self.encoder_halting = nn.Linear(s.d_model, 1) if s.act else None
        self.decoder_halting = nn.Linear(s.d_model, 1) if s.act else None
        self.finish_init()
        for unit in (self.encoder_halting, self.decoder_halting):
            if unit is not None:
                nn.init.constant_(unit.bias, s.act_halting_bias_init)

    def coordinates(self, length: int, step: int, offset: int = 0, offsets: torch.Tensor | None = None,
                    positions: torch.Tensor | None = None) -> torch.Tensor:
        """P^t for positions offset..offset+length-1 at depth step `step`: (L, C); with offsets (B,), row b
        starts at offsets[b]: (B, L, C); with positions (B, L, C) given, those positions."""
        if positions is None:
            positions = self.positions(length, offset) if offsets is None else self.positions.rows(length, offsets)
        return positions + self.timesteps(step)

    def _recur(self, x: torch.Tensor, pad: torch.Tensor, run: Callable[[torch.Tensor, int], torch.Tensor],
               unit: nn.Module | None, offset: int = 0, stop_early: bool = True,
               offsets: torch.Tensor | None = None, positions: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, Halting | None]:
        """Apply run(H + P^t, t) for t = 1..depth to x (B, L, C); with a halting unit, under ACT."""
        if unit is None:
            for step in range(1, self.depth + 1):
                x = run(x + self.coordinates(x.size(1), step, offset, offsets, positions), step)
            return x, None
        halting = Halting(pad, x, self.settings.act_epsilon, self.depth)
        for step in range(1, self.depth + 1):
            if stop_early and halting.done():
                break
            inputs = x + self.coordinates(x.size(1), step, offset, offsets, positions)  # (B, L, C)
            p = torch.sigmoid(unit(inputs)).squeeze(-1)  # (B, L)
            new = run(inputs, step)
            ran = halting.update(p, new, step)
            x = torch.where(ran.unsqueeze(-1), new, x)  # halted positions keep their state
        return halting.output.to(x.dtype), halting

    def _encode(self, src: torch.Tensor, offsets: torch.Tensor | None = None) -> tuple[Memory, Halting | None]:
        if self.settings.source_bos:
            src = prepend_bos(src, self.vocab.bos_id)  # (B, S + 1); the bos column is dropped from ponder counts
        pad = src == self.vocab.pad_id  # (B, S)
        self_mask = encoder_self_mask(pad, self.settings.attention_window)  # (B, 1, 1 or S, S) or None
        x = self.embed_drop(self.embeddings.embed_source(src))  # (B, S, C)
        backward = self.positions.backward_rows(pad, offsets) if self.settings.source_positions == "backward" else None
        x, halting = self._recur(x, pad, lambda h, _: self.encoder_layer(h, self_mask, pad), self.encoder_halting,
                                 offsets=offsets, positions=backward)
        ponder = None if halting is None else self._source_columns(halting.updates)
        return Memory(self.encoder_norm(x), pad, key_padding_mask(pad), ponder), halting

    def encode(self, src: torch.Tensor) -> Memory:
        """src (B, S) -> Memory (states (B, S, C)); with ACT, Memory.ponder holds N (B, S)."""
        memory, _ = self._encode(src)
        return memory

    def _source_columns(self, per_position: torch.Tensor) -> torch.Tensor:
        """(B, S) figures of the source's own positions: without the bos column source_bos adds."""
        return per_position[:, 1:] if self.settings.source_bos else per_position

    def _decode(self, tgt_in: torch.Tensor, memory: Memory,
                offsets: torch.Tensor | None = None) -> tuple[torch.Tensor, Halting | None]:
        pad = tgt_in == self.vocab.pad_id  # (B, T)
        cross = self.decoder_layer.cross_attn.project_kv(memory.states)  # once for every depth step
        x = self.embed_drop(self.embeddings.embed_target(tgt_in))  # (B, T, C)
        x, halting = self._recur(x, pad, lambda h, _: self.decoder_layer(h, cross, memory.mask),
                                 self.decoder_halting, offsets=offsets)
        return self.decoder_norm(x), halting

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> ModelOutput:
        """Logits (B, T, V); with ACT also the ponder cost (aux_loss) and ponder stats.

        In training, with position_offset_max > 0, each sequence's source and target positions start at one
        random offset (the same for both, so that source and target positions stay aligned), or at one each
        with position_offsets = "independent"."""
        s = self.settings
        src_offsets, tgt_offsets = training_offset_pair(self, s.position_offset_max, s.position_offsets,
                                                        src.size(0), src.device)  # (B,) each
        memory, encoder_halting = self._encode(src, src_offsets)
        x, decoder_halting = self._decode(tgt_in, memory, tgt_offsets)
        output = ModelOutput(logits=self.embeddings.logits(x))
        if encoder_halting is not None and decoder_halting is not None:
            cost = encoder_halting.cost() + decoder_halting.cost()
            output.aux_loss = self.settings.act_loss_weight * cost
            output.stats = ponder_stats(encoder_halting, decoder_halting)
        return output

    def init_cache(self, memory: Memory) -> DecoderCache:
        """One empty LayerState per depth step, and the encoder keys/values projected once."""
        return DecoderCache(
            layers=[self.decoder_layer.initial_state(memory.rows, memory.states) for _ in range(self.depth)],
            cross=[self.decoder_layer.cross_attn.memory_kv(memory.states)],
            position=0,
            window=self.settings.attention_window,
        )

    def step(self, tokens: torch.Tensor, memory: Memory, cache: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """tokens (B,) at position cache.position -> log-probs (B, V) float32 for the next one, new cache."""
        x = self.embed_drop(self.embeddings.embed_target(tokens.unsqueeze(1)))  # (B, 1, C)
        states: list[LayerState] = []

        def run(inputs: torch.Tensor, step: int) -> torch.Tensor:
            out, state = self.decoder_layer.step(inputs, cache.layers[step - 1], cache.cross[0], memory)
            states.append(state)
            return out

        pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)  # (B, 1)
        x, _ = self._recur(x, pad, run, self.decoder_halting, offset=cache.position, stop_early=False)
        logits = self.embeddings.logits(self.decoder_norm(x[:, 0]))  # (B, V)
        return (F.log_softmax(logits.float(), dim=-1),
                DecoderCache(states, cache.cross, cache.position + 1, cache.window))

    def forward_flops_per_token(self) -> tuple[int, int]:
        """Forward FLOPs per source and per target token at the full depth (with ACT an upper bound; flops.py)."""
        encoder = [m for m in (self.encoder_layer, self.encoder_halting) if m is not None]
        decoder = [m for m in (self.decoder_layer, self.decoder_halting) if m is not None]
        return forward_flops(encoder, decoder, self.embeddings.output, repeat=self.depth)

    @torch.no_grad()
    def annotate(self, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, torch.Tensor]:
        """Depth steps per source position (B, S) and per output position (B, T), 0 at padding.

        A target position's halting depends only on its own prefix, so these teacher-forced counts are the
        ones step() took while decoding the same output."""
        memory, encoder = self._encode(src)
        _, decoder = self._decode(tgt_in, memory)
        if encoder is None or decoder is None:  # without ACT every real position takes every step
            return {"source_ponder": self._source_columns(~memory.pad).float() * self.depth,
                    "target_ponder": (tgt_in != self.vocab.pad_id).float() * self.depth}
        return {"source_ponder": self._source_columns(encoder.updates), "target_ponder": decoder.updates}

    def attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> AttentionWeights:
        """Each depth step's attention probabilities over one teacher-forced pass (see seqxduce.api.Model).

        With ACT the list ends at the last step any position ran; a position that had halted still has a
        row there (its frozen state is attended from), and annotate() says after how many steps it halted."""
        layer = self.decoder_layer
        return record_attention(self, src, tgt_in, [self.encoder_layer.self_attn], [layer.self_attn],
                                [layer.cross_attn], unit="depth step")


@torch.no_grad()
def ponder_stats(encoder: Halting, decoder: Halting) -> dict[str, torch.Tensor]:
    """Mean and max depth steps N over the real source and target positions, together and per side, as 0-dim
    device tensors: the training log reads them once per log window (seqxduce.api: no host read in a step)."""
    source = (encoder.updates.flatten(), encoder.real.flatten())
    target = (decoder.updates.flatten(), decoder.real.flatten())
    both = (torch.cat([source[0], target[0]]), torch.cat([source[1], target[1]]))
    stats = {}
    for prefix, (steps, real) in {"src_": source, "tgt_": target, "": both}.items():
        # masked by multiplication, not by boolean indexing, whose output size the host would have to read;
        # padding positions never update (N = 0), so they do not raise the maximum, and none real gives 0
        real = real.to(steps.dtype)
        stats[f"{prefix}ponder_mean"] = (steps * real).sum() / real.sum().clamp(min=1.0)
        stats[f"{prefix}ponder_max"] = (steps * real).max() if steps.numel() else steps.new_zeros(())
    return stats
