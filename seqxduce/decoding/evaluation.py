"""`seqxduce evaluate` (seqxduce.evaluate): a file of outputs scored against references with a task's metric, the
task of a recipe file or run directory, or a task plugin by name with its defaults and `--set task.KEY=VALUE`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from seqxduce.api import Report, UserError, read_lines
from seqxduce.recipe import load_recipe, override_value, split_override
from seqxduce.registry import registry
from seqxduce.rundir import RunDir
from seqxduce.settings_check import make_settings


def evaluate_files(hypotheses: str | Path, references: str | Path | Sequence[str | Path],
                   recipe: str | Path | None = None, task: str | None = None, overrides: Sequence[str] = ()) -> Report:
    """seqxduce.evaluate: the hypotheses against one reference file, or several (each a reference translation of
    every line, as sacreBLEU takes them), each of one line per hypothesis."""
    if (recipe is None) == (task is None):
        raise UserError("evaluate: name the task with exactly one of --recipe (file or run directory) and --task")
    if recipe is not None:
        path = Path(recipe)
        loaded = RunDir(path).load_recipe(overrides) if path.is_dir() else load_recipe(path, overrides)
        task_obj = loaded.task.component.build(loaded.task.settings)
    else:
        component = registry().get("task", task)
        values, raw = _task_overrides(task, component.settings, overrides)
        settings = make_settings(component.settings, values, "task", f"--task {task}", raw) \
            if component.settings else None
        task_obj = component.build(settings)
    files = [Path(references)] if isinstance(references, (str, Path)) else [Path(r) for r in references]
    if len(files) == 1:
        return task_obj.score_files(Path(hypotheses), files[0])
    outputs = read_lines(Path(hypotheses))
    streams = [read_lines(f) for f in files]
    for f, lines in zip(files, streams):
        if len(lines) != len(outputs):
            raise UserError(f"{hypotheses} has {len(outputs)} lines but {f} has {len(lines)}: give one reference "
                            "line per hypothesis line in every reference file")
    return task_obj.score_references(outputs, streams)


def _task_overrides(task: str, settings: type | None, overrides: Sequence[str]) -> tuple[dict, dict]:
    """The values and raw texts of `--set task.KEY=VALUE` for a task named by --task (no recipe: the task's
    defaults and these); any other section, or a key the task does not have, is refused."""
    known = {f.name for f in dataclasses.fields(settings)} if settings is not None else set()
    values, raw = {}, {}
    for text in overrides:
        section, key, value = split_override(text)
        if section != "task":
            raise UserError(f"--set {text}: with --task only task settings apply (--set task.KEY=VALUE); "
                            "give a recipe with --recipe for the others")
        if key not in known:
            raise UserError(f"--set {text}: task {task!r} has no setting {key!r}; its settings: "
                            f"{', '.join(sorted(known)) or '(none)'}")
        values[key], raw[key] = override_value(value), value
    return values, raw
