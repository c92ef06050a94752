"""Stopping training on request: Ctrl-C (SIGINT) and SIGTERM (sent by schedulers, `timeout`, `docker stop`,
systemd) ask the trainer to finish its step and save it; a second signal stops at once."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """The signal that asked training to stop, if any; the training loop reads it between steps."""

    def __init__(self) -> None:
        self.signal = 0

    @property
    def requested(self) -> bool:
        return self.signal != 0

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process a signal ended."""
        return 128 + (self.signal or int(signal.SIGINT))


def signal_name(number: int) -> str:
    return "Ctrl-C" if number == signal.SIGINT else signal.Signals(number).name


@contextlib.contextmanager
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """While training, a first SIGINT or SIGTERM only sets request.signal, because stopping inside an optimizer
    step would save the parameters of one step with the data position and RNG state of another; a second one
    raises KeyboardInterrupt. Outside the main thread signals cannot be handled and keep their defaults."""
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame: object) -> None:
        if request.requested:
            raise KeyboardInterrupt
        request.signal = signum
        # a handler runs between any two bytecodes of the main thread, even inside a lazy import rich makes while
        # printing: it writes with os.write, which touches no Python-level state
        message = f"{signal_name(signum)}: stopping after this step to save it (a second signal stops at once)\n"
        with contextlib.suppress(OSError):
            os.write(sys.stderr.fileno(), message.encode())

    previous = {number: signal.signal(number, handler) for number in SIGNALS}
    try:
        yield request
    finally:
        for number, handler_before in previous.items():
            signal.signal(number, handler_before)
