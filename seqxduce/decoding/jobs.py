"""What `decode` and `score` do to one buffer of a streamed input (seqxduce.decoding.streaming) with seqxduce's
own search, as picklable jobs (and any engine's, through its decode and score: EngineDecodeJob, EngineScoreJob):
a job names the run and its settings, not the loaded model, so that a worker process loads its own (processor()),
while this process hands in the run it loaded (processor_for(run)).

A decode buffer's items are source lines, (source, prefix) pairs (`--prefix-file`, read in step with the
input), (source, prefix, constraints line) triples (`--constraints`: read_items) or a split's Examples; a score
buffer's are (source, target) pairs. Each gives a Piece: the lines of each output stream in input order (the
n-best lines and annotations numbered by their position in the whole input).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.changes import Change
    from seqxduce.decoding.decode import LoadedRun, Output
    from seqxduce.decoding.phrases import PhraseText
    from seqxduce.decoding.streaming import Buffer, Piece, Processor


@dataclass(frozen=True)
class RunSpec:
    """How a run is loaded for decoding (load_run's arguments), small enough to send to another process."""

    run: str
    overrides: tuple[str, ...] = ()
    ensemble: tuple[str, ...] = ()
    checkpoint: str | None = None
    changes: tuple[Change, ...] = ()

    def load(self) -> LoadedRun:
        from seqxduce.decoding.decode import load_run

        return load_run(Path(self.run), self.overrides, [Path(e) for e in self.ensemble], self.checkpoint,
                        changes=self.changes)


@dataclass(frozen=True)
class DecodeJob:
    """Decode buffers with a run: the one-best (or n-best) lines as `decode` prints them, with `annotate` the
    annotations' JSON lines, with `align` the alignments' Pharaoh lines; with `split`, the items are Examples,
    the output lines are the task's outputs and each item keeps its postprocessed output for the metric; with
    `as_targets` the output lines are the best hypotheses as training targets instead (decode.target_lines)."""

    spec: RunSpec
    annotate: bool = False
    align: bool = False
    split: bool = False
    prefix_where: str = "prefix "
    as_targets: bool = False
    constraint_where: str = "constraints of input "

    def processor(self) -> Processor:
        return self.processor_for(self.spec.load())

    def processor_for(self, run: LoadedRun) -> Processor:
        return lambda buffer: decode_piece(self, run, buffer)


def read_items(items: Sequence[Any]) -> tuple[list[Any], list[str] | None, list[PhraseText] | None]:
    """A decode buffer's items as its sources, their prefixes (None where no line has one) and their constraints
    (None without a constraints file), the constraint lines read (the file was checked line by line before the
    job began, decode_file)."""
    from seqxduce.decoding.phrases import PhraseText

    if not items or not isinstance(items[0], tuple):
        return list(items), None, None
    prefixes = [item[1] for item in items]
    constraints = [PhraseText.from_line(item[2], "--constraints") for item in items] if len(items[0]) > 2 else None
    return [item[0] for item in items], prefixes if any(prefixes) else None, constraints


def decode_piece(job: DecodeJob, run: LoadedRun, buffer: Buffer) -> Piece:
    """One buffer decoded: sorted by length and batched inside decode_sources, outputs in input order."""
    from seqxduce.decoding.decode import annotate_outputs, decode_sources, encode_prefixes
    from seqxduce.decoding.phrases import encode_phrases
    from seqxduce.decoding.streaming import Piece

    items = buffer.items
    prefixes = phrases = None
    if job.split:  # the examples themselves: their own target prefixes (a multilingual target's tag) are forced
        sources = list(items)
    else:
        sources, given, constraints = read_items(items)
        if given is not None:
            prefixes = encode_prefixes(run.tokenizers.tgt, given, job.prefix_where, first=buffer.start + 1)
        if constraints is not None and any(constraints):
            phrases = encode_phrases(run.tokenizers.tgt, constraints, getattr(run.recipe.decode.settings, "beam", 1),
                                     job.constraint_where, first=buffer.start + 1)
    outputs = decode_sources(run, sources, prefixes=prefixes, constraints=phrases)
    if job.annotate:
        annotate_outputs(run, outputs)
    return Piece(buffer.start, len(items), output_lines(job, run, outputs, buffer.start),
                 kept=[{"text": o.text, "figures": o.figures} for o in outputs] if job.split else [])


def output_lines(job: DecodeJob, run: LoadedRun, outputs: Sequence[Output], first: int) -> dict[str, list[str]]:
    from seqxduce.decoding.decode import format_annotations, stream_lines

    lines = {"output": stream_lines(run.task, outputs, first, job.split, job.as_targets)}
    if job.annotate:
        lines["annotations"] = format_annotations(outputs, first)
    if job.align:
        from seqxduce.decoding.alignments import align_outputs

        lines["alignments"] = align_outputs(run, outputs)
    return lines


@dataclass(frozen=True)
class ScoreJob:
    """Score buffers of (source, target) pairs with a run: `score`'s tab-separated lines."""

    spec: RunSpec
    normalize: bool = False

    def processor(self) -> Processor:
        return self.processor_for(self.spec.load())

    def processor_for(self, run: LoadedRun) -> Processor:
        return lambda buffer: score_piece(self, run, buffer)


def score_piece(job: ScoreJob, run: LoadedRun, buffer: Buffer) -> Piece:
    from seqxduce.decoding.scoring import format_scores, score_pairs
    from seqxduce.decoding.streaming import Piece

    scores = score_pairs(run, [s for s, _ in buffer.items], [t for _, t in buffer.items])
    return Piece(buffer.start, len(buffer.items), {"output": format_scores(scores, job.normalize)})


@dataclass(frozen=True)
class EngineDecodeJob:
    """Decode buffers with any engine through its decode() (a plugin's engine needs no job of its own): the lines
    DecodeJob writes, without annotations or alignments. A worker process opens its own load, kept for its life."""

    engine: Any  # an Engine: sent to a worker as its class and attributes
    spec: RunSpec
    split: bool = False
    prefix_where: str = "prefix "
    as_targets: bool = False

    def processor(self) -> Processor:
        return _opened_for_life(self.engine, self.spec, self.processor_for)

    def processor_for(self, loaded: Any) -> Processor:
        return lambda buffer: self._piece(loaded, buffer)

    def _piece(self, loaded: Any, buffer: Buffer) -> Piece:
        from seqxduce.decoding.decode import stream_lines
        from seqxduce.decoding.streaming import Piece

        items, prefixes, constraints = list(buffer.items), None, None
        if self.split:  # Examples: their own target prefixes (a multilingual target's tag) are forced
            prefixes = [ex.prefix for ex in items] if any(ex.prefix for ex in items) else None
            items = [ex.source for ex in items]
        else:  # (source, prefix[, constraints]): --prefix-file and --constraints read in step with the input
            items, prefixes, constraints = read_items(items)
        # constraints only to an engine that declares them (checked before the job began)
        phrased = {"constraints": constraints} if constraints is not None and any(constraints) else {}
        outputs = self.engine.decode(loaded, items, prefixes, self.prefix_where, **phrased)
        lines = stream_lines(loaded.task, outputs, buffer.start, self.split, self.as_targets)
        kept = [{"text": o.text, "figures": o.figures} for o in outputs] if self.split else []
        return Piece(buffer.start, len(outputs), {"output": lines}, kept)


@dataclass(frozen=True)
class EngineScoreJob:
    """Score buffers of (source, target) pairs with any engine through its score(): `score`'s lines."""

    engine: Any
    spec: RunSpec
    normalize: bool = False

    def processor(self) -> Processor:
        return _opened_for_life(self.engine, self.spec, self.processor_for)

    def processor_for(self, loaded: Any) -> Processor:
        return lambda buffer: self._piece(loaded, buffer)

    def _piece(self, loaded: Any, buffer: Buffer) -> Piece:
        from seqxduce.decoding.scoring import format_scores
        from seqxduce.decoding.streaming import Piece

        scores = self.engine.score(loaded, [s for s, _ in buffer.items], [t for _, t in buffer.items])
        return Piece(buffer.start, len(buffer.items), {"output": format_scores(scores, self.normalize)})


def _opened_for_life(engine: Any, spec: RunSpec, processor_for: Callable[[Any], Processor]) -> Processor:
    """A worker's processor over its own engine.open(spec): the load stays open as long as the processor lives
    (the `with` block's exit held by it), so that what open() set up (a temporary folder) outlasts no use."""
    stack = contextlib.ExitStack()
    process = processor_for(stack.enter_context(engine.open(spec)))
    return lambda buffer, _held=stack: process(buffer)
