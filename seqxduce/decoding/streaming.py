"""Decoding a corpus of any length in bounded memory: the input is read in buffers of many batches, each buffer
is sorted by length and batched inside the work function, and its outputs are written in input order before the
next buffers are read (CTranslate2's translate_file with its read_batch_size and fairseq-interactive's
--buffer-size work so; here the buffers are also the unit that a resumed job restarts at and that processes
share).

Read in this order: BufferGrid (where buffers start: fixed from the first line, so that a resumed or sharded job
batches every source exactly as one uninterrupted process does), read_buffers (an input iterator cut into
buffers, never read ahead of the buffer in hand), the three ways buffers become Pieces (InProcess; ProcessPool:
several single-thread processes on one machine; TorchrunRanks: the processes torchrun started, on one node or several),
and stream(), the loop that writes pieces to a sink and stops on a signal.

The work function (a BufferJob's `processor()`: decode or score one buffer) is the engine's; this module knows
no engine, model or output format.
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from seqxduce.api import UserError
from seqxduce.stopping import Abandoned, StopRequest, signals_held, worker_defaults

DEFAULT_BUFFER = 8192  # sources per buffer once grown: a few MB of text and outputs, 128 batches of 64
FIRST_BUFFER = 256  # the first buffer's size: an output on disk within seconds, whatever the input's length


@dataclass(frozen=True)
class BufferGrid:
    """Where the buffers start: sizes first, 2 first, 4 first, ... up to `size`, then `size` each. The grid
    depends on nothing but these two numbers, so that a job resumed at a buffer's start, or split among
    processes, batches every source as one uninterrupted process does (the same batches, so the same bits)."""

    size: int = DEFAULT_BUFFER
    first: int = FIRST_BUFFER

    def __post_init__(self) -> None:
        if self.size < 1:
            raise UserError(f"--buffer-size {self.size}: give at least 1 source per buffer")

    def spans(self) -> Iterator[tuple[int, int]]:
        """(start, length) of every buffer, from the input's first line on, without end."""
        start, length = 0, min(self.first, self.size)
        while True:
            yield start, length
            start += length
            length = min(length * 2, self.size)

    def is_start(self, position: int) -> bool:
        """Whether a buffer starts at `position` (where a resumed job may continue)."""
        for start, _ in self.spans():
            if start >= position:
                return start == position
        return False  # pragma: no cover (spans never ends)


@dataclass
class Buffer:
    """Consecutive items of the input: the first one's 0-based position, and the items."""

    start: int
    items: list


@dataclass
class Piece:
    """What a buffer gave: per output stream (the output, alignments, ...) its lines in input order; `kept`, per
    item, what the caller keeps besides (a split's postprocessed outputs, for its metric); `count` items."""

    start: int
    count: int
    lines: dict[str, list[str]] = field(default_factory=dict)
    kept: list = field(default_factory=list)


Processor = Callable[[Buffer], Piece]


class BufferJob(Protocol):
    """A job that processes buffers, picklable so that other processes can build their own processor from it
    (a run's path and settings, not a loaded model)."""

    def processor(self) -> Processor: ...


def read_buffers(items: Iterable, grid: BufferGrid, skip: int = 0) -> Iterator[Buffer]:
    """The input cut into the grid's buffers, from position `skip` on (a buffer's start; the items before it
    are read and dropped, not kept). An item is taken from `items` only when its buffer is asked for."""
    iterator = iter(items)
    for start, length in grid.spans():
        if start + length <= skip:
            for _ in itertools.islice(iterator, length):
                pass
            continue
        chunk = list(itertools.islice(iterator, length))
        if not chunk:
            return
        yield Buffer(start, chunk)
        if len(chunk) < length:
            return


def _release_freed_memory() -> None:
    """Hand the heap's freed pages back to the system after a buffer: glibc's malloc keeps them otherwise, and a
    long decode's resident memory then creeps up with the input (about 20 MB per 100,000 short lines measured
    without this, bench/decode_scale.py), where it should stay flat."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        pass


class Stopped(Exception):
    """The job stopped on a signal; the pieces before it were written."""

    def __init__(self, exit_code: int):
        super().__init__(exit_code)
        self.exit_code = exit_code


class InProcess:
    """Buffers processed one after the other in this process."""

    def __init__(self, process: Processor):
        self.process = process

    def pieces(self, buffers: Iterator[Buffer], request: StopRequest) -> Iterator[Piece]:
        while True:
            try:
                # a buffer not yet written is dropped, not finished; its reading too (stdin may wait for lines)
                with request.abandonable():
                    buffer = next(buffers, None)
                    if buffer is None:
                        return
                    piece = self.process(buffer)
            except Abandoned:
                raise Stopped(request.exit_code) from None
            _release_freed_memory()
            yield piece


_WORKER: dict[str, Processor] = {}  # a pool worker's processor, built once by its initializer


def _start_worker(job: BufferJob, threads: int) -> None:
    worker_defaults()
    import torch

    torch.set_num_threads(threads)
    _WORKER["process"] = job.processor()


def _work(buffer: Buffer) -> Piece:
    piece = _WORKER["process"](buffer)
    _release_freed_memory()
    return piece


class ProcessPool:
    """Buffers spread over `processes` worker processes of `threads` threads each on this machine, pieces
    yielded in input order. At most two buffers per worker are read ahead, so memory stays bounded. Workers
    start fresh interpreters (spawn: a fork after torch has run its thread pool can hang) and each loads the
    job's model itself. A signal stops the parent, which ends the workers; their unwritten buffers are dropped."""

    def __init__(self, job: BufferJob, processes: int, threads: int = 1):
        self.job, self.processes, self.threads = job, processes, threads

    def pieces(self, buffers: Iterator[Buffer], request: StopRequest) -> Iterator[Piece]:
        from concurrent.futures import Future, ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(self.processes, mp_context=context, initializer=_start_worker,
                                   initargs=(self.job, self.threads))
        pending: deque[Future] = deque()
        try:
            with signals_held():  # workers inherit the mask: no signal reaches them before their own handlers
                for buffer in itertools.islice(buffers, 2 * self.processes):
                    pending.append(pool.submit(_work, buffer))
            while pending:
                try:
                    with request.abandonable():
                        piece = pending[0].result()
                except Abandoned:
                    raise Stopped(request.exit_code) from None
                except BrokenProcessPool:
                    raise UserError("a decoding worker process died (killed, or out of memory); what was written "
                                    "before it is kept: run the same command with --resume to continue") from None
                pending.popleft()
                following = next(buffers, None)
                if following is not None:
                    pending.append(pool.submit(_work, following))
                yield piece
        finally:
            for future in pending:
                future.cancel()
            for child in multiprocessing.active_children():  # the pool's workers: their buffers are dropped
                child.terminate()
            pool.shutdown(wait=True, cancel_futures=True)


class TorchrunRanks:
    """Buffers spread over the processes torchrun started (one node or several): in each round of `world`
    buffers, rank r processes the round's r-th; the pieces are gathered to every rank (torch.distributed's
    all_gather_object, over gloo), and every rank yields them in input order, so that all agree on where the
    job is and where it stops (a signal on any rank stops every rank after that round)."""

    def __init__(self, process: Processor, rank: int, world: int, group: Any = None):
        self.process, self.rank, self.world, self.group = process, rank, world, group

    def pieces(self, buffers: Iterator[Buffer], request: StopRequest) -> Iterator[Piece]:
        import torch.distributed as dist

        while True:
            round_ = list(itertools.islice(buffers, self.world))  # every rank reads the input; each keeps a round
            if not round_:
                return
            mine = round_[self.rank] if self.rank < len(round_) else None
            piece, problem = None, None
            if mine is not None:
                try:
                    with request.abandonable():
                        piece = self.process(mine)
                except Abandoned:
                    pass
                except UserError as err:  # every rank must hear of it, or the others wait on the gather forever
                    problem = str(err)
                _release_freed_memory()
            gathered: list = [None] * self.world
            dist.all_gather_object(gathered, (piece, request.requested, problem), group=self.group)
            for _, _, said in gathered:
                if said is not None:
                    raise UserError(said)
            stop = any(asked for _, asked, _ in gathered)
            for k in range(len(round_)):
                if gathered[k][0] is None:  # dropped on a signal: nothing after it may be written either
                    break
                yield gathered[k][0]
            if stop:
                raise Stopped(request.exit_code or 143)


class Sink(Protocol):
    """Where pieces go, in input order: files (resumable) or stdout."""

    def write(self, piece: Piece) -> None: ...


def stream(runner: InProcess | ProcessPool | TorchrunRanks, buffers: Iterator[Buffer], sink: Sink | None,
           request: StopRequest, on_piece: Callable[[Piece], None] | None = None) -> int:
    """Write every piece the runner makes of the buffers to the sink (None: a rank that does not write), calling
    on_piece after each; the number of items done. Raises Stopped on a signal, after the pieces done were
    written."""
    done = 0
    for piece in runner.pieces(buffers, request):
        if sink is not None:
            sink.write(piece)
        done += piece.count
        if on_piece is not None:
            on_piece(piece)
    return done


def processes_for(asked: int | None, lines: int | None, on_cpu: bool, under_torchrun: bool,
                  auto_from: int) -> int:
    """How many worker processes decode: the number asked for, else (auto) one per usable CPU when decoding on
    the CPU an input known to hold at least `auto_from` lines outside torchrun, else 1 (this process)."""
    if asked is not None:
        return asked
    if not on_cpu or under_torchrun or lines is None or lines < auto_from:
        return 1
    from seqxduce.cpus import usable_cpus

    return usable_cpus()
