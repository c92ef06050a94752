"""The commands that show what a run did and does: `seqxduce info`, `plot` and `attention`.

Each parses its options and calls a function a Python user can call too (run_info, curves, attention_maps with
attention_plot, all in seqxduce.inspection); torch and matplotlib load when a command runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from seqxduce.api import UserError

KINDS = ("encoder", "decoder", "cross")


def _numbers(text: str | None, option: str) -> list[int] | None:
    """'1,3,-1' -> [1, 3, -1]; None stays None."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"{option} {text}: give numbers separated by commas, e.g. {option} 1,2 or -1 for the last"
                        ) from None


@click.command("info")
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object, for scripts")
def info(run: Path, as_json: bool) -> None:
    """Describe a trained run (RUN: its directory, or one checkpoint in it; for a recipe file see `recipe info`):
    its recipe in short, parameters, step, tokens seen, best validation figures, vocabularies, checkpoints, which
    file `decode` uses by default and why (and the members it ensembles), and software versions."""
    from seqxduce.inspection.run_info import format_info, run_info

    facts = run_info(run)
    click.echo(json.dumps(facts.as_dict(), indent=2) if as_json else format_info(facts))


@click.command("plot")
@click.argument("runs", metavar="RUN...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("curves.png"), show_default=True,
              help="the PNG to write")
@click.option("--x", "x_axis", type=click.Choice(["step", "time"]), default="step", show_default=True,
              help="the horizontal axis: optimizer steps, or wall time since each run's first log line")
@click.option("--figure", "extra", multiple=True,
              help="also plot this figure of metrics.jsonl (repeatable), e.g. --figure ponder_mean")
@click.option("--dpi", type=click.IntRange(20, 600), default=100, show_default=True, help="pixels per inch")
def plot(runs: tuple[Path, ...], output: Path, x_axis: str, extra: tuple[str, ...], dpi: int) -> None:
    """Plot training and validation loss, perplexity, learning rate, tokens/s, gradient norm and the task's
    metric of one or more runs (their metrics.jsonl), overlaid, into a PNG. Needs the [plot] extra:
    pip install -e '.[plot]' in the checkout."""
    from seqxduce.inspection.curves import plot_curves

    path, (width, height) = plot_curves(list(runs), output, x=x_axis, extra=extra, dpi=dpi)
    click.echo(f"wrote {path} ({round(width * dpi)}x{round(height * dpi)} pixels, {len(runs)} run(s))")


@click.command("attention")
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--input", "source", required=True, help="the source sentence, as you would write it to decode")
@click.option("--target", help="the output to show attention for (default: what the run's decoder writes)")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS),
              help="encoder (self-attention), decoder (self-attention) or cross (encoder-decoder); repeatable; "
                   "default all three")
@click.option("--layers", help="layers (depth steps of a Universal Transformer) to draw, 1-based, e.g. 1,6 or -1 "
                               "for the last; default all")
@click.option("--heads", help="heads to draw, 1-based, e.g. 1,2; default all")
@click.option("--mean-heads", is_flag=True, help="draw the mean over heads instead of each head")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("attention.png"), show_default=True,
              help="the PNG to write")
@click.option("--dpi", type=click.IntRange(20, 600), default=100, show_default=True, help="pixels per inch")
@click.option("--set", "overrides", multiple=True, help="override a recipe value: section.key=value (repeatable)")
@click.option("--member", type=click.IntRange(min=1),
              help="of a run trained with [train] members = N: draw member K (default 1); each member attends in "
                   "its own way, so the ensemble has no attention of its own")
def attention(run: Path, source: str, target: str | None, kinds: tuple[str, ...], layers: str | None,
              heads: str | None, mean_heads: bool, output: Path, dpi: int, overrides: tuple[str, ...],
              member: int | None) -> None:
    """Draw a run's attention weights for one sentence as a PNG grid with the tokens on the axes (one row per
    kind and layer, one panel per head); a Universal Transformer's ponder counts appear beside the rows.
    Of a multi-member run, one member's (--member). Needs the [plot] extra: pip install -e '.[plot]' in the
    checkout."""
    from seqxduce.decoding.decode import load_run
    from seqxduce.inspection.attention_maps import attention_view
    from seqxduce.inspection.attention_plot import plot_attention
    from seqxduce.inspection.plotting import new_figure

    if heads is not None and mean_heads:
        raise UserError("attention: give --heads or --mean-heads, not both")
    new_figure(1, 1, "seqxduce attention")  # fail on a missing matplotlib before loading the model
    loaded = load_run(run, overrides, member=member or (1 if run.is_dir() else None))
    if loaded.run_members > 1 and member is None:
        click.echo(f"attention: {run} has {loaded.run_members} members ([train] members); drawing member 1 "
                   f"({loaded.checkpoint}); another with --member K, or name that member's checkpoint", err=True)
    view = attention_view(loaded, source, target)
    path, (width, height) = plot_attention(view, output, kinds=kinds or KINDS, layers=_numbers(layers, "--layers"),
                                           heads=_numbers(heads, "--heads"), mean_heads=mean_heads, dpi=dpi)
    click.echo(f"output: {view.output_text}", err=True)
    click.echo(f"wrote {path} ({round(width * dpi)}x{round(height * dpi)} pixels)")


COMMANDS = (info, plot, attention)
