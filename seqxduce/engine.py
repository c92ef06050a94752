"""What the CLI does, as functions a Python user can call. Heavy modules (torch) load on first use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from seqxduce.api import Report, UserError, read_lines
from seqxduce.files import check_writable
from seqxduce.recipe import Recipe, load_recipe

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding import Output
    from seqxduce.trainer import TrainResult

__all__ = ["load_recipe", "load_run_recipe", "prepare", "train", "decode", "decode_split", "evaluate", "average",
           "format_outputs", "format_annotations", "checkpoint_for", "ensemble_members", "read_lines", "check_writable"]


def load_run_recipe(run_dir: Path, overrides: Sequence[str] = ()) -> Recipe:
    """The recipe saved in a run directory, with overrides."""
    from seqxduce.rundir import RunDir

    return RunDir(run_dir).load_recipe(overrides)


def prepare(recipe: Recipe) -> Path:
    """Download or build the recipe's task data; returns the data directory."""
    from seqxduce.components import build_task, data_dir

    where = data_dir(recipe)
    build_task(recipe).prepare(where)
    return where


def train(recipe: Recipe | str | Path, out: str | Path | None = None, resume: bool = False,
          overrides: Sequence[str] = (), overwrite: bool = False,
          tokenizers_from: str | Path | None = None, single: bool = False, init_from: str | Path | None = None,
          keep_optimizer: bool = False) -> TrainResult:
    """Train a recipe (a Recipe or a recipe file) into run directory `out` (default runs/<recipe name>).

    With resume, a recipe file gives way to the recipe saved in `out` (plus overrides): the run continues
    with the settings it was started with. A directory holding another run's files is refused unless resume,
    or overwrite (which removes that run's files first). tokenizers_from: a folder whose tokenizer files a new
    run takes instead of training its own (a run to ensemble with). A recipe with [train] members = N > 1
    trains N seeds of it (seqxduce.members) unless single (how each member's own process is started).
    init_from (a run directory or checkpoint): fine-tune, starting from its weights and tokenizer files with a fresh
    optimizer and schedule (keep_optimizer: its optimizer state too); the recipe's [model] and [tokenizer] must be
    that run's.
    """
    from seqxduce.rundir import RunDir
    from seqxduce.trainer import train as _train

    if out is None:
        if isinstance(recipe, Recipe):
            raise UserError("train: name the run directory (out) for a recipe given as an object")
        out = Path("runs") / Path(recipe).stem
    out = Path(out)
    if not isinstance(recipe, Recipe):
        resume_saved = resume and RunDir(out).recipe_file.is_file()
        recipe = load_run_recipe(out, overrides) if resume_saved else load_recipe(recipe, overrides)
    if keep_optimizer and init_from is None:
        raise UserError("train: --keep-optimizer keeps the optimizer of --init-from's checkpoint; give --init-from")
    if recipe.train.members > 1 and not single:
        if init_from is not None:
            raise UserError(f"train: --init-from with [train] members = {recipe.train.members} is not supported; "
                            "fine-tune each member into its own run")
        from seqxduce.members import train_members
        from seqxduce.trainer import TrainResult

        step = train_members(recipe, out, resume=resume, overwrite=overwrite, tokenizers_from=tokenizers_from,
                             overrides=overrides)
        return TrainResult(out, step, {})
    return _train(recipe, out, resume=resume, overwrite=overwrite,
                  tokenizers_from=None if tokenizers_from is None else Path(tokenizers_from),
                  init_from=None if init_from is None else Path(init_from), keep_optimizer=keep_optimizer)


def decode(run: str | Path, sources: Sequence[str], overrides: Sequence[str] = (),
           annotate: bool = False, ensemble: Sequence[Path] = ()) -> list[Output]:
    """Decode source lines with a run directory or checkpoint; outputs come back in input order.

    annotate: also fill each Output's annotations with the model's per-position figures (e.g. ponder counts).
    ensemble: more checkpoints or run directories (same tokenizer files) whose predictions are averaged in."""
    from seqxduce.decoding import decode_lines, load_run

    return decode_lines(load_run(Path(run), overrides, ensemble), sources, annotate=annotate)


def decode_split(run: str | Path, split: str, overrides: Sequence[str] = (),
                 annotate: bool = False, ensemble: Sequence[Path] = ()) -> tuple[list[Output], Report]:
    """Decode one of the task's splits with a run and score it (annotate and ensemble as in decode())."""
    from seqxduce.decoding import decode_split as _decode_split
    from seqxduce.decoding import load_run

    return _decode_split(load_run(Path(run), overrides, ensemble), split, annotate=annotate)


def ensemble_members(run: str | Path, overrides: Sequence[str] = ()) -> list[Path]:
    """The other members a run directory trained with [train] members = N > 1 (decoding the run ensembles
    them); [] for a checkpoint file or a single-model run."""
    from seqxduce.members import members_to_decode
    from seqxduce.rundir import RunDir

    if not Path(run).is_dir():
        return []
    rundir = RunDir(run)
    return members_to_decode(rundir, rundir.load_recipe(overrides))


def checkpoint_for(run: str | Path) -> Path:
    """The checkpoint decode() uses for a run directory or checkpoint: the run's average if any (refused when
    stale), else its newest readable step checkpoint."""
    from seqxduce.rundir import locate

    return locate(run)[1]


def format_annotations(outputs: Sequence[Output]) -> list[str]:
    """One JSON object per output: its index and its annotations (tokens and per-position figures)."""
    import json

    return [json.dumps({"index": i, **o.annotations}, ensure_ascii=False) for i, o in enumerate(outputs)]


def format_outputs(outputs: Sequence[Output]) -> list[str]:
    """One line per output; with n-best, one line per hypothesis: index, score, text (tab-separated).

    The one-best line is the task's postprocessed output (e.g. a parse tree); n-best lines give each
    hypothesis's decoded target text before postprocessing (e.g. the linearized tree): the task's output format
    and its score concern the one-best only."""
    lines: list[str] = []
    for i, o in enumerate(outputs):
        if len(o.nbest) <= 1:
            lines.append(o.text)
            continue
        for text, hyp in o.nbest:
            lines.append(f"{i}\t{hyp.score:.4f}\t{text}")
    return lines


def evaluate(hypotheses: str | Path, references: str | Path, recipe: str | Path | None = None,
             task: str | None = None, overrides: Sequence[str] = ()) -> Report:
    """Score a file of outputs against a file of references with a task's metric."""
    from seqxduce.registry import registry
    from seqxduce.settings_check import make_settings

    if (recipe is None) == (task is None):
        raise UserError("evaluate: name the task with exactly one of --recipe (file or run directory) and --task")
    if recipe is not None:
        path = Path(recipe)
        loaded = load_run_recipe(path, overrides) if path.is_dir() else load_recipe(path, overrides)
        task_obj = loaded.task.component.build(loaded.task.settings)
    else:
        component = registry().get("task", task)
        settings = make_settings(component.settings, {}, "task", f"--task {task}") if component.settings else None
        task_obj = component.build(settings)
    return task_obj.score_files(Path(hypotheses), Path(references))


def average(checkpoints: Sequence[str | Path], output: str | Path) -> Path:
    """Average the parameters of checkpoints into one file (its folder is checked before any is read)."""
    from seqxduce import checkpoint

    check_writable(output, f"average -o {output}")
    checkpoint.atomic_save(checkpoint.average([Path(p) for p in checkpoints]), Path(output))
    return Path(output)
