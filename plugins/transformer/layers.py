"""The encoder and decoder layers and their transitions; the Universal Transformer reuses all of them.

A layer is attention and a transition (feed-forward, or a depthwise-separable convolution), each wrapped
in a residual connection with dropout and LayerNorm: post-norm LN(x + f(x)) as in the paper, or pre-norm
x + f(LN(x)). A decoder layer runs either on a whole target (training) or on one new position with the
state of the earlier ones (step), and both give the same numbers. Layers read their widths, dropout, norm
placement and attention window from the model's settings (settings.py, CommonSettings).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention, band_mask
from .beam_cache import BeamLayerState
from .dropout import Dropout
from .settings import CommonSettings
from .state import LayerState, Memory


class Residual(nn.Module):
    """Residual connection around a sublayer f: post-norm LN(x + drop(f(x))) or pre-norm x + drop(f(LN(x)))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.drop = Dropout(dropout)
        self.pre_norm = pre_norm

    def before(self, x: torch.Tensor) -> torch.Tensor:
        """What the sublayer reads."""
        return self.norm(x) if self.pre_norm else x

    def after(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Combine the input x with the sublayer output y."""
        x = x + self.drop(y) if self.training else x + y  # eval: no dropout call (a decoding step makes dozens)
        return x if self.pre_norm else self.norm(x)


ACTIVATIONS = {  # the settings' `activation` names -> functions (gelu is the exact, erf-based one)
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "swish": F.silu,
}


class FeedForward(nn.Module):
    """Position-wise feed-forward FFN(x) = act(x W1 + b1) W2 + b2 (paper, eq. 2, with act = ReLU)."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.inner = nn.Linear(d_model, d_ff)
        self.outer = nn.Linear(d_ff, d_model)
        self.drop = Dropout(activation_dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """(B, L, C) -> (B, L, C); pad and causal do not matter to a position-wise function."""
        if not self.training and not torch.is_grad_enabled() and self.activation is F.relu:
            # decoding: in place, in the inner layer's fresh output (no (B, L, d_ff) buffer allocated and written again)
            return self.outer(F.relu_(self.inner(x)))
        return self.outer(self.drop(self.activation(self.inner(x))))

    def initial_history(self, batch: int, like: torch.Tensor) -> torch.Tensor | None:
        """A position-wise function needs no history of earlier positions."""
        return None

    def step(self, x: torch.Tensor, history: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One new position (B, 1, C)."""
        return self(x), None


class SepConvTransition(nn.Module):
    """Depthwise-separable convolution transition: depthwise conv over positions, then a pointwise ReLU MLP.

    In the encoder the window is centred and padding positions are zeroed first, so padding reads as the
    convolution's own zero border. In the decoder the window is causal (left-padded by kernel-1 zeros), so
    step() needs only the last kernel-1 inputs, kept in LayerState.conv.
    """

    def __init__(self, d_model: int, d_ff: int, kernel: int, activation_dropout: float = 0.0,
                 activation: str = "relu"):
        super().__init__()
        self.kernel = kernel
        self.depthwise = nn.Conv1d(d_model, d_model, kernel, groups=d_model)
        self.pointwise = FeedForward(d_model, d_ff, activation_dropout, activation)

    def _convolve(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L + k - 1, C) already padded -> (B, L, C)."""
        return self.depthwise(x.transpose(1, 2)).transpose(1, 2)

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """(B, L, C) -> (B, L, C); pad (B, L) True at padding, zeroed before the convolution."""
        if pad is not None:
            x = x.masked_fill(pad.unsqueeze(-1), 0.0)
        left = self.kernel - 1 if causal else (self.kernel - 1) // 2
        right = self.kernel - 1 - left
        x = F.pad(x, (0, 0, left, right))  # (B, L + k - 1, C)
        return self.pointwise(self._convolve(x))

    def initial_history(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """Zeros standing for the causal left padding: (B, k - 1, C)."""
        return like.new_zeros(batch, self.kernel - 1, like.size(-1))

    def step(self, x: torch.Tensor, history: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One new position x (B, 1, C) after the last k - 1 inputs; returns (B, 1, C) and the new history."""
        window = torch.cat([history.to(x.dtype), x], dim=1)  # (B, k, C)
        return self.pointwise(self._convolve(window)), window[:, 1:]


Transition = FeedForward | SepConvTransition  # what EncoderLayer and DecoderLayer accept as `transition`


def multi_head(s: CommonSettings) -> MultiHeadAttention:
    """Multi-head attention with the settings' heads, per-head widths and attention dropout."""
    return MultiHeadAttention(s.d_model, s.heads, s.attention_dropout, s.d_k, s.d_v)


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the transition."""

    def __init__(self, s: CommonSettings, transition: Transition):
        super().__init__()
        pre_norm = s.norm == "pre"
        self.self_attn = multi_head(s)
        self.self_res = Residual(s.d_model, s.dropout, pre_norm)
        self.transition = transition
        self.transition_res = Residual(s.d_model, s.dropout, pre_norm)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, pad: torch.Tensor | None) -> torch.Tensor:
        """x (B, S, C), mask (B, 1, 1 or S, S) or None (attention.encoder_self_mask), pad (B, S) -> (B, S, C)."""
        h = self.self_res.before(x)
        x = self.self_res.after(x, self.self_attn(h, h, mask=mask))
        h = self.transition_res.before(x)
        return self.transition_res.after(x, self.transition(h, pad=pad))


class DecoderLayer(nn.Module):
    """Causal self-attention (restricted to the last `attention_window` positions when set), attention over the
    encoder output, then the transition."""

    def __init__(self, s: CommonSettings, transition: Transition):
        super().__init__()
        pre_norm = s.norm == "pre"
        self.window = s.attention_window
        self.self_attn = multi_head(s)
        self.self_res = Residual(s.d_model, s.dropout, pre_norm)
        self.cross_attn = multi_head(s)
        self.cross_res = Residual(s.d_model, s.dropout, pre_norm)
        self.transition = transition
        self.transition_res = Residual(s.d_model, s.dropout, pre_norm)

    def forward(self, x: torch.Tensor, cross: tuple[torch.Tensor, torch.Tensor],
                cross_mask: torch.Tensor | None) -> torch.Tensor:
        """Whole target x (B, T, C); cross = encoder keys/values (B, H, S, d_k / d_v) from cross_attn.project_kv.

        Self-attention uses is_causal=True (or the causal band of a restricted window) and no key padding
        mask. That is exact for every real position: targets are right-padded, so position i has only real
        tokens at 0..i, and the causal mask already hides every later position, padding included. Outputs at
        padding positions are garbage nobody reads (the loss ignores them). Without a mask tensor SDPA can
        pick its fused kernels.
        """
        h = self.self_res.before(x)
        if self.window:
            band = band_mask(x.size(1), self.window, causal=True, device=x.device)  # (T, T)
            x = self.self_res.after(x, self.self_attn(h, h, mask=band))
        else:
            x = self.self_res.after(x, self.self_attn(h, h, is_causal=True))
        h = self.cross_res.before(x)
        x = self.cross_res.after(x, self.cross_attn.attend(h, *cross, mask=cross_mask))
        h = self.transition_res.before(x)
        return self.transition_res.after(x, self.transition(h, causal=True))

    def initial_state(self, batch: int, like: torch.Tensor) -> LayerState:
        """The state before the first target position."""
        return LayerState(None, None, self.transition.initial_history(batch, like))

    def step(self, x: torch.Tensor, state: LayerState | BeamLayerState, cross: tuple[torch.Tensor, torch.Tensor],
             memory: Memory) -> tuple[torch.Tensor, LayerState | BeamLayerState]:
        """One new position x (B, 1, C) after those in state; returns (B, 1, C) and the extended state.

        cross (this layer's encoder keys/values) and memory have B / memory.group rows: `group` consecutive rows of
        x read one (state.py).
        The new query may see every cached key, so no mask is needed (is_causal stays False: with one
        query SDPA would align its causal mask to the first key, not the last). With a restricted window
        only the last `window` keys and values besides the new one are attended to (and copied on reorder):
        nothing older is ever read again.
        """
        h = self.self_res.before(x)
        key, value = self.self_attn.project_kv(h)  # (B, H, 1, d_k / d_v)
        if isinstance(state, BeamLayerState):  # beam rows reading their ancestors' keys in place (beam_cache.py)
            state = state.append(key, value)
            x = self.self_res.after(x, self.self_attn.attend_beams(h, *state.keys()))
        else:
            state = state.append(key, value, self.window)  # a new LayerState (its buffers written in place)
            key, value = state.keys(self.window)  # (B, H, t+1 or fewer, d_k / d_v), views of the cache
            x = self.self_res.after(x, self.self_attn.attend(h, key, value))
        h = self.cross_res.before(x)
        crossed = self.cross_attn.attend_step(h, *cross, memory.mask, memory.step_bias(), memory.group)
        x = self.cross_res.after(x, crossed)
        h = self.transition_res.before(x)
        y, state.conv = self.transition.step(h, state.conv)
        return self.transition_res.after(x, y), state
