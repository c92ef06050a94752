"""Training curves from runs' metrics.jsonl (`seqxduce plot`): loss, perplexity, learning rate, tokens/s,
gradient norm and the task's metric against steps or wall time, several runs overlaid in one PNG."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from seqxduce.api import UserError
from seqxduce.inspection.plotting import new_figure, save_png
from seqxduce.members import member_dirs
from seqxduce.rundir import METRICS_FILE

PANEL_WIDTH, PANEL_HEIGHT, COLUMNS = 4.6, 3.2, 3
# (title, train figure, valid figure, log scale): None where the log has no such figure
STANDARD_PANELS = (
    ("loss (label-smoothed, per token)", "loss", "loss", False),
    ("perplexity", "ppl", "ppl", True),
    ("learning rate", "lr", None, False),
    ("target tokens / s", "tokens_per_s", None, False),
    ("gradient norm", "grad_norm", None, False),
)
NOT_METRICS = {"kind", "time", "step", "epoch", "loss", "nll", "ppl", "primary"}


@dataclass
class RunLog:
    """The records of one run's metrics.jsonl, split by kind, one per step (the last written wins)."""

    name: str
    train: list[dict] = field(default_factory=list)
    valid: list[dict] = field(default_factory=list)

    def primary(self) -> str | None:
        """The task's main metric as the trainer logged it (e.g. valid_bleu), if it did."""
        for record in reversed(self.valid):
            if isinstance(record.get("primary"), str):
                return record["primary"]
        return None

    def metric_names(self) -> list[str]:
        """The task metrics in the valid records: the primary one alone when it is known."""
        primary = self.primary()
        if primary:
            return [primary]
        names = {k for r in self.valid for k, v in r.items() if k not in NOT_METRICS and _number(v) is not None}
        return sorted(names)


def metrics_path(run: Path) -> Path:
    """A run directory's metrics.jsonl (or the file itself)."""
    run = Path(run)
    path = run / METRICS_FILE if run.is_dir() else run
    if not path.is_file():
        raise UserError(f"{run}: no {METRICS_FILE}; give a run directory written by `seqxduce train`")
    return path


def read_run_log(run: Path, name: str | None = None) -> RunLog:
    """Read a run's metrics log; a step logged twice (a resume repeats the steps after its checkpoint) keeps
    its last record."""
    path = metrics_path(run)
    by_kind: dict[str, dict[int, dict]] = {"train": {}, "valid": {}}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"{path}:{number}: not a JSON object; was the file cut off? remove that line") from None
        kind = record.get("kind")
        if kind in by_kind and isinstance(record.get("step"), int):
            by_kind[kind][record["step"]] = record
    log = RunLog(name or _run_name(path))
    log.train = [by_kind["train"][s] for s in sorted(by_kind["train"])]
    log.valid = [by_kind["valid"][s] for s in sorted(by_kind["valid"])]
    return log


def _run_name(path: Path) -> str:
    return path.parent.name if path.name == METRICS_FILE else path.stem


def _number(value: object) -> float | None:
    """A logged figure as a float (the log writes inf and nan as strings); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def series(records: Sequence[dict], name: str, x: str, start: float) -> tuple[list[float], list[float]]:
    """(xs, ys) of one figure: x is the step, or the wall time since `start` in the unit of time_scale."""
    xs, ys = [], []
    for r in records:
        y = _number(r.get(name))
        if y is None or not math.isfinite(y):
            continue
        xs.append(float(r["step"]) if x == "step" else (float(r["time"]) - start))
        ys.append(y)
    return xs, ys


def time_unit(logs: Sequence[RunLog]) -> tuple[str, float]:
    """The unit that keeps the wall-time axis readable for the longest run: (name, seconds per unit)."""
    span = max((_span(log) for log in logs), default=0.0)
    if span < 120:
        return "s", 1.0
    if span < 7200:
        return "min", 60.0
    return "h", 3600.0


def _span(log: RunLog) -> float:
    times = [float(r["time"]) for r in log.train + log.valid if "time" in r]
    return max(times) - min(times) if times else 0.0


def panels_for(logs: Sequence[RunLog], extra: Sequence[str] = ()) -> list[tuple[str, str | None, str | None, bool]]:
    """The standard panels, one per task metric found in the runs, and one per extra figure asked for."""
    panels = list(STANDARD_PANELS)
    for name in sorted({m for log in logs for m in log.metric_names()}):
        panels.append((f"task metric: {name}", None, name, False))
    for name in extra:
        in_train = any(name in r for log in logs for r in log.train)
        in_valid = any(name in r for log in logs for r in log.valid)
        if not (in_train or in_valid):
            raise UserError(f"--figure {name}: no run's metrics.jsonl has it; see the keys of its lines")
        panels.append((name, name if in_train else None, name if in_valid else None, False))
    return panels


def figure_size(panels: int) -> tuple[float, float]:
    """(width, height) in inches of a grid of this many panels, COLUMNS to a row."""
    rows = math.ceil(panels / COLUMNS)
    return COLUMNS * PANEL_WIDTH, rows * PANEL_HEIGHT + 0.4


def plot_curves(runs: Sequence[Path], output: Path, x: str = "step", extra: Sequence[str] = (),
                dpi: int = 100) -> tuple[Path, tuple[float, float]]:
    """Draw the curves of several runs into one PNG; returns it and its size in inches."""
    if x not in ("step", "time"):
        raise UserError(f"--x {x}: choose step or time")
    logs = _named_logs(runs)
    if not any(log.train or log.valid for log in logs):
        raise UserError(f"{', '.join(str(r) for r in runs)}: the metrics logs hold no train or valid records yet")
    panels = panels_for(logs, extra)
    width, height = figure_size(len(panels))
    figure = new_figure(width, height, "seqxduce plot")
    unit, scale = time_unit(logs)
    axes = figure.subplots(math.ceil(len(panels) / COLUMNS), COLUMNS, squeeze=False).flatten()
    colors = [f"C{i % 10}" for i in range(len(logs))]
    for ax, (title, train_key, valid_key, log_scale) in zip(axes, panels):
        drawn = 0
        for log, color in zip(logs, colors):
            start = _start(log)
            for records, key, style in ((log.train, train_key, "-"), (log.valid, valid_key, "--o")):
                if key is None:
                    continue
                xs, ys = series(records, key, x, start)
                if not xs:
                    continue
                xs = xs if x == "step" else [v / scale for v in xs]
                which = "train" if records is log.train else "valid"
                ax.plot(xs, ys, style, color=color, markersize=3, linewidth=1.3, label=f"{log.name} {which}")
                drawn += 1
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step" if x == "step" else f"wall time ({unit})", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if log_scale and drawn:
            ax.set_yscale("log")
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not in the log", ha="center", va="center", transform=ax.transAxes, color="grey")
    for ax in axes[len(panels):]:
        ax.axis("off")
    return save_png(figure, output, dpi), (width, height)


def _start(log: RunLog) -> float:
    times = [float(r["time"]) for r in log.train + log.valid if "time" in r]
    return min(times) if times else 0.0


def _named_logs(runs: Sequence[Path]) -> list[RunLog]:
    """Each run's log, named by its folder; folders of the same name are told apart by their full path. A run
    trained with [train] members = N gives one log per member that has logged, named 'RUN member K'."""
    groups = [(Path(r), member_dirs(Path(r)) if Path(r).is_dir() else [Path(r)]) for r in runs]
    names = [_run_name(metrics_path(run)) for run, _ in groups]
    logs = []
    for (run, folders), name in zip(groups, names):
        label = str(run) if names.count(name) > 1 else name
        logged = [folders[0], *(f for f in folders[1:] if (f / METRICS_FILE).is_file())]
        for k, folder in enumerate(folders, start=1):
            if folder in logged:
                logs.append(read_run_log(folder, f"{label} member {k}" if len(folders) > 1 else label))
    return logs
