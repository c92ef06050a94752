"""Progress and messages on the terminal through rich (stderr); the metrics file is training.metrics_log's."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text


class NotingConsole(Console):
    """rich's Console with notes that wait for the command's first line: a note (how many threads, and why) comes
    first in the log when the command has something to say, and not at all before a refusal, which stays the only
    line (errors are click's, not this console's)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.notes: list[str] = []

    def note_first(self, line: str) -> None:
        """Say line just before the next thing this console prints."""
        self.notes.append(line)

    def drop_notes(self) -> None:
        """Forget the waiting notes: the command does no work they describe (a finished run's one line)."""
        self.notes.clear()

    def print(self, *args: Any, **kwargs: Any) -> None:
        while self.notes:
            super().print(self.notes.pop(0), markup=False, highlight=False)
        super().print(*args, **kwargs)


# Progress and messages go to stderr so that decode output on stdout stays clean.
console = NotingConsole(stderr=True, highlight=False, soft_wrap=True)


class WholeFigures:
    """'k v k v ...' cut to the width it is given, dropping whole figures from the end rather than cutting one."""

    def __init__(self, figures: list[str]):
        self.figures = figures

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(0, len(" ".join(self.figures)))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        shown = ""
        for figure in self.figures:
            longer = f"{shown} {figure}" if shown else figure
            if len(longer) > options.max_width:
                break
            shown = longer
        yield Text(shown, no_wrap=True, overflow="crop", style="progress.data")


class FiguresColumn(ProgressColumn):
    """The latest training figures, last in the row: the only column that gives way when the terminal is narrow,
    so that the bar, the step count and the times stay whole."""

    def __init__(self) -> None:
        # wrapable (no_wrap False) so that rich narrows this column before any other
        super().__init__(table_column=Column(no_wrap=False, ratio=1))

    def render(self, task: Task) -> WholeFigures:
        return WholeFigures(task.fields.get("figures", []))


def progress_columns() -> list[ProgressColumn]:
    """The training bar's columns: those before the figures keep their width at any terminal width."""
    fixed = Column(no_wrap=True)
    return [
        TextColumn("[bold]train[/]", table_column=fixed),
        BarColumn(bar_width=24, table_column=Column(no_wrap=True)),
        TextColumn("{task.completed}/{task.total}", table_column=Column(no_wrap=True)),
        TimeElapsedColumn(table_column=Column(no_wrap=True)),
        TextColumn("eta", table_column=Column(no_wrap=True)),
        TimeRemainingColumn(table_column=Column(no_wrap=True)),
        FiguresColumn(),
    ]


class TrainProgress:
    """A rich progress bar with step, elapsed time, ETA and the latest figures; a no-op on ranks other than 0."""

    # the log lines' ETA reads the pace of about the last this many seconds (all of the run while it is shorter)
    ETA_WINDOW = 900.0

    def __init__(self, total_steps: int, start_step: int, enabled: bool = True, out: Console | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.enabled = enabled
        out = out or console
        self.progress = Progress(
            *progress_columns(),
            console=out,
            disable=not enabled or not out.is_terminal,
        )
        self.task = self.progress.add_task("train", total=total_steps, completed=start_step, figures=[])
        self.total_steps, self.clock = total_steps, clock
        self.marks: deque[tuple[float, int]] = deque([(clock(), start_step)])  # (time, step) of the eta() calls

    def __enter__(self) -> TrainProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, step: int, figures: dict[str, float] | None = None) -> None:
        """Move the bar to step; new figures replace the shown ones, None keeps the last."""
        if figures is None:
            self.progress.update(self.task, completed=step)
            return
        self.progress.update(self.task, completed=step, figures=[f"{k} {_fmt(v)}" for k, v in figures.items()])

    def eta(self, step: int) -> str:
        """Time left to the last step at the pace of about the last ETA_WINDOW seconds, as h:mm:ss (for log lines
        without the bar).

        Not the whole run's average: a run that was paused, shared its cores for a while or resumed on a faster
        machine would carry that into every later estimate (a whole-run average said 2:13 where 1:25 was left)."""
        now = self.clock()
        self.marks.append((now, step))
        while len(self.marks) > 2 and self.marks[1][0] <= now - self.ETA_WINDOW:
            self.marks.popleft()  # the oldest mark kept is the last one at least a window back
        since, first = self.marks[0]
        if step <= first:
            return "?"
        left = (now - since) / (step - first) * max(self.total_steps - step, 0)
        return f"{int(left // 3600)}:{int(left % 3600 // 60):02d}:{int(left % 60):02d}"

    def print(self, message: str) -> None:
        if self.enabled:
            self.progress.console.print(message, markup=False)


class PairsProgress:
    """A long step over items (pairs by default) on the console: what it is doing, items done (of total),
    items/s, elapsed and ETA (total None: a count without a bar or ETA). Where stderr is not a terminal (a batch
    job's log file) the bar is replaced by a plain line every `every` seconds, as training's step lines are
    (SEQXDUCE_PROGRESS_SECONDS sets the pace; default 30)."""

    def __init__(self, what: str, total: int | None, enabled: bool = True, out: Console | None = None,
                 unit: str = "pairs", every: float | None = None, start: int = 0,
                 clock: Callable[[], float] = time.perf_counter):
        out = out or console
        fixed = Column(no_wrap=True)
        counted = [
            BarColumn(bar_width=24, table_column=fixed),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} " + unit, table_column=fixed),
            TextColumn("{task.fields[rate]}", table_column=fixed),
            TextColumn("eta", table_column=fixed),
            TimeRemainingColumn(table_column=fixed),
        ] if total is not None else [TextColumn("{task.completed:,.0f} " + unit, table_column=fixed),
                                     TextColumn("{task.fields[rate]}", table_column=fixed)]
        self.progress = Progress(TextColumn(f"[bold]{what}[/]", table_column=fixed), *counted,
                                 TimeElapsedColumn(table_column=fixed), console=out,
                                 disable=not enabled or not out.is_terminal)
        self.task = self.progress.add_task(what, total=total, completed=start, rate="")
        self.what, self.total, self.unit, self.out, self.clock = what, total, unit, out, clock
        self.plain = enabled and not out.is_terminal
        self.every = every if every is not None else float(os.environ.get("SEQXDUCE_PROGRESS_SECONDS", "30"))
        self.started = self.last_line = clock()
        self.start = start  # counted before this process began (a resumed job): not in the rate
        self.done = start

    def __enter__(self) -> PairsProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def advance(self, items: int) -> None:
        self.done += items
        now = self.clock()
        rate = (self.done - self.start) / max(now - self.started, 1e-9)
        self.progress.update(self.task, completed=self.done, rate=f"{rate:,.0f} {self.unit}/s")
        if self.plain and now - self.last_line >= self.every:
            self.last_line = now
            self.out.print(self.line(rate), markup=False, highlight=False)

    def line(self, rate: float) -> str:
        """'what: done/total unit (P%), R unit/s, eta H:MM:SS' for a log file."""
        if self.total is None:
            return f"{self.what}: {self.done:,} {self.unit}, {rate:,.0f} {self.unit}/s"
        left = max(self.total - self.done, 0) / rate if rate > 0 else None
        eta = "?" if left is None else f"{int(left // 3600)}:{int(left % 3600 // 60):02d}:{int(left % 60):02d}"
        share = 100.0 * self.done / self.total if self.total else 100.0
        return (f"{self.what}: {self.done:,}/{self.total:,} {self.unit} ({share:.1f}%), {rate:,.0f} {self.unit}/s, "
                f"eta {eta}")


def _fmt(value: float | str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.3e}"
    return f"{value:.4g}"


def format_figures(figures: dict[str, float | str]) -> str:
    """'k v k v' with compact numbers, for log lines."""
    return " | ".join(f"{k} {_fmt(v)}" for k, v in figures.items())
