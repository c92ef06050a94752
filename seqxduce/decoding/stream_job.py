"""One streamed job from start to end (`decode` and `score` on an input of any length): where it starts (a new
output, or the record of a stopped one), who does the buffers (this process, a pool of worker processes, or the
ranks torchrun started), progress on the terminal or in the log, a signal's stop, and the files made final.

Under torchrun every rank reads the input and decodes its share of the buffers (streaming.TorchrunRanks); rank 0 alone
writes the outputs, in input order, equal to what one process writes; the ranks talk over gloo, whatever the
device, since they exchange only text.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from seqxduce.api import UserError
from seqxduce.console import PairsProgress
from seqxduce.decoding.stream_files import OutputFiles, StdoutLines, partial_path
from seqxduce.decoding.streaming import (
    BufferGrid,
    BufferJob,
    InProcess,
    Piece,
    Processor,
    ProcessPool,
    Sink,
    Stopped,
    TorchrunRanks,
    read_buffers,
    stream,
)
from seqxduce.errors import TrainingStopped
from seqxduce.stopping import Abandoned, StopRequest, signal_name, stop_on_signals
from seqxduce.torchrun import join_process_group, world_size


@dataclass
class JobResult:
    """How a streamed job ended: input items done in all (a resumed job's earlier ones included), those done by
    this process's job, what the pieces kept (Piece.kept, earlier ones included; on rank 0), the seconds it
    took, and whether the output was complete already (nothing was done)."""

    done: int = 0
    new: int = 0
    kept: list = field(default_factory=list)
    seconds: float = 0.0
    complete_already: bool = False
    writer: bool = True  # this process wrote the outputs (every process, or rank 0 under torchrun)
    late_signal: int = 0  # a signal that came after the last piece was written (the job ended complete)


@dataclass
class Plan:
    """How the job runs: the buffers' grid, worker processes (1: this one) and their threads, and the resume
    flag; `what` names the job in progress lines and messages, `continued_by` the command a stop's line says
    continues it."""

    grid: BufferGrid = field(default_factory=BufferGrid)
    processes: int = 1
    threads: int = 1
    resume: bool = False
    what: str = "decode"
    continued_by: str = "the same command with --resume"


def under_torchrun() -> bool:
    return world_size() > 1


class _Both:
    """Pieces to stdout and to files (the output on stdout, --alignments or --annotations in files)."""

    def __init__(self, *sinks: Sink):
        self.sinks = sinks

    def write(self, piece: Piece) -> None:
        for sink in self.sinks:
            sink.write(piece)


def run_job(job: BufferJob, items: Iterable, total: int | None, files: OutputFiles | None, to_stdout: bool,
            plan: Plan, process: Processor | None = None,
            on_piece: Callable[[Piece], None] | None = None) -> JobResult:
    """Run `job` over the input `items` (total: their number when known, for the progress's ETA): pieces to
    stdout (the main stream) and/or to `files`; process: this process's processor when it has the run loaded
    already (else the job loads it where the buffers are done). Raises TrainingStopped on a signal after
    writing every piece done, saying how to continue.

    A signal at any moment of the job leaves files that the same command with --resume continues: while the files
    open and the workers start it stops at once (a record of 0 lines, or of a stopped job's, is all there is);
    between buffers after the piece in hand is written; after the last piece, while the workers end and the files
    take their final names, it stops nothing: the job ends complete, and JobResult.late_signal says it came."""
    started = time.perf_counter()
    rank, world, group, owned = _join_ranks()
    request = StopRequest()
    try:
        # under torchrun every rank gets the signal (the launcher forwards it): rank 0 alone says so
        with stop_on_signals(request, "the buffer under way is written", notice=rank == 0):
            # nothing is done yet: a stop here loses nothing (not under torchrun, where a rank abandoning the
            # broadcast of the start would leave the others waiting in it: the ranks stop after their first round)
            startup = request.abandonable() if world == 1 else contextlib.nullcontext()
            try:
                with startup:
                    start = _start_position(files, plan, rank, world, group)
                    if start is None:
                        return JobResult(complete_already=True, writer=rank == 0)
                    if not plan.grid.is_start(start):
                        return _ended_at(start, items, files, plan, rank)
                    runner = _runner(job, process, plan, rank, world, group)
            except Abandoned:
                before = JobResult(done=files.done if files is not None else 0)
                raise TrainingStopped(_stopped_message(plan, request, before, total, files, to_stdout),
                                      exit_code=request.exit_code) from None
            result = JobResult(done=start, kept=list(files.kept) if files is not None and rank == 0 else [],
                               writer=rank == 0)
            sink = _sink(files, to_stdout) if rank == 0 else None

            def count(piece: Piece) -> None:
                result.done += piece.count
                result.new += piece.count
                result.kept.extend(piece.kept)
                progress.advance(piece.count)
                if on_piece is not None:
                    on_piece(piece)

            with PairsProgress(plan.what, total, enabled=rank == 0, unit="lines", start=start) as progress:
                try:
                    stream(runner, read_buffers(items, plan.grid, skip=start), sink, request, on_piece=count)
                except Stopped as stop:
                    said = _stopped_message(plan, request, result, total, files, to_stdout) if rank == 0 else ""
                    raise TrainingStopped(said, exit_code=stop.exit_code) from None
            if files is not None and rank == 0:
                files.finish()  # a signal now only sets request.signal: the files must all take their names
            result.late_signal = request.signal
        result.seconds = time.perf_counter() - started
        return result
    finally:
        if files is not None:
            files.close()
        if owned:
            import torch.distributed as dist

            dist.destroy_process_group()


def _ended_at(start: int, items: Iterable, files: OutputFiles | None, plan: Plan, rank: int) -> JobResult:
    """A resume at a position no buffer starts at: the job was stopped after writing its last, short buffer and
    before its files took their final names. That holds only if the input ends there; then the files are made
    final, else the record belongs to another buffer size."""
    held = sum(1 for _ in itertools.islice(iter(items), start + 1))
    if held != start:
        raise UserError(f"--resume: {start:,} lines are done, which is not where a buffer of --buffer-size "
                        f"{plan.grid.size} starts; resume with the --buffer-size the job began with")
    kept = list(files.kept) if files is not None and rank == 0 else []
    if files is not None and rank == 0:
        files.finish()
    return JobResult(done=start, kept=kept, writer=rank == 0)


def _join_ranks() -> tuple[int, int, Any, bool]:
    """(rank, world size, gloo group, whether this call made the process group) under torchrun; else (0, 1)."""
    if not under_torchrun():
        return 0, 1, None, False
    import torch.distributed as dist

    owned = not dist.is_initialized()
    if owned:
        # torch's default timeout, as before: a rank that waits for another's buffer waits as long as it takes
        join_process_group("gloo", dist.default_pg_timeout)
        group = None
    else:  # a caller's group (e.g. NCCL): the outputs travel over a gloo group of the same ranks
        group = dist.new_group(backend="gloo")
    return dist.get_rank(), dist.get_world_size(), group, owned


def _start_position(files: OutputFiles | None, plan: Plan, rank: int, world: int, group: Any) -> int | None:
    """The input position the job starts at (0, or a stopped job's), None when the output is complete; under
    torchrun rank 0 reads the record and tells the others (or its refusal, which every rank raises)."""
    start: int | None = 0
    problem = None
    if rank == 0 and files is not None:
        try:
            start = files.done if files.open(plan.resume) else None
        except UserError as err:
            problem = str(err)
    if world > 1:
        import torch.distributed as dist

        said = [start, problem]
        dist.broadcast_object_list(said, src=0, group=group)
        start, problem = said
    if problem is not None:
        raise UserError(problem)
    return start


def _runner(job: BufferJob, process: Processor | None, plan: Plan, rank: int, world: int,
            group: Any) -> InProcess | ProcessPool | TorchrunRanks:
    if world > 1:
        return TorchrunRanks(process or job.processor(), rank, world, group)
    if plan.processes > 1:
        return ProcessPool(job, plan.processes, plan.threads)
    return InProcess(process or job.processor())


def _sink(files: OutputFiles | None, to_stdout: bool) -> Sink | None:
    if to_stdout and files is not None:
        return _Both(StdoutLines(), files)
    return StdoutLines() if to_stdout else files


def _stopped_message(plan: Plan, request: StopRequest, result: JobResult, total: int | None,
                     files: OutputFiles | None, to_stdout: bool) -> str:
    of = f" of {total:,}" if total is not None else ""
    said = f"{signal_name(request.signal)}: " if request.requested else ""
    if files is None or to_stdout:
        return f"{said}{plan.what} stopped after {result.done:,}{of} lines (written to stdout)"
    return (f"{said}{plan.what} stopped after {result.done:,}{of} lines, kept in {partial_path(files.main)}; run "
            f"{plan.continued_by} to continue")
