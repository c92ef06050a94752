"""Scores per group: a split whose examples name a group (Example.group, a multilingual task's direction) is
scored group by group with the task's metric, and reported as their mean beside each group's figures.

The mean is the plain average over groups (each direction counts once, whatever its size), as multilingual papers
report it; the primary figure keeps its name (bleu), so that early stopping and best.pt follow the mean unless
[train] best_group names one group. A group's figures are named `figure[group]` (bleu[en-de]). The core knows
groups, not languages: what a group is called and which figures its table shows are the task's (Task.group_name,
Report.table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from seqxduce.api import Example, Report, Task, UserError

T = TypeVar("T")


def group_names(examples: Sequence[Example]) -> list[str]:
    """The groups of a split in the order they first come; empty for a split scored as one set."""
    return list(dict.fromkeys(ex.group for ex in examples if ex.group))


def grouped_figure(name: str, group: str) -> str:
    """A group's figure as reports, metrics.jsonl and [train] best_group name it: valid_bleu[en-de]."""
    return f"{name}[{group}]"


def sample_per_group(examples: Sequence[Example], count: int) -> list[Example]:
    """The first `count` examples of each group (of the whole split when it has none), in the split's order: a
    validation sample that scores every group on as many sentences as a one-group run would."""
    if not group_names(examples):
        return list(examples[:count])
    taken: dict[str, int] = {}
    sample = []
    for ex in examples:
        if taken.get(ex.group, 0) < count:
            taken[ex.group] = taken.get(ex.group, 0) + 1
            sample.append(ex)
    return sample


def score_by_group(task: Task, outputs: Sequence[T], examples: Sequence[Example],
                   score: Callable[[Task, Sequence[T], Sequence[Example]], Report]) -> Report:
    """`score` (the metric of one set: task, its outputs, its examples) of each group with the group's task
    (Task.for_group), combined by combine_groups."""
    ungrouped = sum(not ex.group for ex in examples)
    if ungrouped:  # a task's mistake, said rather than left out of every figure
        raise UserError(f"{ungrouped} of the split's {len(examples)} examples name no group (Example.group) beside "
                        f"examples that do: the task {type(task).__name__} must give every example of a split its "
                        "group, or none")
    reports: dict[str, Report] = {}
    sizes: dict[str, int] = {}
    for group in group_names(examples):
        rows = [i for i, ex in enumerate(examples) if ex.group == group]
        reports[group] = score(task.for_group(group), [outputs[i] for i in rows], [examples[i] for i in rows])
        sizes[group] = len(rows)
    return combine_groups(reports, sizes, task.group_name)


def combine_groups(reports: dict[str, Report], sizes: dict[str, int], group_name: str = "group") -> Report:
    """One report of several groups' reports: each figure every group has as their mean under its own name, each
    group's figures as figure[group], a table per group (and the mean) of the figures Report.table names, then
    each group's own text (sacreBLEU's lines with their signatures)."""
    first = next(iter(reports.values()))
    shared = [k for k in first.metrics if all(k in r.metrics for r in reports.values())]
    metrics = {k: sum(r.metrics[k] for r in reports.values()) / len(reports) for k in shared}
    for group, report in reports.items():
        metrics.update({grouped_figure(k, group): v for k, v in report.metrics.items()})
    signatures = list(dict.fromkeys(r.signature for r in reports.values()))
    signature = signatures[0] if len(signatures) == 1 else "; ".join(f"{g}: {r.signature}" for g, r in reports.items())
    texts = [f"{group}:\n" + "\n".join(f"  {line}" for line in r.text.splitlines())
             for group, r in reports.items() if r.text]
    text = "\n".join([table(reports, sizes, metrics, group_name), *texts])
    return Report(metrics=metrics, primary=first.primary, text=text, signature=signature,
                  invalid=sum(r.invalid for r in reports.values()),
                  warning="; ".join(f"{g}: {r.warning}" for g, r in reports.items() if r.warning),
                  higher_is_better=first.higher_is_better, table=dict(first.table))


def table(reports: dict[str, Report], sizes: dict[str, int], means: dict[str, float], group_name: str) -> str:
    """The figures of each group and their mean, aligned columns, and the sentences (examples) each holds."""
    first = next(iter(reports.values()))
    columns = [(k, label) for k, label in (first.table or {first.primary: first.primary}).items() if k in means]
    rows = [[group, *(f"{r.metrics[k]:.2f}" for k, _ in columns), str(sizes[group])] for group, r in reports.items()]
    rows.append(["mean", *(f"{means[k]:.2f}" for k, _ in columns), str(sum(sizes.values()))])
    header = [group_name, *(label for _, label in columns), "sentences"]
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in
                               enumerate(zip(row, widths))).rstrip() for row in [header, *rows])


def compact_line(metrics: dict[str, float | str], primary: str | None = None) -> dict[str, float | str]:
    """Figures for a one-line log: each group's primary figure (None: the first figure that has groups) folded
    beside the mean's (valid_bleu '20.10 (en-de 22.00, en-fr 18.20)'), the groups' other figures left to
    metrics.jsonl. Figures without groups come back as they are."""
    folded = {k: v for k, v in metrics.items() if not _grouped(k)}
    if primary is None:
        primary = next((k[:k.index("[")] for k in metrics if _grouped(k)), None)
    if primary is None or primary not in folded:
        return folded
    prefix = f"{primary}["
    parts = [f"{k[len(prefix):-1]} {v:.2f}" for k, v in metrics.items()
             if k.startswith(prefix) and _grouped(k) and isinstance(v, float)]
    if parts and isinstance(folded[primary], float):
        folded[primary] = f"{folded[primary]:.2f} ({', '.join(parts)})"
    return folded


def _grouped(name: str) -> bool:
    return "[" in name and name.endswith("]")
