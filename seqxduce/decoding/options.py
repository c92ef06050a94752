"""What `[decode] quantize` and `[decode] compile` do to a loaded model, for any model plugin.

Both act on the model as a torch.nn.Module and on its Model.step, so the core stays model-agnostic: dynamic
int8 quantization replaces every nn.Linear by torch's dynamically quantized Linear (int8 weights, activations
quantized per batch; CPU kernels only), and compile wraps the instance's step in torch.compile. Neither
changes the weights on disk; both apply to decoding only (`seqxduce decode`, `translate`, `parse`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from seqxduce.api import Model, UserError
from seqxduce.device import cpu_has_amx, emulated_bf16

if TYPE_CHECKING:
    from seqxduce.recipe import Recipe

QUANTIZE_CHOICES = ("none", "int8")


def decode_precision(recipe: Recipe) -> str:
    """What a run decodes in: [decode] precision (`decode --precision`), or for "recipe" int8 when [decode]
    quantize = "int8", else [train] precision (bf16 and fp16 as autocast, as the run was trained)."""
    chosen = recipe.decode.core.precision
    if chosen != "recipe":
        return chosen
    return "int8" if recipe.decode.core.quantize == "int8" else recipe.train.precision


def fit_precision(recipe: Recipe, device: torch.device) -> tuple[Recipe, str | None]:
    """The recipe as `device` decodes it, and the note that says what changed (None: nothing did). A bf16 run
    whose [decode] precision is "recipe" decodes in fp32 on a CPU without bf16 units (device.emulated_bf16): the
    same weights, fp32 arithmetic instead of bf16 emulated at a higher cost (1.4x to 8x here, by the size of the
    matrices: bench/log/2026-12-01-cpu-bf16.md), as CTranslate2 decodes a
    compute type the machine lacks in the nearest one it has. An explicit bf16 (`--precision bf16`) is kept."""
    if recipe.decode.core.precision != "recipe" or not emulated_bf16(device, decode_precision(recipe)):
        return recipe, None
    core = dataclasses.replace(recipe.decode.core, precision="fp32")
    note = ("note: decoding in fp32, not the run's bf16: this CPU has no bf16 units (no AVX512-BF16, no AMX), so "
            "bf16 would be emulated, slower than fp32; --precision bf16 decodes in bf16 all the same")
    return dataclasses.replace(recipe, decode=dataclasses.replace(recipe.decode, core=core)), note


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse, in one line, a decode precision the device cannot run."""
    if precision == "int8" and device.type != "cpu":
        raise UserError(f"decode precision int8 runs on the CPU only (torch's dynamic int8 kernels), and this run "
                        f"decodes on {device}; decode with --device cpu, or --precision fp32 / bf16")
    if precision == "fp16" and device.type != "cuda":
        raise UserError(f"decode precision fp16 needs a CUDA device, and this run decodes on {device}; use "
                        "--precision bf16 or fp32 (or --device cuda)")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(f"decode precision bf16: {device} has no bf16 support; use --precision fp16 or fp32")


def quantize_for_decoding(model: Model, kind: str) -> Model:
    """A copy of the model with its nn.Linear layers dynamically quantized (kind "int8"); the model itself for
    "none". CPU only: torch's dynamic int8 Linear has no CUDA kernel."""
    if kind == "none":
        return model
    if kind not in QUANTIZE_CHOICES:
        raise UserError(f"[decode] quantize = {kind!r}: use one of {', '.join(QUANTIZE_CHOICES)}")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if device.type != "cpu":
        raise UserError(f"[decode] quantize = {kind!r} runs on the CPU only (torch's dynamic int8 kernels), "
                        f"and this model is on {device}; decode with --set train.device=cpu, or set "
                        "decode.quantize = \"none\"")
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao; it still works
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic
        # a deep copy: a tied output projection keeps its float embedding, only the Linear is quantized
        with int8_engine():
            quantized = quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8)
    return quantized.eval()


def prepare_for_decoding(model: Model, precision: str, device: torch.device) -> Model:
    """The model as decoding runs it at `precision` (decode_precision): for int8 a quantized copy
    (quantize_for_decoding); for fp32 on the CPU the model itself with its nn.Linear layers packed for MKL's GEMM
    at the batch's row count (packed_linear.py: the same weights, 1.1-1.4x faster on a decoding step's shapes); as
    it is otherwise (bf16 / fp16 run under autocast)."""
    if precision == "int8":
        return quantize_for_decoding(model, "int8")
    if precision == "fp32" and device.type == "cpu":
        from seqxduce.decoding.packed_linear import pack_linear_layers

        pack_linear_layers(model)
    return model


@contextlib.contextmanager
def int8_engine() -> Iterator[None]:
    """Pack int8 Linear weights for oneDNN's kernels on a CPU with AMX tiles (elsewhere for torch's default
    engine); the process's engine is restored afterwards (a packed Linear runs its own engine's kernel whatever
    the global setting is when it is called).

    Why: torch's default (x86) packs dynamic Linear weights for fbgemm, which uses AVX-512 VNNI at best; oneDNN
    runs the same int8 GEMM on AMX, 1.5-5x faster on a decoding step's shapes (256 rows; 256 -> 1024, 1024 -> 256,
    256 -> 8,000; bench/log/2026-11-27-decode-int8.md) with the same quantization of weights and activations: the
    outputs differ from fbgemm's in their last bits (5e-7 of 2.6 on a random 256 -> 1,024 layer). Without AMX
    fbgemm stays (not measured there)."""
    before = torch.backends.quantized.engine
    if cpu_has_amx() and "onednn" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "onednn"
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


RECOMPILE_LIMIT = 64  # graphs of one compiled step (compile_step)


def compile_step(model: Model, backend: str = "inductor") -> Model:
    """The model with its step() compiled by torch.compile (dynamic shapes: the batch shrinks as sources
    finish and the cache grows every step, which must not recompile each time). The first calls compile."""
    original = model.step
    # one graph per layout of the caches the step meets (the first step, a write in place, a buffer grown, a beam's
    # first reorder, one row per source, ...): a dozen or so in one search, over dynamo's default of 8, after which
    # it would run the step eagerly without a word. The layouts are few and fixed; the lengths and the batch size
    # stay symbolic, so this does not grow with the data.
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.7's name
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
    model.step = torch.compile(original, dynamic=True, backend=backend)  # an instance attribute: forward() as is
    return model
