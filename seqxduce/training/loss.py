"""The training loss: label-smoothed cross-entropy over the vocabulary, with its gradient written by hand.

Autograd over log_softmax, gather and mean keeps the (tokens, V) float32 log-probabilities for the backward pass
and builds three more (tokens, V) tensors there (the mean's and the gather's gradients and their sum) before
log_softmax's own backward. The gradient of label-smoothed cross-entropy has a closed form, softmax minus the
smoothed target, so here the forward keeps only the logits and one log-sum-exp per token, and the backward
writes one (tokens, V) tensor: fewer passes over the largest tensor of a step and, for a large vocabulary on a
GPU, gigabytes less memory at large batches.

With word-level knowledge distillation (Kim & Rush 2016) a second target distribution joins the smoothed one:
the teacher's k most probable next tokens with their probabilities q, weighted by kd_weight. Its cross-entropy,
sum_k q_k (lse - x_k), has the same closed-form gradient, softmax * sum(q) minus q scattered onto its tokens, so
the teacher's term costs a gather and a scatter of k values per token, not another (tokens, V) tensor.

On the CPU both passes go through the rows in chunks of about 1 MiB of float32: the float32 temporaries of the
log-sum-exp and of the gradient then stay in the core's cache, where whole (tokens, V) temporaries went to memory
(and to fresh pages) once per operation; each row is computed exactly as a whole tensor computes it, so the loss
and the gradient keep every bit (tests/test_loss.py). On a GPU one chunk is the whole tensor.
"""

from __future__ import annotations

from typing import Any

import torch

SoftTargets = tuple[torch.Tensor, torch.Tensor]  # a teacher's top-k token ids (..., k) and their probabilities
CPU_CHUNK_BYTES = 1 << 20  # float32 bytes of logits rows handled at once on the CPU (about a core's L2 cache)


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int,
                       soft: SoftTargets | None = None, kd_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets (float32 scalars).

    The smoothed target puts 1 - epsilon on the gold token and epsilon spread uniformly over the whole
    vocabulary (Szegedy et al. 2016, as used by Vaswani et al. 2017). logits (..., V), target (...). Only the
    first result carries a gradient; the NLL is for the log.

    soft = (ids, probs), each (..., k): a teacher's distribution over k tokens per position (word-level
    distillation); the loss is then (1 - kd_weight) * the smoothed cross-entropy + kd_weight * the cross-entropy
    against the teacher's distribution. The NLL stays the references'.
    """
    if soft is None or not kd_weight:
        return _LabelSmoothedNLL.apply(logits, target, epsilon, pad_id, None, None, 0.0)
    ids, probs = soft
    return _LabelSmoothedNLL.apply(logits, target, epsilon, pad_id, ids, probs, kd_weight)


def row_chunks(rows: int, vocab: int, device: torch.device) -> list[slice]:
    """The slices of rows the loss handles at once: all of them on a GPU, about CPU_CHUNK_BYTES on the CPU."""
    if device.type != "cpu":
        return [slice(0, rows)]
    step = max(1, CPU_CHUNK_BYTES // (4 * vocab))
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


class _LabelSmoothedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int,
                soft_ids: torch.Tensor | None, soft_probs: torch.Tensor | None, kd_weight: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(logits.device.type, enabled=False):
            vocab = logits.size(-1)
            rows, flat_target = logits.reshape(-1, vocab), target.reshape(-1, 1)
            lse = torch.empty(rows.size(0), dtype=torch.float32, device=logits.device)  # per token
            gold, mean = torch.empty_like(lse), torch.empty_like(lse)  # the gold logit, the mean logit
            taught = soft_ids is not None
            if taught:
                flat_ids = soft_ids.reshape(rows.size(0), -1)
                flat_q = soft_probs.reshape(rows.size(0), -1).float()
                q_dot = torch.empty_like(lse)  # sum_k q_k x_k: the teacher's expected logit
            for part in row_chunks(rows.size(0), vocab, logits.device):
                x = rows[part].float()
                torch.logsumexp(x, dim=-1, out=lse[part])
                gold[part] = x.gather(-1, flat_target[part]).squeeze(-1)
                torch.mean(x, dim=-1, out=mean[part])
                if taught:
                    q_dot[part] = (x.gather(-1, flat_ids[part]) * flat_q[part]).sum(-1)
            lse, gold, mean = (t.view(target.shape) for t in (lse, gold, mean))
            nll = lse - gold
            uniform = lse - mean  # minus the mean log-probability
            mask = target != pad_id
            loss = (1.0 - epsilon) * nll + epsilon * uniform
            q_sum = None
            if taught:
                q_sum = flat_q.sum(-1)  # 1 where the teacher's k probabilities are given, 0 at padding
                distilled = q_sum.view(target.shape) * lse - q_dot.view(target.shape)
                loss = (1.0 - kd_weight) * loss + kd_weight * distilled
            # a select, not loss[mask]: boolean indexing waits for the device to learn the result's size
            loss_sum, nll_sum = torch.where(mask, loss, 0.0).sum(), torch.where(mask, nll, 0.0).sum()
        ctx.save_for_backward(logits, target, lse, mask, *((flat_ids, flat_q, q_sum) if taught else ()))
        ctx.epsilon, ctx.kd_weight = epsilon, kd_weight if taught else 0.0
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _grad_nll: torch.Tensor | None
                 ) -> tuple[torch.Tensor | None, ...]:
        logits, target, lse, mask, *teacher = ctx.saved_tensors
        epsilon, kd = ctx.epsilon, ctx.kd_weight
        if kd:
            flat_ids, flat_q, q_sum = teacher
            # softmax's share per row: (1 - kd) from the references' term, kd * sum(q) from the teacher's
            softmax_share = ((1.0 - kd) + kd * q_sum).reshape(-1, 1)
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
                gold_w = w  # the references' term's weight
                if kd:
                    g.mul_(w * softmax_share[part].to(g.dtype))
                    gold_w = w * (1.0 - kd)
                    g.scatter_add_(-1, flat_ids[part], (w * kd) * -flat_q[part].to(g.dtype))
                else:
                    g.mul_(w)
                if epsilon:
                    g.sub_(gold_w * (epsilon / vocab))
                g.scatter_add_(-1, flat_target[part], gold_w * -(1.0 - epsilon))
                if g is not out:
                    out.copy_(g)  # to the logits' dtype
        return grad.view(logits.shape), None, None, None, None, None, None


def label_smoothed_nll_reference(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                                 pad_id: int, soft: SoftTargets | None = None, kd_weight: float = 0.0
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook formula under autograd (log_softmax, gather, mean): what label_smoothed_nll computed before its
    gradient was written out by hand, kept as the reference its tests and bench/loss_speed.py compare against."""
    lprobs = torch.nn.functional.log_softmax(logits.float(), dim=-1)
    mask = target != pad_id
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    loss = (1.0 - epsilon) * nll + epsilon * -lprobs.mean(dim=-1)
    if soft is not None and kd_weight:
        ids, probs = soft
        distilled = -(lprobs.gather(-1, ids) * probs.float()).sum(-1)
        loss = (1.0 - kd_weight) * loss + kd_weight * distilled
    return torch.where(mask, loss, 0.0).sum(), torch.where(mask, nll, 0.0).sum()
