"""What a process started by torchrun knows of its launcher, in one place: its place in the world (RANK,
LOCAL_RANK, WORLD_SIZE: read here and nowhere else), whether it is one of torchrun's workers, the process group
joined through a store of this attempt's own, the launcher watched, and whether OMP_NUM_THREADS=1 was torchrun's
default rather than the user's choice.

- The store: torchrun shares its rendezvous TCPStore with the workers by default (TORCHELASTIC_USE_AGENT_STORE),
  and that store outlives an attempt. A restart's workers then read the addresses the last attempt's processes
  wrote there and cannot connect (pytorch/pytorch#135712). Here rank 0 of each attempt hosts a store of its own
  and publishes its port in the shared one; the others take the published port only once a store answers there,
  and a stale port (the last attempt's rank 0 is gone) refuses the connection. So a plain `torchrun
  --max-restarts N` restarts with no extra setting; with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun gives every
  attempt a store of its own already, and it is used as it is.
- The launcher: workers run in sessions of their own (torchrun starts them with start_new_session), so a launcher
  that is SIGKILLed, or ends on a signal it does not handle (SIGUSR1), leaves them training unattended. A watcher
  thread notices the launcher gone (this process adopted by another) and stops the process as SIGTERM does: the
  last completed step saved, as when the launcher passes SIGTERM on."""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path

# where rank 0 of an attempt publishes its own store's port, in torchrun's shared store
_PORT_KEY = "seqxduce/attempt-store-port"
# how often the watcher looks for its launcher: "within seconds" at the cost of one getppid a half-second
WATCH_INTERVAL_S = 0.5


def rank() -> int:
    """This process's rank in the world (0 outside torchrun)."""
    return int(os.environ.get("RANK", "0") or 0)


def local_rank() -> int:
    """This process's rank on its node (0 outside torchrun)."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def world_size() -> int:
    """The processes of the world (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def is_rank_zero() -> bool:
    """Whether this process speaks and writes for the world: rank 0, or the only process."""
    return rank() == 0


def first_on_node() -> bool:
    """Whether this process is the first of its node (a node's one line, a node's own copy of the data)."""
    return local_rank() == 0


def started_by_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one of torchrun's workers (torchrun names its run in every worker)."""
    environ = os.environ if environ is None else environ
    return "TORCHELASTIC_RUN_ID" in environ and "RANK" in environ


def join_process_group(backend: str, timeout: datetime.timedelta) -> None:
    """init_process_group for this process's RANK and WORLD_SIZE, through a store that no earlier attempt of the
    same torchrun wrote to (the module's docstring says why)."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        # a store of this attempt's own already (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), or a launcher other than
        # torchrun that set MASTER_ADDR and MASTER_PORT: the env:// rendezvous as torch does it
        dist.init_process_group(backend=backend, timeout=timeout)
        return
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = _attempt_store(rank, world_size, timeout)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, timeout=timeout)


def _attempt_store(rank: int, world_size: int, timeout: datetime.timedelta):
    """Rank 0: a new TCPStore on a free port, published in torchrun's shared store. The others: a client of the
    published port once one answers there."""
    from torch.distributed import TCPStore

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    shared = TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    if rank == 0:
        # no wait for the workers here: they learn the port from the shared store once it is set
        own = TCPStore(host, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
        shared.set(_PORT_KEY, str(own.port))
        return own
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        published = int(shared.get(_PORT_KEY))  # waits until some attempt's rank 0 has set it
        try:
            own = TCPStore(host, published, world_size, is_master=False, timeout=datetime.timedelta(seconds=5))
        except (RuntimeError, TimeoutError):
            # the last attempt's port: its rank 0 is gone; this attempt's rank 0 publishes its own shortly
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        own.set_timeout(timeout)
        return own


def watch_launcher(environ: Mapping[str, str] | None = None) -> threading.Thread | None:
    """Under torchrun, a daemon thread that stops this process as SIGTERM does once its launcher is gone; the
    thread, or None outside torchrun."""
    if not started_by_torchrun(environ):
        return None
    launcher = os.getppid()
    watcher = threading.Thread(target=_watch, args=(launcher,), name="seqxduce-launcher-watch", daemon=True)
    watcher.start()
    return watcher


def _watch(launcher: int) -> None:
    from seqxduce.stopping import say

    while os.getppid() == launcher:
        time.sleep(WATCH_INTERVAL_S)
    say(f"torchrun's launcher (process {launcher}) ended and left this process running: it stops as on "
        f"SIGTERM\n")
    # to the main thread, where the stop handlers run: a blocking call there (a sleep, a wait) is interrupted
    # as by a signal from outside
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)


def omp_default_of_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Whether OMP_NUM_THREADS=1 here is torchrun's default, not the user's choice: torchrun sets it for its
    workers when more than one runs on the node and it was not in its own environment. The launcher's environment
    as it was started is read from /proc (a variable torchrun adds to its own os.environ does not appear there);
    unreadable, the variable counts as the user's."""
    environ = os.environ if environ is None else environ
    if not started_by_torchrun(environ) or environ.get("OMP_NUM_THREADS", "").strip() != "1":
        return False
    if int(environ.get("LOCAL_WORLD_SIZE", "1") or 1) <= 1:
        return False
    try:
        started_with = (Path("/proc") / str(os.getppid()) / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return not any(entry.startswith(b"OMP_NUM_THREADS=") for entry in started_with)
