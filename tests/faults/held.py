"""`python -m tests.faults.held MOMENT MARKER ARGS`: the seqxduce CLI held at one moment of a streamed decode's or
score's life, so that a signal test lands exactly there on any machine, however loaded (the fault tests'
injection, as slowed.py; nothing else uses it). At MOMENT the process writes the file MARKER and waits until the
test removes it; a signal that comes meanwhile is handled where the process waits, as it would be at that moment
of an unheld run. The moments, in the order a job meets them:
- `loaded`: the model is loaded, the job has not opened its files;
- `opened`: the files are open (a record of 0 lines, or of the stopped job it continues), no buffer read yet;
- `piece`: the first piece is written and counted by the record, the next buffer not yet done;
- `written`: the last piece is written and the workers have ended, the files do not have their final names yet;
- `finished`: the files have their final names (the record is gone), the command has not ended."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

from seqxduce.cli import main
from seqxduce.decoding import file_jobs, stream_job
from seqxduce.decoding.stream_files import OutputFiles

MOMENTS = ("loaded", "opened", "piece", "written", "finished")


def hold(marker: Path) -> None:
    marker.write_text("held\n")
    while marker.exists():  # a signal's handler runs inside this sleep, as it would in the work held here
        time.sleep(0.02)


def held_after(function: Callable, marker: Path, once: bool = False) -> Callable:
    """function, then the hold (with once, only after its first call)."""
    calls = []

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        result = function(*args, **kwargs)
        calls.append(1)
        if not once or len(calls) == 1:
            hold(marker)
        return result

    return wrapper


def held_before(function: Callable, marker: Path) -> Callable:
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        hold(marker)
        return function(*args, **kwargs)

    return wrapper


if __name__ == "__main__":
    moment, where = sys.argv.pop(1), Path(sys.argv.pop(1))
    if moment == "loaded":
        file_jobs._run_stream = held_before(file_jobs._run_stream, where)
    elif moment == "opened":
        OutputFiles.open = held_after(OutputFiles.open, where)
    elif moment == "piece":
        OutputFiles.write = held_after(OutputFiles.write, where, once=True)
    elif moment == "written":
        stream_job.stream = held_after(stream_job.stream, where)
    elif moment == "finished":
        OutputFiles.finish = held_after(OutputFiles.finish, where)
    else:
        raise SystemExit(f"held: unknown moment {moment!r}; one of {', '.join(MOMENTS)}")
    main()
