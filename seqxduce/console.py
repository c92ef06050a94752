"""Progress on the terminal through rich, and the same figures appended to a JSONL metrics log."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from seqxduce.api import UserError

# Progress and messages go to stderr so that decode output on stdout stays clean.
console = Console(stderr=True, highlight=False, soft_wrap=True)


class MetricsLog:
    """Appends one JSON object per line; rank 0 only."""

    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None

    def write(self, kind: str, **figures: Any) -> None:
        if self.path is None:
            return
        record = {"kind": kind, "time": round(time.time(), 3), **{k: _plain(v) for k, v in figures.items()}}
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        except OSError as err:
            raise UserError(f"{self.path}: cannot append the metrics ({err.strerror or err}); free disk space "
                            "and continue with --resume") from None


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class TrainProgress:
    """A rich progress bar with step, loss, ppl, lr and tokens/s; a no-op on ranks other than 0."""

    def __init__(self, total_steps: int, start_step: int, enabled: bool = True):
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]train[/]"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled or not sys.stderr.isatty(),
        )
        self.task = self.progress.add_task("train", total=total_steps, completed=start_step, figures="")
        self.total_steps, self.start_step, self.started = total_steps, start_step, time.perf_counter()

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
        text = " ".join(f"{k} {_fmt(v)}" for k, v in figures.items())
        self.progress.update(self.task, completed=step, figures=text)

    def eta(self, step: int) -> str:
        """Time left to the last step at this run's pace so far, as h:mm:ss (for log lines without the bar)."""
        done = step - self.start_step
        if done <= 0:
            return "?"
        left = (time.perf_counter() - self.started) / done * max(self.total_steps - step, 0)
        return f"{int(left // 3600)}:{int(left % 3600 // 60):02d}:{int(left % 60):02d}"

    def print(self, message: str) -> None:
        if self.enabled:
            self.progress.console.print(message, markup=False)


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
