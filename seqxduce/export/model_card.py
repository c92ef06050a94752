"""The model card (README.md) of `seqxduce export RUN --to huggingface`: what the model is, how to load it, the
recipe it was trained with, its data, its figures from the run's metrics, and the command that made the folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqxduce.api import UserError


def model_card(run: Path, recipe: Any, metadata: dict[str, Any], member: int | None) -> str:
    """The card's Markdown text (figures are left out, with a line saying so, where the run has none)."""
    task = recipe.task
    task_keys = {"name": task.core.name, **_plain(task.settings)}
    command = f"seqxduce export {run} --to huggingface -o OUT" + (f" --member {member}" if member else "")
    steps = metadata.get("averaged_steps") or [metadata.get("step")]
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: translation",
        "tags: [seqxduce, marian]",
        "---",
        "",
        f"# {Path(str(metadata.get('run', run))).name}",
        "",
        f"A **{recipe.model.core.name}** trained with seqxduce on the task **{task.core.name}**, exported as a "
        "Hugging Face Marian model: it loads with no custom code.",
        "",
        "```python",
        "from transformers import MarianMTModel, MarianTokenizer",
        "",
        "tokenizer = MarianTokenizer.from_pretrained(\"THIS_FOLDER\")",
        "model = MarianMTModel.from_pretrained(\"THIS_FOLDER\")",
        "batch = tokenizer([\"a source sentence\"], return_tensors=\"pt\", padding=True)",
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))",
        "```",
        "",
        "`generate()` takes its defaults (beam, length penalty, length limit, stopping rule) from "
        "`generation_config.json`, written from the run's `[decode]` section.",
        "",
        "## Data",
        "",
        "| key | value |",
        "| --- | --- |",
        *(f"| {key} | {_cell(value)} |" for key, value in task_keys.items() if key != "data_dir"),
        "",
        "## Figures",
        "",
        *_figures(run),
        "",
        "## Made by",
        "",
        "```bash",
        command,
        "```",
        "",
        f"from `{metadata.get('checkpoint')}` (steps {', '.join(map(str, steps))}), seqxduce "
        f"{metadata.get('seqxduce_version')}.",
        "",
    ]
    notes = metadata.get("notes") or []
    if notes:
        lines += ["## How the export maps the run (and what generate() cannot say)", "",
                  *(f"- {note}" for note in notes), ""]
    lines += ["## Recipe", "", "```toml", recipe.to_toml().rstrip(), "```", ""]
    return "\n".join(lines)


def _figures(run: Path) -> list[str]:
    """The run's last validation and best figures (the `info` command's), or a line saying there are none."""
    try:
        from seqxduce.inspection.run_info import run_info

        info = run_info(Path(run))
    except (OSError, UserError, ValueError) as err:
        return [f"No figures: the run's metrics could not be read ({err})."]
    rows = []
    for best in (info.best_metric, info.best_valid_loss):
        if best is not None:
            rows.append(f"| best {best.name} | {best.step} | {best.value:.4g} |")
    if info.last_valid:
        figures = ", ".join(f"{k} = {_cell(v)}" for k, v in info.last_valid.items() if k != "step")
        rows.append(f"| last validation | {info.last_valid.get('step', '')} | {figures} |")
    if not rows:
        return ["No validation figures in the run's metrics (an imported model, or a run never validated)."]
    return ["| figure | step | value |", "| --- | --- | --- |", *rows]


def _plain(settings: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else {}


def _cell(value: Any) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")
