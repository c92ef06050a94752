"""The direction a user chooses where a model is used (seqxduce.api.Direction: `decode --tgt-lang`, a file's
column, a serve request's "tgt_lang", the Python functions' tgt_lang=), applied to the inputs through the task
(Task.directed) before any engine sees them: a source as the model reads it and a prefix the search forces, or a
target to score, written as the task's own examples are. So every engine, worker process and torchrun rank
decodes what it always decoded, and serve's cost counts a forced tag as it counts any prefix.

The core knows no languages: it passes the choice through as text, puts where it was given in front of the task's
refusal, and says each of the task's notices once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from seqxduce.api import Direction, Example, Task, UserError

# a line of a file whose first column names its direction: LANG<TAB>SOURCE (`--tgt-lang-column`)
COLUMN_SEPARATOR = "\t"


class Directions:
    """One command's or request's choices, applied to its inputs: the source language stated once (`--src-lang`,
    "" for unknown), the targets per input; each notice of the task said once through `say`."""

    def __init__(self, task: Task, source: str = "", say: Callable[[str], None] | None = None):
        self.task, self.source, self.say = task, source, say
        self.notices: list[str] = []

    def apply(self, example: Example, target: str, where: str) -> Example:
        """The example as the model reads it for `target` ("": as it is); a target the task refuses is refused
        naming `where`."""
        if not target:
            return example
        try:
            done = self.task.directed(example, Direction(target, self.source))
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
        if done.notice and done.notice not in self.notices:
            self.notices.append(done.notice)
            if self.say is not None:
                self.say(f"notice: {done.notice}")
        return done.example

    def check(self, targets: Iterable[str], where: Callable[[str], str]) -> None:
        """Refuse, before any input is decoded, a target the task does not know (its notices said now)."""
        for target in targets:
            self.apply(Example("", ""), target, where(target))

    def decode_inputs(self, sources: Sequence[str], prefixes: Sequence[str] | None, targets: Sequence[str],
                      where: Callable[[int], str]) -> tuple[list[str], list[str]]:
        """(sources, prefixes) as the model reads them, one target per source; where(i) names input i."""
        given = prefixes if prefixes is not None else [""] * len(sources)
        done = [self.apply(Example(s, "", prefix=p), t, where(i))
                for i, (s, p, t) in enumerate(zip(sources, given, targets))]
        return [ex.source for ex in done], [ex.prefix for ex in done]

    def score_inputs(self, sources: Sequence[str], targets: Sequence[str], chosen: Sequence[str],
                     where: Callable[[int], str]) -> tuple[list[str], list[str]]:
        """(sources, targets) of pairs to score, written as training wrote its pairs."""
        done = [self.apply(Example(s, t), c, where(i)) for i, (s, t, c) in enumerate(zip(sources, targets, chosen))]
        return [ex.source for ex in done], [ex.target for ex in done]


def per_input(tgt_lang: str | Sequence[str] | None, count: int, where: str) -> list[str]:
    """The Python functions' tgt_lang= as one target per input: one for all (a string), one per input (a list,
    "" for no choice), or none (None)."""
    if tgt_lang is None:
        return [""] * count
    if isinstance(tgt_lang, str):
        return [tgt_lang] * count
    chosen = list(tgt_lang)
    if len(chosen) != count or not all(isinstance(t, str) for t in chosen):
        raise UserError(f"{where}: {len(chosen)} languages for {count} inputs; give one string for all, or one per "
                        "input (\"\" for none)")
    return chosen


def check_source_alone(tgt_lang: object, src_lang: str | None, where: str) -> None:
    """A source language qualifies a chosen target: refused alone."""
    if src_lang and not tgt_lang:
        raise UserError(f"{where}: the source language is stated with a target language; give the target too")


def split_column(line: str, where: str) -> tuple[str, str]:
    """(target, text) of a line LANG<TAB>TEXT; an empty LANG is no choice."""
    target, tab, text = line.partition(COLUMN_SEPARATOR)
    if not tab:
        raise UserError(f"{where}: no tab; with --tgt-lang-column each line is LANG<TAB>SOURCE (an empty LANG for "
                        "--tgt-lang's language, or none)")
    return target.strip(), text


def column_languages(lines: Iterable[str], where: Callable[[int], str]) -> tuple[int, set[str]]:
    """A file of LANG<TAB>TEXT lines read once before its decode: its line count and its languages."""
    count, seen = 0, set()
    for count, line in enumerate(lines, start=1):  # noqa: B007 - the count is the last number
        seen.add(split_column(line, where(count))[0])
    return count, seen


def directed_items(items: Iterable, directions: Directions, default: str, column: bool, scoring: bool,
                   where: Callable[[int], str]) -> Iterator[tuple[str, ...]]:
    """A streamed input's items (a source line, a (source, prefix) or a (source, target) pair) as the model reads
    them for each line's direction: the line's column (column), else `default`. A decode's items become (source,
    prefix) pairs, a score's (source, target) pairs."""
    for number, item in enumerate(items, start=1):
        first, second, *rest = item if isinstance(item, tuple) else (item, "")  # rest: a constraints line
        target = default
        if column:
            target, first = split_column(first, where(number))
            target = target or default
        if scoring:
            ex = directions.apply(Example(first, second), target, where(number))
            yield ex.source, ex.target
        else:
            ex = directions.apply(Example(first, "", prefix=second), target, where(number))
            yield ex.source, ex.prefix, *rest


def check_call(where: str, tgt_lang: object, src_lang: str | None, inputs: Sequence[str],
               prefixes: Sequence[str] | None = None) -> None:
    """A Python call's languages (decode(), score()) checked before any load: a source language alone, or as many
    prefixes as sources when the languages are chosen, is refused in one line."""
    check_source_alone(tgt_lang, src_lang, f"{where} src_lang")
    if tgt_lang is not None and prefixes is not None and len(prefixes) != len(inputs):
        raise UserError(f"{where}: {len(prefixes)} prefixes for {len(inputs)} sources; give one per source")


def decode_directed(engine: Any, loaded: Any, sources: Sequence[str], prefixes: Sequence[str] | None,
                    prefix_where: str, annotate: bool, tgt_lang: str | Sequence[str] | None,
                    src_lang: str | None, **phrased: Any) -> list[Any]:
    """engine.decode of a Python call's sources (seqxduce.decode), each written for its language first (tgt_lang:
    one for all, or one per source); the outputs carry the sources as given, not as the model read them. phrased:
    constraints=..., for an engine that declares them."""
    if tgt_lang is None:
        return engine.decode(loaded, sources, prefixes, prefix_where, annotate, **phrased)
    read, forced = _said(loaded, src_lang).decode_inputs(sources, prefixes, per_input(tgt_lang, len(sources),
                                                                                      "tgt_lang"), _where(tgt_lang))
    outputs = engine.decode(loaded, read, forced if any(forced) else None, prefix_where, annotate, **phrased)
    for output, source in zip(outputs, sources):
        output.source = source
    return outputs


def score_directed(engine: Any, loaded: Any, sources: Sequence[str], targets: Sequence[str],
                   tgt_lang: str | Sequence[str] | None, src_lang: str | None) -> list[Any]:
    """engine.score of a Python call's pairs (seqxduce.score), each written as training wrote its pairs."""
    if tgt_lang is None:
        return engine.score(loaded, sources, targets)
    if len(sources) != len(targets):
        raise UserError(f"score: {len(sources)} sources for {len(targets)} targets; give one target per source")
    read, scored = _said(loaded, src_lang).score_inputs(sources, targets, per_input(tgt_lang, len(sources),
                                                                                    "tgt_lang"), _where(tgt_lang))
    return engine.score(loaded, read, scored)


def _said(loaded: Any, src_lang: str | None) -> Directions:
    """The Directions of a Python call over what an engine loaded (its task), its notices said on stderr."""
    from seqxduce.console import console

    return Directions(loaded.task, src_lang or "", lambda line: console.print(line, markup=False, highlight=False))


def _where(tgt_lang: str | Sequence[str]) -> Callable[[int], str]:
    """How a refusal names the language of input i: tgt_lang, or tgt_lang[i] for one per input."""
    return (lambda i: "tgt_lang") if isinstance(tgt_lang, str) else (lambda i: f"tgt_lang[{i}]")
