"""Stopping training on request: Ctrl-C (SIGINT), SIGTERM (sent by schedulers, `timeout`, `docker stop`,
systemd) and SIGUSR1 (SLURM's `--signal=USR1@90`, sent ahead of a time limit) ask the trainer to save the last
completed step and stop; work that can be dropped without losing a step (the step under way before its update,
validation, the final average) is abandoned at once; a second signal stops at once. Preparing the training
data, which keeps nothing until it is done, stops at once (stop_while_preparing), and so does the rest of a run's
set-up before its first step (stop_setting_up)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from seqxduce import stopping
from seqxduce.errors import TrainingStopped
from seqxduce.stopping import StopRequest, signal_name


@contextlib.contextmanager
def stop_training_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """While training, a first signal sets request.signal, read between steps; inside request.abandonable() (a
    step's forward and backward, a validation) it raises Abandoned, and the trainer drops that work and saves the
    last completed step. A second one raises KeyboardInterrupt. Nothing is said here: the stop comes within moments
    and the trainer says in one line how it ended."""
    with stopping.stop_on_signals(request, "this step to save it", notice=False) as same:
        yield same


class Interrupted(BaseException):
    """Raised by stop_while_preparing's handler where the signal arrives (a BaseException: no `except Exception`
    on the way swallows it, and every `with` on the way cleans up)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_PREPARING: list[int] = []  # the signal that came while preparing (stop_while_preparing), if any


@contextlib.contextmanager
def stop_while_preparing(what: str, kept: str = "nothing of it was kept (its work folders were removed), so the "
                                                 "next run prepares it anew") -> Iterator[None]:
    """Work that keeps nothing until it finishes and may take many minutes (the tokenizer's training, encoding a
    corpus): a signal stops it where it is, the work folders are removed on the way out (corpus.binarized's
    writer, the tokenizer's temporary folder, the encoding's workers), and the command ends in one line with 128 +
    the signal's number. Where Python drops what a handler raises (inside an at-fork hook, a library's callback),
    the next preparing_stopped() check raises it again; inside a library's own loop (sentencepiece training its
    model) the stop comes when that returns. kept: what the message says of the work done (work that keeps its
    pieces says where the next run continues)."""

    def handler(signum: int, frame: object) -> None:
        _PREPARING.append(signum)
        raise Interrupted(signum)

    try:
        with stopping.handled(handler):
            yield
    except Interrupted as stop:
        raise TrainingStopped(f"{signal_name(stop.signum)}: stopped while {what}; {kept}",
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
def stop_setting_up(said: Callable[[int], str]) -> Iterator[None]:
    """A run's set-up outside the data's preparation (the process group, the run folder, the model, its optimizer
    and the checkpoint it resumes): it keeps nothing that a stop would lose, so a signal ends it where it lands, in
    one line, said(signum) (empty on the ranks that leave the saying to rank 0), with 128 + the signal's number,
    instead of the signal's default action, which ends the process without a word. The preparing stretches inside
    it (stop_while_preparing) and the training loop handle their signals themselves."""
    try:
        with stopping.stop_at_once():
            yield
    except stopping.StoppedAtOnce as stop:
        raise TrainingStopped(said(stop.signum), exit_code=128 + stop.signum) from None
