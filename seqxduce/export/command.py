"""The `seqxduce export` command (the work is in exporting.py, imported when the command runs), and the
`--engine` option that decode, score and serve take: its choices are the registry's engines (decoding/engines.py,
engine_choice.py), read when click first needs them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from seqxduce.export.engine_choice import engine_names

ENGINE_HELP = ("the inference engine (`seqxduce plugins --kind engine` lists them with what each can do): seqxduce's "
               "own search; ctranslate2: decode or score with the run (exported into a temporary folder first) or an "
               "export folder from `seqxduce export` with CTranslate2, through the same tokenizers and metric, needs "
               "the extra (pip install -e '.[ctranslate2]'); or a plugin's")


class EngineChoice(click.Choice):
    """The engines registered, as a click.Choice read from the registry each time click asks (help, parsing,
    completion), so that a plugin's engine is offered by every command that takes --engine, and defining the
    commands loads no plugin."""

    def __init__(self) -> None:
        super().__init__(())

    @property  # type: ignore[override]
    def choices(self) -> Sequence[str]:
        return tuple(engine_names())

    @choices.setter
    def choices(self, value: Any) -> None:  # click.Choice's __init__ sets them; the registry holds them
        pass


def engine_option(help: str = ENGINE_HELP) -> Any:
    """--engine as decode, score and serve take it: the registry's engines, seqxduce's own by default."""
    return click.option("--engine", "engine_name", type=EngineChoice(), default="seqxduce", show_default=True,
                        help=help)


@click.command()
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--to", "engine", type=click.Choice(["ctranslate2", "huggingface"]), default="ctranslate2",
              show_default=True, help="the inference engine to export to (huggingface: a MarianMTModel folder for "
                                      "transformers, with its tokenizer, generation defaults and model card)")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="the export folder (new, empty, or an earlier export with --overwrite)")
@click.option("--quantization", type=click.Choice(["none", "int8", "int8_float32", "float16"]), default="none",
              show_default=True, help="weight type in the export (none keeps float32)")
@click.option("--member", type=int, help="with [train] members = N: the member to export (1..N)")
@click.option("--overwrite", is_flag=True, help="replace an earlier export in --output")
def export(run: Path, engine: str, output: Path, quantization: str, member: int | None, overwrite: bool) -> None:
    """Convert a trained run's model (its averaged checkpoint if any, else the latest) for an inference engine.

    The folder also holds the run's tokenizer files, its recipe and seqxduce_export.json (checkpoint, steps,
    versions); decode it with `seqxduce decode DIR --engine ctranslate2 --split test`."""
    from seqxduce.export.exporting import export_run

    done = export_run(run, output, engine, quantization, member, overwrite)
    meta = done.metadata
    steps = meta["averaged_steps"] or [meta["step"]]
    click.echo(f"exported {meta['checkpoint']} (steps {', '.join(map(str, steps))}) to {done.directory} "
               f"for {engine} ({quantization})")
