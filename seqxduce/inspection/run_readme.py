"""The README.md that training leaves in a run directory: what was trained, its final figures, and the commands
to decode it, inspect it and train it further."""

from __future__ import annotations

import datetime
from pathlib import Path

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write_text
from seqxduce.decoding.groups import compact_line
from seqxduce.inspection.run_info import Best, RunInfo, count_text, figure_text, run_info, short_value

README_FILE = "README.md"


def write_run_readme(run_dir: Path) -> Path | None:
    """Write run_dir/README.md; a failure is a warning, never a reason to lose a finished run."""
    from seqxduce.console import console

    path = Path(run_dir) / README_FILE
    try:
        atomic_write_text(path, run_readme(run_info(Path(run_dir)), Path(run_dir)))
    except (OSError, UserError) as err:
        console.print(f"warning: could not write {path}: {err}", markup=False)
        return None
    return path


def run_readme(info: RunInfo, run: Path) -> str:
    """The README text for a run directory given as `run` (the path used in the commands it shows)."""
    recipe = info.recipe
    model, task, tok = recipe["model"], recipe["task"], recipe["tokenizer"]
    vocab = info.vocabulary
    vocab_text = (f"one shared vocabulary of {vocab['source']:,}" if vocab["shared"]
                  else f"vocabularies of {vocab['source']:,} source and {vocab['target']:,} target entries")
    trained = [f"{info.step} steps"]
    if info.target_tokens is not None:
        trained.append(f"{count_text(info.target_tokens)} target tokens")
    if info.wall_time_s is not None:
        trained.append(f"{datetime.timedelta(seconds=round(info.wall_time_s))} wall time")
    lines = [
        f"# Run `{run.name}`",
        "",
        f"Written by `seqxduce train` on {datetime.date.today().isoformat()}: model **{model['name']}** "
        f"({info.parameters:,} parameters; {_keys(model['changed'])}) on task **{task['name']}** "
        f"({_keys(task['changed'])}), tokenizer **{tok['name']}** ({vocab_text}), trained for {', '.join(trained)}. "
        f"The full recipe, every default included, is in `recipe.toml`.",
        "",
        "## Final figures",
        "",
        "| | step | figures |",
        "| --- | --- | --- |",
    ]
    if info.last_train:
        lines.append(_row("last training log line", info.last_train))
    if info.last_valid:
        lines.append(_row("last validation", compact_line(info.last_valid)))  # groups beside their mean
    for best in (info.best_metric, info.best_valid_loss):
        if best is not None:
            lines.append(_best_row(best))
    lines += [
        "",
        f"`decode` uses `{Path(info.checkpoint).relative_to(info.run_dir)}` ({info.checkpoint_reason}).",
        "",
        "## Commands",
        "",
        "```bash",
        f"seqxduce decode {run} --split test              # decode the task's test split and score it",
        f"seqxduce decode {run} --input sources.txt       # decode your own sources, one per line ('-': stdin)",
        f"seqxduce info {run}                             # this run's settings, checkpoints and figures",
        f"seqxduce plot {run} --output curves.png         # its training curves",
        f"seqxduce attention {run} --input \"a sentence\"   # its attention maps for one sentence",
        f"seqxduce train {run / 'recipe.toml'} --out {run} --resume --set train.max_steps={2 * max(info.step, 1)}"
        "   # train on",
        "```",
        "",
    ]
    return "\n".join(lines)


def _keys(changed: dict) -> str:
    shown = [f"{k}={short_value(v)}" for k, v in changed.items() if k != "data_dir"]
    return ", ".join(shown) if shown else "defaults"


def _row(title: str, figures: dict[str, float | str]) -> str:
    rest = {k: v for k, v in figures.items() if k != "step"}
    return f"| {title} | {figures.get('step', '')} | {figure_text(rest)} |"


def _best_row(best: Best) -> str:
    return f"| best {best.name} | {best.step} | {best.value:.4g} ({best.time}) |"
