"""Adaptive Computation Time (Graves 2016) bookkeeping, per position, as the Universal Transformer uses it.

At depth step n every position still running emits a halting probability p_n. A position halts at the
first step N where p_1 + ... + p_N would exceed 1 - epsilon (or at the last allowed step); its remainder
is R = 1 - (p_1 + ... + p_{N-1}). The output state mixes each step's new state h_n with update weight
w_n = p_n (still running), R (halting now) or 0 (halted before):

    output = h_n * w_n + output * (1 - w_n)

(parenthesised: a widely copied implementation writes `previous * 1 - w`, which is `previous - w`).
The ponder cost of a position is N + R; padding positions count as halted from the start and take no
part in the cost.
"""

from __future__ import annotations

import torch


class Halting:
    """The halting state of a batch of positions (B, L) across depth steps."""

    def __init__(self, pad: torch.Tensor, like: torch.Tensor, epsilon: float, max_steps: int):
        self.threshold = 1.0 - epsilon
        self.max_steps = max_steps
        self.real = ~pad  # (B, L)
        self.halted = pad.clone()  # (B, L) True once a position has halted (padding: from the start)
        self.total = torch.zeros(pad.shape, device=pad.device)  # (B, L) sum of p while running
        self.remainder = torch.zeros(pad.shape, device=pad.device)  # (B, L) R
        self.updates = torch.zeros(pad.shape, device=pad.device)  # (B, L) N
        self.output = torch.zeros_like(like, dtype=torch.float32)  # (B, L, C)

    def done(self) -> bool:
        """Every position has halted: further steps would change nothing."""
        return bool(self.halted.all())

    def update(self, p: torch.Tensor, state: torch.Tensor, step: int) -> torch.Tensor:
        """Fold depth step `step` (1-based): p (B, L) halting probabilities, state (B, L, C) its new states.

        Returns the positions (B, L) that ran this step (were still running before it).
        """
        p = p.float()
        running = ~self.halted
        halting_now = running & ((self.total + p > self.threshold) | (step >= self.max_steps))
        going_on = running & ~halting_now
        self.total = self.total + p * going_on
        remainder = (1.0 - self.total) * halting_now
        self.remainder = self.remainder + remainder
        self.updates = self.updates + running.float()
        weight = (p * going_on + remainder).unsqueeze(-1)  # (B, L, 1)
        self.output = state * weight + self.output * (1.0 - weight)
        self.halted = self.halted | halting_now
        return running

    def ponder(self) -> torch.Tensor:
        """Ponder time N + R per position (B, L); 0 at padding."""
        return self.updates + self.remainder

    def cost(self) -> torch.Tensor:
        """Mean ponder time over real positions (a scalar with gradient through the remainders)."""
        return (self.ponder() * self.real).sum() / self.real.sum().clamp(min=1)
