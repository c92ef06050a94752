"""Linear layers whose float32 weights are packed for MKL's GEMM at the batch's row count, for CPU decoding.

A decoding step multiplies a few dozen rows (64 sources, or 32 sources of 4 beams... ) by each weight matrix. MKL
can pack a weight matrix once for a given row count (`cblas_sgemm_pack`, which torch exposes as
`torch.ops.mkl._mkl_reorder_linear_weight` / `_mkl_linear`, the ops inductor's freezing uses); the packed GEMM
then skips re-laying out the weights on every call. On a decoding step's shapes it ran 1.14-1.25x faster at 64
rows (256 -> 256, 1,024, 8,000), 1.37-1.44x at 32 rows (512 -> 512, 2,048, 8,000) and about even at 256 rows
(bench/log/2026-11-27-decode-step-overhead.md). torch has no public API for it, so the ops are checked once (present,
and equal to F.linear on a small layer) and every layer falls back to F.linear when they are not.

A packed copy serves one row count: a layer packs when the same count comes twice in a row (a steady batch; a
pack costs about one call) and otherwise runs F.linear, so a batch that shrinks every step never pays for packs
it cannot use. Results differ from F.linear's in the last bits (a different summation order), which decoding
parity allows (tests/search_identity.py).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

# torch.compiler.is_compiling from torch 2.3 on; torch._dynamo.is_compiling before (both read as constants by dynamo)
_compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling


@functools.cache
def mkl_packing() -> bool:
    """Whether torch's MKL packed-GEMM ops are here and give F.linear's results (checked on a small layer)."""
    if not torch._C.has_mkl:
        return False
    try:
        weight, bias, x = torch.randn(24, 16), torch.randn(24), torch.randn(5, 16)
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, 5)
        got = torch.ops.mkl._mkl_linear(x, packed, weight, bias, 5)
    except (AttributeError, RuntimeError):
        return False
    return bool(torch.allclose(got, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5))


class PackedLinear(nn.Module):
    """An nn.Linear's weight and bias (the same Parameters: a tied weight stays tied) with a packed copy of the
    weight for the row count of the last steady batch. Inference only: with autograd on, or for a tensor that is
    not float32 on the CPU (autocast), it is F.linear."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self._last_rows = 0
        # (rows, weight version, packed weight): one attribute, read and replaced whole, so that a thread reading
        # it never pairs one row count with another's packing
        self._packed: tuple[int, int, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # under torch.compile ([decode] compile): F.linear, which the compiler lowers to its own GEMM. The packing's
        # op cannot be traced (dynamo would drop the whole step back to eager), and its row-count bookkeeping would
        # recompile the step at every new batch size
        if torch.is_grad_enabled() or x.dtype != torch.float32 or x.device.type != "cpu" \
                or self.weight.dtype != torch.float32 or _compiling():
            return F.linear(x, self.weight, self.bias)
        rows = x.numel() // self.in_features
        packed = self._packed
        version = self.weight._version  # an in-place change of the weights makes the packed copy stale
        if packed is None or packed[0] != rows or packed[1] != version:
            steady = rows == self._last_rows
            self._last_rows = rows
            if not steady:
                return F.linear(x, self.weight, self.bias)
            packed = (rows, version, torch.ops.mkl._mkl_reorder_linear_weight(self.weight.detach(), rows))
            self._packed = packed
        return torch.ops.mkl._mkl_linear(x, packed[2], self.weight, self.bias, packed[0])

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linear_layers(model: nn.Module) -> int:
    """Replace every nn.Linear in model (in place) by a PackedLinear over the same Parameters; returns how many.
    Nothing is replaced where MKL's packed GEMM is not available."""
    if not mkl_packing():
        return 0
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:  # not subclasses (quantized or otherwise specialised layers)
                setattr(parent, name, PackedLinear(child))
                count += 1
    return count
