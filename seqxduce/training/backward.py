"""A backward that a stop signal can cut on the CPU.

On the CPU, PyTorch's autograd engine runs a backward on the calling thread as one call into C++, and Python runs a
signal's handler only between two bytecodes of the main thread: a stop signal that lands in a backward of minutes
(the base model's step on a CPU) would wait for its end, past any grace. An identity hook on every tensor the
forward saves for the backward makes the engine call back into Python between the backward's operations; there
the stop handler runs, and inside stopping.StopRequest.abandonable() it raises Abandoned, which leaves the
backward as it came (the step is dropped; nothing kept has changed). The hooks cost a Python call per saved
tensor, nothing beside a step of seconds.

On a GPU the engine runs the backward on a thread of its own, which a handler never reaches: nothing is added.
A compiled model is left as it is too (torch.compile traces the forward, hooks and all).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


@contextlib.contextmanager
def cuttable_backward(device: torch.device, compiled: bool) -> Iterator[None]:
    """Around a forward (and its backward, the hooks are read then too): on the CPU, a backward that a stop
    signal's handler can interrupt between its operations."""
    if device.type != "cpu" or compiled:
        yield
        return
    with torch.autograd.graph.saved_tensors_hooks(_same, _same):
        yield
