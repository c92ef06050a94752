"""Dynamic batching: requests put their sources in one bounded queue; a worker thread takes batches of sources
that share decode settings, up to a token budget, waiting a few milliseconds after the first for more, decodes
them with the function it was given, and hands each request its outputs in its own order.

Batches start fairly between clients (a request's client is its address): each batch starts with the oldest source
of the client served least recently, and a client with nothing queued counts as never served, so one client's
backlog delays that client alone, and a client that waits for each answer before it asks again goes first.

One thread owns the model, so the event loop stays free (`/health` answers during a long batch) and the model
never runs two batches at once. torch and starlette are not imported here: the decode function is passed in, with
a stop check it gives the search (true once every request of the batch has gone or passed its deadline, or the
server is stopping), so that a batch nobody waits for ends at its next step.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

StopCheck = Callable[[], bool]
# (sources, settings key, stop check) -> an output or error each
Decode = Callable[[Sequence[str], Hashable, StopCheck], Sequence[Any]]


class QueueFull(Exception):
    """The queue holds as many sources as it may: the client should retry later."""


class Dropped(Exception):
    """The server is stopping: a queued request is not decoded, a running batch ends at its next step."""


@dataclass(eq=False)
class _Job:
    """One request's sources (or one exclusive call), and where its answer goes."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    key: Hashable = None
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    call: Callable[[StopCheck], Any] | None = None
    cancelled: bool = False  # its client went away or its deadline passed: its outputs are not wanted
    started: bool = False  # some of it was taken into a batch (a deadline then answers 504, not 503)
    arrived: float = 0.0
    client: Hashable = None  # who asked (its address): batches start fairly between clients


@dataclass(eq=False)
class _Entry:
    job: _Job
    index: int
    source: str
    tokens: int
    arrived: float


@dataclass
class Counters:
    """What the worker has done, for /health."""

    batches: int = 0
    decoding: int = 0  # sources in the batch being decoded now
    decoded: int = 0  # sources decoded
    dropped: int = 0  # sources taken out of the queue because their client went away or their deadline passed
    abandoned: int = 0  # sources of batches stopped before their end (nobody waited, or the server stopped)


def _job_of(entry: _Entry | _Job) -> _Job:
    return entry.job if isinstance(entry, _Entry) else entry


class Batcher:
    """The queue and its worker thread; submit() and call() from the event loop; abort() answers what waits and
    stops the running batch, stop() ends the worker thread."""

    def __init__(self, decode: Decode, max_queue: int, max_batch_tokens: int, max_batch_sources: int,
                 max_wait_s: float, delay_s: float = 0.0):
        self.decode = decode
        self.max_queue = max_queue
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_sources = max_batch_sources
        self.max_wait_s = max_wait_s
        self.delay_s = delay_s  # a pause before each batch: how the tests make a batch slow
        self.queue: deque[_Entry | _Job] = deque()
        self.cond = threading.Condition()
        self.stopping = False
        self.aborting = False  # a plain flag: a signal handler sets it (request_abort), the worker reads it
        self.wake = threading.Event()  # ends the tests' pause before a batch early when aborting
        self.counters = Counters()
        self.rounds = 0  # batches started
        self.last_served: dict[Hashable, int] = {}  # queued clients served before: the round they last were
        self.running_since: float | None = None  # when the batch (or call) now decoding started
        self.thread = threading.Thread(target=self._work, name="seqxduce-serve-batcher", daemon=True)

    def start(self) -> None:
        """Start the worker thread."""
        self.thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Decode what is queued (nothing after abort()), then end the worker thread (waiting at most timeout)."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join(timeout)

    def request_abort(self) -> None:
        """Make the running batch stop at its next step; safe in a signal handler (no lock of the queue's)."""
        self.aborting = True
        self.wake.set()

    def abort(self) -> int:
        """Stop at once: queued requests fail with Dropped (their clients get 503), the running batch ends at
        its next step, nothing more is accepted. Returns how many sources were waiting."""
        self.request_abort()
        with self.cond:
            self.stopping = True
            waiting = list(self.queue)
            self.queue.clear()
            self.cond.notify_all()
        jobs = {id(job): job for job in map(_job_of, waiting)}
        for job in jobs.values():
            job.cancelled = True
            self._finish(job, error=Dropped("the server is stopping"))
        return len(waiting)

    def queued(self) -> int:
        """Sources waiting (exclusive calls count one each)."""
        with self.cond:
            return len(self.queue)

    def oldest_wait(self) -> float:
        """Seconds the oldest queued source (or call) has waited; 0 with an empty queue."""
        with self.cond:
            if not self.queue:
                return 0.0
            first = self.queue[0]
            return time.monotonic() - first.arrived

    def new_client_wait(self) -> float:
        """Seconds a request of a client with nothing queued has to wait, as far as is known now: it goes next
        (fairness), after the running batch and the clients not served yet that came before it, so the longer of
        the running batch's time so far and the wait of those clients' oldest sources (GET /ready)."""
        with self.cond:
            now = time.monotonic()
            waits = [now - self.running_since] if self.running_since is not None else []
            seen: set[Hashable] = set()
            for entry in self.queue:
                job = _job_of(entry)
                if job.client not in seen and job.client not in self.last_served:
                    waits.append(now - entry.arrived)
                seen.add(job.client)
            return max(waits, default=0.0)

    def submit(self, sources: Sequence[str], tokens: Sequence[int], key: Hashable,
               client: Hashable = None) -> asyncio.Future:
        """Queue one request's sources (tokens: each one's length; client: who asks, for fairness); the future
        gets their outputs in order, or the first error. QueueFull when they do not fit."""
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        job = _Job(loop, loop.create_future(), key, [None] * len(sources), len(sources), arrived=now, client=client)
        with self.cond:
            if self.stopping:
                raise QueueFull("the server is stopping")
            if len(self.queue) + len(sources) > self.max_queue:
                raise QueueFull(f"the queue holds {len(self.queue)} of at most {self.max_queue} sources")
            self.queue.extend(_Entry(job, i, s, n, now) for i, (s, n) in enumerate(zip(sources, tokens)))
            self.cond.notify_all()
        job.future.job = job  # type: ignore[attr-defined]  (cancel() finds the job through its future)
        return job.future

    def call(self, function: Callable[[StopCheck], Any], client: Hashable = None) -> asyncio.Future:
        """Run function(stop check) in the worker thread between batches (it uses the model too); QueueFull and
        client as submit."""
        loop = asyncio.get_running_loop()
        job = _Job(loop, loop.create_future(), call=function, arrived=time.monotonic(), client=client)
        with self.cond:
            if self.stopping or len(self.queue) + 1 > self.max_queue:
                raise QueueFull(f"the queue holds {len(self.queue)} of at most {self.max_queue} sources")
            self.queue.append(job)
            self.cond.notify_all()
        job.future.job = job  # type: ignore[attr-defined]
        return job.future

    def cancel(self, future: asyncio.Future) -> None:
        """Drop a request whose client went away: its queued sources leave the queue, later outputs are ignored."""
        job: _Job = future.job  # type: ignore[attr-defined]
        with self.cond:
            job.cancelled = True
            before = len(self.queue)
            self.queue = deque(e for e in self.queue if _job_of(e) is not job)
            self.counters.dropped += before - len(self.queue)
        if not future.done():
            future.cancel()

    def _work(self) -> None:
        while True:
            with self.cond:
                batch = self._next_batch()
                if batch is None:
                    return
            self.counters.decoding = 1 if isinstance(batch, _Job) else len(batch)
            self.running_since = time.monotonic()
            if isinstance(batch, _Job):
                self._run_call(batch)
            else:
                self._run_batch(batch)
            self._decoded()

    def _decoded(self) -> None:
        """The batch (or call) under way has ended: said before its answers are handed out, so that a client that
        has its answer never finds its batch still running (GET /ready, /health)."""
        self.running_since = None
        self.counters.decoding = 0

    def _next_batch(self) -> list[_Entry] | _Job | None:
        """Under the lock: wait for work, then for a full batch or the first source's deadline; None to end."""
        while True:
            while not self.queue and not self.stopping:
                self.cond.wait()
            if not self.queue or self.aborting:
                return None
            first = self._next_entry()
            if isinstance(first, _Job):
                first.started = True
                self.queue.remove(first)
                self._served([first])
                return first
            deadline = first.arrived + self.max_wait_s
            while not self.stopping and self.queue and self._next_entry() is first and not self._fits(first)[1]:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            if self.aborting:
                return None
            if self.queue and self._next_entry() is first:  # else its request was cancelled meanwhile: look again
                taken = self._take(first)
                if taken:  # none when the first belonged to a request that has failed: look again
                    for entry in taken:
                        entry.job.started = True
                    self._served([entry.job for entry in taken])
                    return taken

    def _next_entry(self) -> _Entry | _Job:
        """Under the lock, with a queue: what is served next, the oldest source (or call) of the client served
        least recently; a client not served since it last had nothing queued goes first, the oldest of them."""
        best, best_round = self.queue[0], None
        seen: set[Hashable] = set()
        for entry in self.queue:
            client = _job_of(entry).client
            if client in seen:
                continue
            seen.add(client)
            served = self.last_served.get(client, -1)
            if best_round is None or served < best_round:
                best, best_round = entry, served
        return best

    def _served(self, jobs: Sequence[_Job]) -> None:
        """Under the lock: a batch of these jobs starts. Their clients were served this round; a client with
        nothing queued and nothing in this batch is forgotten (it counts as never served when it asks again)."""
        self.rounds += 1
        for job in jobs:
            self.last_served[job.client] = self.rounds
        kept = {_job_of(entry).client for entry in self.queue} | {job.client for job in jobs}
        self.last_served = {c: r for c, r in self.last_served.items() if c in kept}

    def _fits(self, first: _Entry) -> tuple[list[_Entry], bool]:
        """The entries a batch started by `first` takes (first, then the queued sources of the same settings, oldest
        first, whoever sent them), and whether more would overflow it."""
        taken: list[_Entry] = []
        longest = 0
        for entry in (first, *(e for e in self.queue if e is not first)):
            if isinstance(entry, _Job) or entry.job.key != first.job.key or entry.job.cancelled:
                continue  # an exclusive call runs alone, when its client's turn comes
            grown = max(longest, entry.tokens)
            if taken and (grown * (len(taken) + 1) > self.max_batch_tokens or len(taken) >= self.max_batch_sources):
                return taken, True
            taken.append(entry)
            longest = grown
        return taken, False

    def _take(self, first: _Entry) -> list[_Entry]:
        taken, _ = self._fits(first)
        chosen = set(map(id, taken))
        # the sources of a request that failed in an earlier batch leave with them, undecoded
        self.queue = deque(e for e in self.queue if id(e) not in chosen
                           and not (isinstance(e, _Entry) and e.job.cancelled))
        return taken

    def _run_batch(self, batch: list[_Entry]) -> None:
        def unwanted() -> bool:  # read between search steps: a few attribute reads per request of the batch
            return self.aborting or all(entry.job.cancelled for entry in batch)

        try:
            self._pause(unwanted)
            if unwanted():
                raise Dropped("nobody waits for this batch")
            outputs: Sequence[Any] = self.decode([e.source for e in batch], batch[0].job.key, unwanted)
        except Exception as err:  # noqa: BLE001 - the requests get the error; the worker goes on
            failure: Exception = err
            if unwanted():  # the search stopped as asked (or failed when nobody wanted it any more)
                self.counters.abandoned += len(batch)
                failure = Dropped("the server is stopping")
            outputs = [failure] * len(batch)
        self._decoded()
        self.counters.batches += 1
        self.counters.decoded += 0 if isinstance(outputs[0], Dropped) else len(batch)
        for entry, output in zip(batch, outputs):
            job = entry.job
            if job.cancelled:
                continue
            if isinstance(output, Exception):
                job.cancelled = True  # its other sources need not be decoded any more
                self._finish(job, error=output)
                continue
            job.results[entry.index] = output
            job.remaining -= 1
            if job.remaining == 0:
                self._finish(job, result=job.results)

    def _run_call(self, job: _Job) -> None:
        if job.cancelled:
            return
        assert job.call is not None

        def unwanted() -> bool:
            return self.aborting or job.cancelled

        try:
            self._pause(unwanted)
            if unwanted():
                raise Dropped("nobody waits for this call")
            result = job.call(unwanted)
        except Exception as err:  # noqa: BLE001 - as in _run_batch
            self._decoded()
            self._finish(job, error=Dropped("the server is stopping") if unwanted() else err)
            return
        self._decoded()
        self._finish(job, result=result)

    def _pause(self, unwanted: StopCheck) -> None:
        """The tests' slow batch (delay_s): a step that a deadline cannot cut short, only the server stopping."""
        if self.delay_s:
            self.wake.wait(self.delay_s)

    @staticmethod
    def _finish(job: _Job, result: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if job.future.done():
                return
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)

        try:
            job.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the event loop has closed: nobody is waiting any more
            pass
