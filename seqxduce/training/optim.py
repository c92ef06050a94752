"""The optimizer and its learning-rate schedule: Adam or AdamW (fused where the device has the kernel), the
schedule's value at each step, gradient clipping and an update a non-finite step skips."""

from __future__ import annotations

import math
from typing import Any

import torch

from seqxduce.api import UserError
from seqxduce.settings import TrainSettings
from seqxduce.training import distributed


def inverse_sqrt_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Vaswani et al. 2017, eq. 3: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times scale."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def decayed_lr(step: int, peak: float, floor: float, warmup: int, total: int, shape: str) -> float:
    """Linear warm-up from 0 to `peak` over `warmup` steps, then a cosine or linear decay to `floor` at step
    `total` (and `floor` after it), as fairseq's cosine and polynomial (power 1) schedulers do."""
    if step < warmup:
        return peak * step / warmup
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    fraction = 0.5 * (1.0 + math.cos(math.pi * progress)) if shape == "cosine" else 1.0 - progress
    return floor + (peak - floor) * fraction


def learning_rate(settings: TrainSettings, step: int, d_model: int | None) -> float:
    """The learning rate at an optimizer step (1-based) under the recipe's schedule."""
    if settings.schedule == "constant":
        return settings.lr
    if settings.schedule in ("cosine", "linear"):
        return decayed_lr(step, settings.lr, settings.lr_floor, settings.warmup_steps, settings.max_steps,
                          settings.schedule)
    if not d_model:
        raise UserError("[train] schedule = \"inverse_sqrt\" needs the model's d_model; set schedule = \"constant\", "
                        "\"cosine\" or \"linear\" (with lr)")
    return inverse_sqrt_lr(step, d_model, settings.warmup_steps, settings.lr_scale)


def clip_gradients(grads: list[torch.Tensor], max_norm: float, shards: distributed.World | None = None
                   ) -> torch.Tensor:
    """The gradients' total L2 norm (a device tensor), scaling them down to max_norm when above it (max_norm 0:
    no clipping), as clip_grad_norm_ does: a few foreach kernels over all parameters and no read on the host.
    With shards, grads are this rank's shards of the gradients (FSDP) and the squared norms are summed over ranks."""
    if shards is not None:
        squares = torch.stack(torch._foreach_norm(grads)).float().pow(2).sum() if grads else torch.zeros(())
        norm = shards.all_reduce_sum(squares).sqrt()
    elif not grads:
        return torch.zeros(())
    else:
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())
    if max_norm > 0:
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def build_optimizer(model: torch.nn.Module, settings: TrainSettings, d_model: int | None
                    ) -> tuple[torch.optim.Optimizer, bool]:
    """Adam or AdamW, fused (one kernel for all parameters, and a skip decided on the device) where the
    device has the fused kernel (CUDA, and the CPU since torch 2.4), else foreach; and whether it is fused."""
    s = settings
    cls = torch.optim.Adam if s.optimizer == "adam" else torch.optim.AdamW
    args = dict(lr=learning_rate(s, 1, d_model), betas=tuple(s.betas), eps=s.eps, weight_decay=s.weight_decay)
    try:
        return cls(model.parameters(), fused=True, **args), True
    except RuntimeError:  # a device (or dtype) without the fused kernel
        return cls(model.parameters(), foreach=True, **args), False


def build_scaler(settings: TrainSettings, device: torch.device) -> torch.amp.GradScaler:
    """fp16's loss scaler (a no-op otherwise)."""
    # sum-over-tokens losses are large: start at 2^7 as fairseq does, not 2^16, to avoid skipped first steps
    return torch.amp.GradScaler(device.type, init_scale=2.0**7, enabled=settings.precision == "fp16")


def restore_optimizer(optimizer: torch.optim.Optimizer, saved: dict[str, Any], fused: bool) -> None:
    """Load a checkpoint's optimizer state, keeping this run's implementation: load_state_dict would take the
    saved groups' fused/foreach flags, so a checkpoint of a foreach optimizer (written before the fused one, or on
    a device without it) would turn this one back to foreach, which cannot skip a step on the device."""
    optimizer.load_state_dict(saved)
    keep_implementation(optimizer, fused)


def keep_implementation(optimizer: torch.optim.Optimizer, fused: bool) -> None:
    """Set the optimizer's groups back to fused (step counts as float32 tensors beside the parameters) or foreach."""
    for group in optimizer.param_groups:
        group["fused"], group["foreach"] = (True, None) if fused else (None, True)
        if fused:  # the fused kernel takes the step counts as float32 tensors beside the parameters
            for param in group["params"]:
                state = optimizer.state.get(param, {})
                if "step" in state:
                    state["step"] = torch.as_tensor(state["step"], dtype=torch.float32).to(param.device)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group's learning rate."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def optimizer_step(optimizer: torch.optim.Optimizer, fused: bool, skipped: torch.Tensor) -> None:
    """The update, unless `skipped` (a 0-dim 0./1. tensor) says the loss or gradient was not finite: a fused
    optimizer reads it on the device as found_inf (its step count is not advanced either); another one
    needs it on the host."""
    if not fused:
        if not bool(skipped):
            optimizer.step()
        return
    optimizer.found_inf = skipped  # the gradients were unscaled already: no grad_scale
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf
