"""Stopping training on request: Ctrl-C (SIGINT), SIGTERM (sent by schedulers, `timeout`, `docker stop`,
systemd) and SIGUSR1 (SLURM's `--signal=USR1@90`, sent ahead of a time limit) ask the trainer to finish its step
and save it; work that can be dropped without losing a step (validation, the final average) is abandoned at once;
a second signal stops at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

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
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """While training, a first signal only sets request.signal, because stopping inside an optimizer step would
    save the parameters of one step with the data position and RNG state of another (inside
    request.abandonable() it raises Abandoned); a second one raises KeyboardInterrupt. Outside the main thread
    signals cannot be handled and keep their defaults."""
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: object) -> None:
        if request.requested:
            raise KeyboardInterrupt
        request.signal = signum
        if request._abandonable:
            request._abandonable = False  # raised once: the code that catches it must not be interrupted again
            _say(f"{signal_name(signum)}: stopping now (a second signal stops at once)\n")
            raise Abandoned
        _say(f"{signal_name(signum)}: stopping after this step to save it (a second signal stops at once)\n")

    previous = {number: signal.signal(number, handler) for number in SIGNALS}
    try:
        yield request
    finally:
        for number, handler_before in previous.items():
            signal.signal(number, handler_before)
