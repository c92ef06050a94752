"""The training loss: label-smoothed cross-entropy over the vocabulary, with its gradient written by hand.

Autograd over log_softmax, gather and mean keeps the (tokens, V) float32 log-probabilities for the backward pass
and builds three more (tokens, V) tensors there (the mean's and the gather's gradients and their sum) before
log_softmax's own backward. The gradient of label-smoothed cross-entropy has a closed form, softmax minus the
smoothed target, so here the forward keeps only the logits and one log-sum-exp per token, and the backward
writes one (tokens, V) tensor: fewer passes over the largest tensor of a step and, for a large vocabulary on a
GPU, gigabytes less memory at large batches.
"""

from __future__ import annotations

from typing import Any

import torch


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets (float32 scalars).

    The smoothed target puts 1 - epsilon on the gold token and epsilon spread uniformly over the whole
    vocabulary (Szegedy et al. 2016, as used by Vaswani et al. 2017). logits (..., V), target (...). Only the
    first result carries a gradient; the NLL is for the log.
    """
    return _LabelSmoothedNLL.apply(logits, target, epsilon, pad_id)


class _LabelSmoothedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(logits.device.type, enabled=False):
            x = logits.float()
            lse = torch.logsumexp(x, dim=-1)  # (...)
            nll = lse - x.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            uniform = lse - x.mean(dim=-1)  # minus the mean log-probability
            mask = target != pad_id
            loss = (1.0 - epsilon) * nll + epsilon * uniform
            # a select, not loss[mask]: boolean indexing waits for the device to learn the result's size
            loss_sum, nll_sum = torch.where(mask, loss, 0.0).sum(), torch.where(mask, nll, 0.0).sum()
        ctx.save_for_backward(logits, target, lse, mask)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _grad_nll: torch.Tensor | None
                 ) -> tuple[torch.Tensor, None, None, None]:
        logits, target, lse, mask = ctx.saved_tensors
        epsilon = ctx.epsilon
        with torch.autocast(logits.device.type, enabled=False):
            weight = torch.where(mask, grad_loss.float(), 0.0).unsqueeze(-1)  # (..., 1): 0 at padding
            # bf16 logits minus float32 lse promote to float32 in one pass (no float copy of the logits first)
            grad = torch.sub(logits, lse.unsqueeze(-1)).exp_()  # softmax
            grad.mul_(weight)
            if epsilon:
                grad.sub_(weight * (epsilon / logits.size(-1)))
            grad.scatter_add_(-1, target.unsqueeze(-1), weight * -(1.0 - epsilon))
        return grad.to(logits.dtype), None, None, None
