"""Stopping training on request: Ctrl-C (SIGINT), SIGTERM (sent by schedulers, `timeout`, `docker stop`,
systemd) and SIGUSR1 (SLURM's `--signal=USR1@90`, sent ahead of a time limit) ask the trainer to finish its step
and save it; work that can be dropped without losing a step (validation, the final average) is abandoned at once;
a second signal stops at once. Preparing the training data, which keeps nothing until it is done, stops at once
(stop_while_preparing)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from seqxduce.errors import TrainingStopped

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class Abandoned(BaseException):
    """Raised by the signal handler inside StopRequest.abandonable(): the work there is dropped, not finished.
    A BaseException, as KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


class StopRequest:
    """The signal that asked training to stop, if any; the training loop reads it between steps."""

    def __init__(self) -> None:
        self.signal = 0
        self._abandonable = False

    @property
    def requested(self) -> bool:
        return self.signal != 0

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process a signal ended."""
        return 128 + (self.signal or int(signal.SIGINT))

    @contextlib.contextmanager
    def abandonable(self) -> Iterator[None]:
        """A stretch of work (validation, averaging) that a signal interrupts where it is, raising Abandoned: it
        changes no training state, so dropping it loses nothing, and it may run for minutes. A signal that came
        before raises at once."""
        if self.requested:
            raise Abandoned
        self._abandonable = True
        try:
            yield
        finally:
            self._abandonable = False


def signal_name(number: int) -> str:
    return "Ctrl-C" if number == signal.SIGINT else signal.Signals(number).name


def _say(message: str) -> None:
    # a handler runs between any two bytecodes of the main thread, even inside a lazy import rich makes while
    # printing: it writes with os.write, which touches no Python-level state
    with contextlib.suppress(OSError):
        os.write(sys.stderr.fileno(), message.encode())


@contextlib.contextmanager
def _handled(handler: Callable[[int, object], None]) -> Iterator[None]:
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
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """While training, a first signal only sets request.signal, because stopping inside an optimizer step would
    save the parameters of one step with the data position and RNG state of another (inside
    request.abandonable() it raises Abandoned); a second one raises KeyboardInterrupt."""

    def handler(signum: int, frame: object) -> None:
        if request.requested:
            raise KeyboardInterrupt
        request.signal = signum
        if request._abandonable:
            request._abandonable = False  # raised once: the code that catches it must not be interrupted again
            _say(f"{signal_name(signum)}: stopping now (a second signal stops at once)\n")
            raise Abandoned
        _say(f"{signal_name(signum)}: stopping after this step to save it (a second signal stops at once)\n")

    with _handled(handler):
        yield request


class Interrupted(BaseException):
    """Raised by stop_while_preparing's handler where the signal arrives (a BaseException: no `except Exception`
    on the way swallows it, and every `with` on the way cleans up)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_PREPARING: list[int] = []  # the signal that came while preparing (stop_while_preparing), if any


@contextlib.contextmanager
def stop_while_preparing(what: str) -> Iterator[None]:
    """Work that keeps nothing until it finishes and may take many minutes (the tokenizer's training, encoding a
    corpus): a signal stops it where it is, the work folders are removed on the way out (training.binarized's
    writer, the tokenizer's temporary folder, the encoding's workers), and the command ends in one line with 128 +
    the signal's number. Where Python drops what a handler raises (inside an at-fork hook, a library's callback),
    the next preparing_stopped() check raises it again; inside a library's own loop (sentencepiece training its
    model) the stop comes when that returns."""

    def handler(signum: int, frame: object) -> None:
        _PREPARING.append(signum)
        raise Interrupted(signum)

    try:
        with _handled(handler):
            yield
    except Interrupted as stop:
        raise TrainingStopped(f"{signal_name(stop.signum)}: stopped while {what}; nothing of it was kept (its "
                              "work folders were removed), so the next run prepares it anew",
                              exit_code=128 + stop.signum) from None
    finally:
        came = list(_PREPARING)
        _PREPARING.clear()
    if came:  # its raise was dropped and no check came after it: the work is done and kept, the stop stands
        raise TrainingStopped(f"{signal_name(came[0])}: stopped after {what} (done and kept for the next run)",
                              exit_code=128 + came[0])


def preparing_stopped() -> None:
    """Raise Interrupted if a signal came while preparing (its own raise may have been dropped)."""
    if _PREPARING:
        raise Interrupted(_PREPARING[0])


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals (delivered when this ends): around a fork, whose at-fork hooks drop what a handler
    raises (with a printed traceback) and whose children start with the parent's handlers."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def worker_defaults() -> None:
    """A forked worker's signals (a Pool initializer): Ctrl-C, which reaches every process of the terminal, is
    left to the parent, which stops the pool; SIGTERM and SIGUSR1 end the worker quietly (the parent's handler,
    copied by the fork, would raise in it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for number in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # forked inside signals_held()
