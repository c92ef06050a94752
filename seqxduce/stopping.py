"""Stopping long work on request, shared by training and decoding: Ctrl-C (SIGINT), SIGTERM (schedulers,
`timeout`, `docker stop`, systemd) and SIGUSR1 (SLURM's `--signal=USR1@90`). A first signal sets a flag that the
work reads at its next safe point; inside StopRequest.abandonable() it raises Abandoned where it lands, for work
that changes nothing kept (a validation, a decoding buffer not yet written), so that a stop never waits for it."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class Abandoned(BaseException):
    """Raised by the signal handler inside StopRequest.abandonable(): the work there is dropped, not finished.
    A BaseException, as KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


class StopRequest:
    """The signal that asked the work to stop, if any; the work reads it between its steps."""

    def __init__(self) -> None:
        self.signal = 0
        self._abandonable = False
        # the stop's own last work is under way (saving the last step): a further signal waits for it, so that a
        # scheduler's or launcher's second signal, which may come a moment after its first, does not cut it off
        self.finishing = False

    @property
    def requested(self) -> bool:
        return self.signal != 0

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process a signal ended."""
        return 128 + (self.signal or int(signal.SIGINT))

    @contextlib.contextmanager
    def abandonable(self) -> Iterator[None]:
        """A stretch of work that a signal interrupts where it is, raising Abandoned: it changes nothing kept, so
        dropping it loses nothing, and it may run for minutes. A signal that came before raises at once."""
        if self.requested:
            raise Abandoned
        self._abandonable = True
        try:
            yield
        finally:
            self._abandonable = False


def signal_name(number: int) -> str:
    return "Ctrl-C" if number == signal.SIGINT else signal.Signals(number).name


def say(message: str) -> None:
    """Write to stderr from a signal handler."""
    # a handler runs between any two bytecodes of the main thread, even inside a lazy import rich makes while
    # printing: it writes with os.write, which touches no Python-level state
    with contextlib.suppress(OSError):
        os.write(sys.stderr.fileno(), message.encode())


@contextlib.contextmanager
def handled(handler: Callable[[int, object], None]) -> Iterator[None]:
    """handler on the stop signals while this lasts, the handlers before it restored after. Outside the main
    thread signals cannot be handled and keep their defaults."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler_before in previous.items():
            signal.signal(number, handler_before)


@contextlib.contextmanager
def stop_on_signals(request: StopRequest, after: str, notice: bool = True) -> Iterator[StopRequest]:
    """While this lasts, a first signal sets request.signal and says that the work stops `after` (e.g. "this
    step to save it"); inside request.abandonable() it raises Abandoned instead; a second signal raises
    KeyboardInterrupt (unless request.finishing). notice=False: the handler says nothing, for work whose stop
    comes within moments and says itself how it ended (one line)."""

    def handler(signum: int, frame: object) -> None:
        if request.requested:
            if request.finishing:
                return
            raise KeyboardInterrupt
        request.signal = signum
        if request._abandonable:
            request._abandonable = False  # raised once: the code that catches it must not be interrupted again
            if notice:
                say(f"{signal_name(signum)}: stopping now (a second signal stops at once)\n")
            raise Abandoned
        if notice:
            say(f"{signal_name(signum)}: stopping after {after} (a second signal stops at once)\n")

    with handled(handler):
        yield request


class StoppedAtOnce(BaseException):
    """Raised by stop_at_once's handler where the signal lands (a BaseException, as Abandoned)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stop_at_once() -> Iterator[None]:
    """While this lasts, a signal raises StoppedAtOnce where it lands: for the stretches of a command that keep
    nothing of their own (loading a model before a job opens its files, a metric computed from outputs already
    written), so that a signal there ends the command at once with its own line instead of the signal's default
    action (which ends the process with no word and no exit status a script can tell from a crash)."""

    def handler(signum: int, frame: object) -> None:
        raise StoppedAtOnce(signum)

    with handled(handler):
        yield


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals (delivered when this ends): around starting worker processes, which inherit the
    mask and so cannot be interrupted before they set their own handlers (worker_defaults)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def worker_defaults() -> None:
    """A worker process's signals (a pool's initializer): Ctrl-C, which reaches every process of the terminal, is
    left to the parent, which stops the pool; SIGTERM and SIGUSR1 end the worker quietly (a forked parent's
    handler would raise in it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for number in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # started inside signals_held()
