"""The `seqxduce ponder` command this plugin adds through the register_commands hook (torch loads on use)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from seqxduce.api import read_lines


@click.command("ponder")
@click.argument("run", metavar="RUN_DIR|CHECKPOINT", type=click.Path(path_type=Path))
@click.option("--input", "input_file", required=True, type=click.Path(path_type=Path, allow_dash=True),
              help="sources, one per line ('-' for stdin)")
@click.option("--output", type=click.Path(path_type=Path), help="write the counts here instead of stdout")
@click.option("--set", "overrides", multiple=True, help="override a recipe value: section.key=value (repeatable)")
def ponder_command(run: Path, input_file: Path, output: Path | None, overrides: tuple[str, ...]) -> None:
    """Write the depth steps each source position takes in a Universal Transformer's encoder (ACT ponder
    counts): one line per source, one integer per token and a last one for the eos the encoder appends."""
    from seqxduce.decoding import load_run

    from .ponder import format_counts, ponder_counts

    if str(input_file) == "-":
        sources = [line.rstrip("\n").rstrip("\r") for line in sys.stdin]
    else:
        sources = read_lines(input_file)
    loaded = load_run(run, overrides)
    lines = format_counts(ponder_counts(loaded, sources, loaded.recipe.decode.core.batch_size))
    text = "".join(line + "\n" for line in lines)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
