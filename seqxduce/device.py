"""Where a model runs and in what precision: the recipe's [train] device and precision as torch objects."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

import torch

from seqxduce.api import UserError


def resolve_device(name: str) -> torch.device:
    """cpu, cuda, cuda:N or auto, as device_for chooses it for this process (under torchrun: the rank's own GPU,
    made the current device so that nothing of this rank lands on GPU 0)."""
    local_rank = torchrun_local_rank()
    chosen = torch.device(device_for(name, torch.cuda.is_available(),
                                     torch.cuda.device_count() if name != "cpu" else 0, local_rank))
    if chosen.type == "cuda" and local_rank is not None:
        torch.cuda.set_device(chosen)
    return chosen


def torchrun_local_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """This process's rank on its node when torchrun started it (LOCAL_RANK), else None."""
    environ = os.environ if environ is None else environ
    local = environ.get("LOCAL_RANK")
    return int(local) if local not in (None, "") and "WORLD_SIZE" in environ else None


def device_for(name: str, cuda_available: bool, device_count: int, local_rank: int | None) -> str:
    """The device a process takes for the setting `name` (cpu, cuda, cuda:N or auto: cuda when one is visible).
    Under torchrun (local_rank not None) a CUDA setting means the rank's own GPU, cuda:LOCAL_RANK, for training and
    decoding alike: a bare `cuda` would put every rank of the node on GPU 0. Refused in one line when no CUDA
    device is visible, or when the node shows fewer GPUs than torchrun started processes."""
    if name == "auto":
        name = "cuda" if cuda_available else "cpu"
    if not name.startswith("cuda"):
        return name
    if not cuda_available:
        raise UserError(f"[train] device = {name!r} but no CUDA device is visible; use device = \"cpu\"")
    if local_rank is None:
        return name
    if local_rank >= device_count:
        raise UserError(f"[train] device = {name!r} under torchrun: LOCAL_RANK {local_rank} but this node shows "
                        f"{device_count} CUDA device(s); start at most {device_count} processes per node "
                        f"(torchrun --nproc_per_node {device_count})")
    return f"cuda:{local_rank}"


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles (a Xeon from Sapphire Rapids on), as torch's own probe says; a torch without
    the probe answers no."""
    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def cpu_has_bf16_units() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX tiles). Elsewhere (an AVX2-only AMD EPYC
    of the Zen 3 generation, an Intel CPU before Cooper Lake) torch's CPU kernels convert bf16 to fp32 and back
    around every operation: a bf16 autocast step costs several times an fp32 one (bench/log/2026-12-01-cpu-bf16.md:
    13x for a training step, 8x for a Linear, on a 2-core Zen 3 EPYC). A torch that cannot tell counts as having
    them (nothing is said then)."""
    avx512_bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    if avx512_bf16 is None and not hasattr(torch.cpu, "_is_amx_tile_supported"):
        return True
    return bool(avx512_bf16 and avx512_bf16()) or cpu_has_amx()


def emulated_bf16(device: torch.device, precision: str) -> bool:
    """bf16 asked of a CPU without bf16 units (cpu_has_bf16_units): it runs, emulated, at several times the cost of
    fp32."""
    return precision == "bf16" and device.type == "cpu" and not cpu_has_bf16_units()


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """torch.autocast for bf16/fp16, nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
