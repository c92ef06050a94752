"""Where a model runs and in what precision: the recipe's [train] device and precision as torch objects."""

from __future__ import annotations

import contextlib

import torch

from seqxduce.api import UserError


def resolve_device(name: str) -> torch.device:
    """cpu, cuda, cuda:N or auto."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"[train] device = {name!r} but no CUDA device is visible; use device = \"cpu\"")
    return torch.device(name)


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """torch.autocast for bf16/fp16, nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
