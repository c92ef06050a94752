"""Data parallelism through torch.distributed: set up from torchrun's environment, or a world of one."""

from __future__ import annotations

import contextlib
import datetime
import re
from dataclasses import dataclass

import torch
import torch.distributed as dist

from seqxduce import torchrun
from seqxduce.api import UserError
from seqxduce.device import device_for


@dataclass
class World:
    """This process's place in the world; with world_size 1 every collective is a no-op."""

    rank: int = 0
    world_size: int = 1
    device: torch.device | None = None
    owns_group: bool = False
    # with NCCL, a gloo group for small host-side figures (stop flags): reducing a CPU tensor over NCCL would copy
    # it to the GPU and back, waiting on every kernel queued before it
    host_group: object | None = None

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum a small tensor over all ranks; the result stays where the tensor is (CPU or device)."""
        return self._all_reduce(tensor, dist.ReduceOp.SUM if self.world_size > 1 else None)

    def all_reduce_max(self, tensor: torch.Tensor) -> torch.Tensor:
        """Elementwise maximum of a small tensor over all ranks; the result stays where the tensor is."""
        return self._all_reduce(tensor, dist.ReduceOp.MAX if self.world_size > 1 else None)

    def _all_reduce(self, tensor: torch.Tensor, op) -> torch.Tensor:
        if self.world_size == 1:
            return tensor
        # a device tensor is reduced on the device, queued behind the step's kernels: the host does not wait
        reduced = tensor.clone()
        dist.all_reduce(reduced, op=op, group=self.host_group if reduced.device.type == "cpu" else None)
        return reduced

    def announce(self, key: str) -> None:
        """Tell the other processes that `key` is done, through the rendezvous store: not a collective, so that
        those waiting for it (polling announced) wait as long as the work takes, past [train] collective_timeout."""
        if self.world_size > 1:
            dist.distributed_c10d._get_default_store().set(key, "1")

    def announced(self, key: str) -> bool:
        """Whether a process announced `key` (at once, without waiting)."""
        return self.world_size > 1 and dist.distributed_c10d._get_default_store().check([key])

    def wrap(self, model: torch.nn.Module, fsdp: bool = False) -> torch.nn.Module:
        """DistributedDataParallel when there is more than one process, else the model itself; with fsdp, the
        model sharded in place by FSDP2's fully_shard."""
        if fsdp:
            return self._shard(model)
        if self.world_size == 1:
            return model
        ids = [self.device.index] if self.device is not None and self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def require_shards(self) -> None:
        """A UserError unless there are several processes to shard a model over (FSDP)."""
        if self.world_size == 1:
            raise UserError("[train] fsdp = true shards the model over several processes; start the run with "
                            "torchrun --nproc_per_node N (N > 1), or set fsdp = false")

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        self.require_shards()
        mesh = init_device_mesh(self.device.type if self.device is not None else "cpu", (self.world_size,))
        # One unit, the whole model: its parameters are gathered for forward and backward, while gradients and
        # Adam's state (3 of the 4 copies training keeps) stay sharded. Units per layer would gather one layer at
        # a time, but only for a model that reaches a layer's parameters solely through that layer's forward
        # (the Transformer plugin calls cross_attn.project_kv from outside it).
        fully_shard(model, mesh=mesh)
        return model

    def no_sync(self, wrapped: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce (DDP) or reduce-scatter (FSDP) on all but the last accumulated batch."""
        if self.world_size == 1:
            return contextlib.nullcontext()
        if hasattr(wrapped, "set_requires_gradient_sync"):  # FSDP2: a switch rather than a context
            wrapped.set_requires_gradient_sync(sync)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if sync else wrapped.no_sync()

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def setup(device_setting: str, timeout: float = 600.0) -> World:
    """Join the process group torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK); a
    collective operation that waits longer than timeout seconds for another process fails instead of hanging."""
    world_size = torchrun.world_size()
    if world_size == 1:
        return World()
    rank, local_rank = torchrun.rank(), torchrun.local_rank()
    # the rank's own GPU, cuda:LOCAL_RANK, chosen as decoding chooses it
    chosen = device_for(device_setting, torch.cuda.is_available(),
                        torch.cuda.device_count() if device_setting != "cpu" else 0, local_rank)
    if chosen.startswith("cuda"):
        device = torch.device(chosen)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    owns = not dist.is_initialized()
    if owns:
        _join(backend, timeout)
    host_group = None
    if dist.get_backend() == "nccl":
        host_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
    return World(rank=rank, world_size=world_size, device=device, owns_group=owns, host_group=host_group)


def _join(backend: str, timeout: float) -> None:
    """init_process_group through a store of this torchrun attempt's own (seqxduce.torchrun: a restart needs no
    extra setting)."""
    torchrun.join_process_group(backend, datetime.timedelta(seconds=timeout))


def is_collective_failure(err: BaseException) -> bool:
    """Whether an exception comes from the communication backend (another process died or stopped answering)
    rather than from the model: gloo and NCCL raise plain RuntimeErrors that name themselves."""
    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    return isinstance(err, RuntimeError) and bool(re.search(r"gloo|NCCL|ProcessGroup|c10d", str(err)))


def failure_text(err: BaseException) -> str:
    """The backend's own words, without its source location and advice: 'Connection reset by peer'."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(err).strip().splitlines()[0] if str(err).strip() else repr(err))
    return text.split(". ")[0].rstrip(".")
