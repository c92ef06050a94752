"""The training loss: label-smoothed cross-entropy over the vocabulary, with its gradient written by hand.

Autograd over log_softmax, gather and mean keeps the (tokens, V) float32 log-probabilities for the backward pass
and builds three more (tokens, V) tensors there (the mean's and the gather's gradients and their sum) before
log_softmax's own backward. The gradient of label-smoothed cross-entropy has a closed form, softmax minus the
smoothed target, so here the forward keeps only the logits and one log-sum-exp per token, and the backward
writes one (tokens, V) tensor: fewer passes over the largest tensor of a step and, for a large vocabulary on a
GPU, gigabytes less memory at large batches.

On the CPU both passes go through the rows in chunks of about 1 MiB of float32: the float32 temporaries of the
log-sum-exp and of the gradient then stay in the core's cache, where whole (tokens, V) temporaries went to memory
(and to fresh pages) once per operation; each row is computed exactly as a whole tensor computes it, so the loss
and the gradient keep every bit (tests/test_loss.py). On a GPU one chunk is the whole tensor.
"""

from __future__ import annotations

from typing import Any

import torch

CPU_CHUNK_BYTES = 1 << 20  # float32 bytes of logits rows handled at once on the CPU (about a core's L2 cache)


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets (float32 scalars).

    The smoothed target puts 1 - epsilon on the gold token and epsilon spread uniformly over the whole
    vocabulary (Szegedy et al. 2016, as used by Vaswani et al. 2017). logits (..., V), target (...). Only the
    first result carries a gradient; the NLL is for the log.
    """
    return _LabelSmoothedNLL.apply(logits, target, epsilon, pad_id)


def row_chunks(rows: int, vocab: int, device: torch.device) -> list[slice]:
    """The slices of rows the loss handles at once: all of them on a GPU, about CPU_CHUNK_BYTES on the CPU."""
    if device.type != "cpu":
        return [slice(0, rows)]
    step = max(1, CPU_CHUNK_BYTES // (4 * vocab))
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


class _LabelSmoothedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(logits.device.type, enabled=False):
            vocab = logits.size(-1)
            rows, flat_target = logits.reshape(-1, vocab), target.reshape(-1, 1)
            lse = torch.empty(rows.size(0), dtype=torch.float32, device=logits.device)  # per token
            gold, mean = torch.empty_like(lse), torch.empty_like(lse)  # the gold logit, the mean logit
            for part in row_chunks(rows.size(0), vocab, logits.device):
                x = rows[part].float()
                torch.logsumexp(x, dim=-1, out=lse[part])
                gold[part] = x.gather(-1, flat_target[part]).squeeze(-1)
                torch.mean(x, dim=-1, out=mean[part])
            lse, gold, mean = (t.view(target.shape) for t in (lse, gold, mean))
            nll = lse - gold
            uniform = lse - mean  # minus the mean log-probability
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
            vocab = logits.size(-1)
            weight = torch.where(mask, grad_loss.float(), 0.0).reshape(-1, 1)  # (tokens, 1): 0 at padding
            rows, flat_target, flat_lse = logits.reshape(-1, vocab), target.reshape(-1, 1), lse.reshape(-1, 1)
            grad = torch.empty_like(rows)
            for part in row_chunks(rows.size(0), vocab, logits.device):
                out = grad[part]
                # softmax; bf16 logits minus float32 lse promote to float32 in one pass (no float copy first), and
                # float32 logits' gradient is written in place
                g = torch.sub(rows[part], flat_lse[part], out=out if out.dtype == torch.float32 else None).exp_()
                w = weight[part].to(g.dtype)  # float32, unless float64 logits made g float64
                g.mul_(w)
                if epsilon:
                    g.sub_(w * (epsilon / vocab))
                g.scatter_add_(-1, flat_target[part], w * -(1.0 - epsilon))
                if g is not out:
                    out.copy_(g)  # to the logits' dtype
        return grad.view(logits.shape), None, None, None


def label_smoothed_nll_reference(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                                 pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook formula under autograd (log_softmax, gather, mean): what label_smoothed_nll computed before its
    gradient was written out by hand, kept as the reference its tests and bench/loss_speed.py compare against."""
    lprobs = torch.nn.functional.log_softmax(logits.float(), dim=-1)
    mask = target != pad_id
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    loss = (1.0 - epsilon) * nll + epsilon * -lprobs.mean(dim=-1)
    return torch.where(mask, loss, 0.0).sum(), torch.where(mask, nll, 0.0).sum()
