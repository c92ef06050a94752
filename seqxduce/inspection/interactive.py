"""Try a trained run by typing: a prompt that decodes each line (readline editing and history, Ctrl-D to leave),
and the same over a pipe, one answer per line as each arrives.

Task plugins build their commands on this (`seqxduce translate`, `seqxduce parse`) through
`interactive_command`, giving only how one output is shown; seqxduce.api and this module are all they import.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from seqxduce.api import UserError

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.decode import LoadedRun, Output

HISTORY_LENGTH = 1000
Render = Callable[..., str]  # (task-formatted output text, **the command's extra options) -> what to print


def history_path(name: str) -> Path:
    """Where a command keeps its prompt history: $XDG_STATE_HOME/seqxduce/NAME_history (~/.local/state/...)."""
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "seqxduce" / f"{name}_history"


def typed_lines(prompt: str, history: Path | None, stdin: IO[str] | None = None) -> Iterator[str]:
    """Lines typed at a prompt when stdin is a terminal (Ctrl-D ends, Ctrl-C drops the line), else stdin's lines.

    At a terminal, readline gives line editing and a history kept in `history` across sessions."""
    stdin = stdin or sys.stdin
    if not stdin.isatty():
        for line in stdin:
            yield line.rstrip("\n").rstrip("\r")
        return
    readline = _readline(history)
    try:
        while True:
            try:
                if sys.stdout.isatty():
                    line = input(prompt)
                else:  # answers go to a file or pipe: keep the prompt out of them
                    sys.stderr.write(prompt)
                    sys.stderr.flush()
                    line = input()
            except EOFError:
                sys.stderr.write("\n")
                return
            except KeyboardInterrupt:
                sys.stderr.write("\n")
                continue
            yield line
    finally:
        if readline is not None and history is not None:
            try:
                history.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(history)
            except OSError as err:
                sys.stderr.write(f"warning: could not save the prompt history to {history}: {err}\n")


def _readline(history: Path | None) -> Any:
    """The readline module set up with the history file, or None where Python has no readline."""
    try:
        import readline
    except ImportError:  # e.g. Windows without pyreadline: input() still works, without history
        return None
    readline.set_history_length(HISTORY_LENGTH)
    if history is not None and history.is_file():
        try:
            readline.read_history_file(history)
        except OSError:
            pass
    return readline


def nbest_texts(output: Output, run: LoadedRun) -> list[tuple[float, str]]:
    """(score, task-formatted text) of each hypothesis, best first; the first is the output itself."""
    if not output.nbest:
        return [(0.0, output.text)]
    texts = [(output.nbest[0][1].score, output.text)]
    texts += [(hyp.score, run.task.postprocess(text, output.source).text) for text, hyp in output.nbest[1:]]
    return texts


def format_answer(output: Output, run: LoadedRun, nbest: int, render: Render, **options: Any) -> str:
    """The best output rendered, or with nbest > 1 each hypothesis with its score (a blank line after them)."""
    if nbest <= 1:
        return render(output.text, **options)
    parts = []
    for rank, (score, text) in enumerate(nbest_texts(output, run)[:nbest], start=1):
        shown = render(text, **options)
        parts.append(f"#{rank} score {score:.4f}\n{shown}" if "\n" in shown.rstrip("\n") else f"{score:.4f}\t{shown}")
    return "\n".join(parts) + "\n"


def prompt_loop(run: LoadedRun, render: Render, nbest: int = 1, prompt: str = "> ", history: Path | None = None,
                stdin: IO[str] | None = None, prepare: Callable[..., str] | None = None, **options: Any) -> int:
    """Decode each line typed (or piped) with the run and print its answer; returns the lines answered.

    prepare(line, **options), if given, turns a line into the source to decode (e.g. word tokenization). An
    empty line gets an empty answer; a line the task cannot take is reported on stderr and the loop goes on."""
    from seqxduce.decoding.decode import decode_lines

    terminal = (stdin or sys.stdin).isatty()
    answered = 0
    for line in typed_lines(prompt, history, stdin):
        if not line.strip():
            if not terminal:
                click.echo("")
            continue
        try:
            source = prepare(line, **options) if prepare is not None else line
            output = decode_lines(run, [source])[0]
        except UserError as err:
            click.echo(f"error: {err}", err=True)
            continue
        except KeyboardInterrupt:  # at a terminal, Ctrl-C while decoding drops that line, as at the prompt
            if not terminal:
                raise
            click.echo("(interrupted)", err=True)
            continue
        click.echo(format_answer(output, run, nbest, render, **options).rstrip("\n"))
        sys.stdout.flush()
        answered += 1
    return answered


def interactive_command(name: str, help: str, render: Render, options: Sequence[click.Option] = (),
                        prepare: Callable[..., str] | None = None) -> click.Command:
    """A `seqxduce NAME RUN [--nbest N] [--set k=v]` command running prompt_loop with `render`.

    options: extra click options, passed by name to render (and to prepare); prepare(line, **options), if
    given, turns each typed line into the source to decode (e.g. word tokenization)."""

    def command(run: Path, nbest: int, overrides: tuple[str, ...], history: Path | None, **extra: Any) -> None:
        from seqxduce.decoding.changes import flag_changes
        from seqxduce.decoding.decode import load_run

        loaded = load_run(run, overrides, changes=flag_changes(nbest=nbest))
        if sys.stdin.isatty():
            click.echo(f"seqxduce {name}: {loaded.described()}; type a line and press Enter, Ctrl-D to leave",
                       err=True)
        prompt_loop(loaded, render, nbest, prompt=f"{name}> ", history=history or history_path(name),
                    prepare=prepare, **extra)

    params = [
        click.Argument(["run"], metavar="RUN", type=click.Path(path_type=Path)),
        click.Option(["--nbest"], type=click.IntRange(min=1), default=1, show_default=True,
                     help="show the N best outputs, each with its score"),
        click.Option(["--set", "overrides"], multiple=True,
                     help="override a recipe value: section.key=value (repeatable), e.g. --set decode.beam=8"),
        click.Option(["--history"], type=click.Path(path_type=Path),
                     help=f"prompt history file (default {history_path(name)})"),
        *options,
    ]
    return click.Command(name, callback=command, params=params, help=help)
