"""A student's distilled training set (sequence-level knowledge distillation, Kim & Rush 2016): the training
split's sources, their original targets and the teacher's outputs for them, as three files of one line per pair in
one folder, keyed by what decides the teacher's outputs (its checkpoints' bytes, its search, the data); and the task
a student trains with, whose training split reads that folder (and, with [distill] member_outputs, the sets of each
of the teacher's members alone: one folder each, keyed the same way) and whose other splits are the task's own.

`seqxduce distill` writes the folder (distillation/: the sources and originals here, the teacher's outputs by the
streamed, resumable decode) and sets [distill] targets to it; every process of the student's run (each rank, each
member, each restart) then reads the same files through DistilledTask. What the student's prepared data are keyed by
is the files' names, sizes and times (prepare.data_fingerprint through Task.data_files), the mix of originals
included, so another teacher, search or ratio prepares its own."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqxduce.api import Directed, Direction, Example, Postprocessed, Report, Task, UserError, count_lines
from seqxduce.atomic import atomic_write, atomic_write_text, write_once_text
from seqxduce.recipe import Recipe

SOURCES, ORIGINALS, TARGETS, RECORD = "sources.txt", "originals.txt", "targets.txt", "distilled.json"
# per pair, beside the sources, and only when some pair has one: its training corpus (Example.corpus, a task of
# several corpora) and the target prefix decoding forces (Example.prefix: a multilingual task's target tag)
CORPORA, PREFIXES = "corpora.txt", "prefixes.txt"
FORMAT = "seqxduce-distilled-1"
# the seed of the originals' share, fixed: a student's [train] seed changes its parameters, not its data
MIX_SEED = 20161


def format_key(fmt: str, parts: Mapping[str, Any]) -> str:
    """A cache folder's key: a digest of its format's name and of what decides its contents."""
    text = json.dumps({"format": fmt, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def distilled_key(parts: Mapping[str, Any]) -> str:
    """The folder's key: a digest of what decides its contents (the parts: distillation.making.find_sets)."""
    return format_key(FORMAT, parts)


@dataclass(frozen=True)
class DistilledSet:
    """The folder of one distilled training set. Written in two steps that each survive a stop: the sources and
    originals at once (atomically), then the teacher's outputs by a resumable decode (targets.txt.partial and its
    record until it completes); the record, written last, says the set is whole."""

    folder: Path

    @property
    def sources(self) -> Path:
        return self.folder / SOURCES

    @property
    def originals(self) -> Path:
        return self.folder / ORIGINALS

    @property
    def targets(self) -> Path:
        return self.folder / TARGETS

    @property
    def corpora(self) -> Path:
        return self.folder / CORPORA

    @property
    def prefixes(self) -> Path:
        return self.folder / PREFIXES

    @property
    def record_file(self) -> Path:
        return self.folder / RECORD

    def record(self) -> dict[str, Any] | None:
        """What the finished set holds (pairs, key and its parts), or None while it is not finished."""
        try:
            return json.loads(self.record_file.read_text())
        except (OSError, ValueError):
            return None

    @property
    def complete(self) -> bool:
        return self.record() is not None and self.targets.is_file()

    def has_sources(self) -> bool:
        return self.sources.is_file() and self.originals.is_file()

    def write_sources(self, examples: Iterator[Example], where: str) -> int:
        """The split's sources and original targets, one per line, and beside them, when some example has one, its
        corpus (corpora.txt) and its forced target prefix (prefixes.txt), written atomically (a stop leaves all or
        none: the originals, renamed last, say they are there); a text holding a line break, which one line per
        pair cannot carry, is refused naming the pair."""
        self.folder.mkdir(parents=True, exist_ok=True)
        count = 0
        with atomic_write(self.originals, "w", encoding="utf-8") as tgt:
            with atomic_write(self.sources, "w", encoding="utf-8") as src:
                with _unless_used(self.corpora) as corpora, _unless_used(self.prefixes) as prefixes:
                    for count, example in enumerate(examples, 1):
                        for side, text in (("source", example.source), ("target", example.target),
                                           ("prefix", example.prefix), ("corpus", example.corpus)):
                            if "\n" in text or "\r" in text:
                                raise UserError(f"{where}: the {side} of training pair {count} holds a line break; "
                                                "distillation decodes one source per line: remove it from the data")
                        src.write(example.source + "\n")
                        tgt.write(example.target + "\n")
                        corpora.write(example.corpus)
                        prefixes.write(example.prefix)
        if count == 0:
            raise UserError(f"{where}: the training split is empty: nothing to distill")
        return count

    def lines_of(self, path: Path) -> Iterator[str]:
        """A per-pair file's lines (corpora.txt, prefixes.txt), or "" for every pair when the set has none."""
        if path.is_file():
            with open(path, encoding="utf-8") as handle:
                yield from (line.rstrip("\n") for line in handle)
        else:
            while True:
                yield ""

    def finish(self, pairs: int, parts: Mapping[str, Any]) -> None:
        """Mark the set whole, once the teacher's outputs are final; refused when their count is not the
        sources' (a wrong result never passes)."""
        outputs = count_lines(self.targets)
        if outputs != pairs:
            raise UserError(f"{self.targets}: {outputs} teacher outputs for {pairs} sources; remove {self.folder} "
                            "and distill again")
        atomic_write_text(self.record_file, json.dumps({"format": FORMAT, "pairs": pairs, **parts}, indent=1,
                                                       sort_keys=True, default=str) + "\n")

    def mix_file(self, ratio: float) -> Path:
        """A small file naming the share of originals, so that a mix is part of the prepared data's key (their
        files' names, sizes and times; see prepare.data_fingerprint). Written once, never rewritten: the ranks
        of a torchrun world each ask for it at once, and a second writer replacing the first's file gave the
        ranks two times, two keys, and a rank waiting for a dataset nobody writes."""
        path = self.folder / f"mix-{ratio!r}.json"
        write_once_text(path, json.dumps({"original_ratio": ratio, "seed": MIX_SEED}) + "\n")
        return path


class _PerPair:
    """One line per pair into an atomic writer, kept only if some line is not empty."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.used = handle, False

    def write(self, text: str) -> None:
        self.used = self.used or bool(text)
        self.handle.write(text + "\n")


class _Unused(Exception):
    """Raised inside an atomic writer to drop its file: no pair had a line for it."""


@contextmanager
def _unless_used(path: Path) -> Iterator[_PerPair]:
    """A per-pair file written atomically when some pair wrote a line into it, else not written at all."""
    try:
        with atomic_write(path, "w", encoding="utf-8") as handle:
            lines = _PerPair(handle)
            yield lines
            if not lines.used:
                raise _Unused
    except _Unused:
        pass


def _check_same_sources(member: DistilledSet, distilled: DistilledSet, record: Mapping[str, Any]) -> None:
    """A member's set trains beside the ensemble's only when it holds outputs for the same sources (the same data
    and task in its key, as many pairs): refused naming both folders otherwise."""
    found = member.record()
    if found is None:
        raise UserError(f"[distill] member_targets: {member.folder} is not a finished distilled set (no {RECORD}); "
                        "make it with `seqxduce distill TEACHER_RUN RECIPE --out RUN`")
    for part in ("pairs", "data", "task"):
        if found.get(part) != record.get(part):
            raise UserError(f"[distill] member_targets: {member.folder} was made from other sources ({part}) than "
                            f"the targets {distilled.folder}; distill again with the same [task] for both")


def originals_chosen(pairs: int, ratio: float) -> np.ndarray:
    """Which original pairs train beside the distilled ones: a fixed-seed choice of round(ratio * pairs)."""
    chosen = np.zeros(pairs, dtype=bool)
    take = round(ratio * pairs)
    if take:
        chosen[np.random.default_rng(MIX_SEED).choice(pairs, size=take, replace=False)] = True
    return chosen


class DistilledTask(Task):
    """The student's task: the training split is the teacher's outputs for the task's training sources (and a
    share of the original pairs beside them, each right after its distilled pair); every other split, the
    scoring and the output format are the task's own."""

    def __init__(self, task: Task, distilled: DistilledSet, original_ratio: float = 0.0,
                 members: Sequence[DistilledSet] = ()):
        record = distilled.record()
        if record is None:
            raise UserError(f"[distill] targets = {distilled.folder}: not a finished distilled set (no {RECORD}); "
                            "make it with `seqxduce distill TEACHER_RUN RECIPE --out RUN`")
        self.task, self.distilled, self.original_ratio = task, distilled, original_ratio
        self.pairs = int(record["pairs"])
        self.members = tuple(members)
        for member in self.members:
            _check_same_sources(member, distilled, record)
        self.splits = task.splits
        self.group_name = task.group_name

    def prepare(self, data_dir: Path) -> None:
        self.task.prepare(data_dir)

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        return list(self.stream(split, data_dir)) if split == "train" else self.task.examples(split, data_dir)

    def stream(self, split: str, data_dir: Path) -> Iterator[Example]:
        if split != "train":
            yield from self.task.stream(split, data_dir)
            return
        chosen = originals_chosen(self.pairs, self.original_ratio)
        d = self.distilled
        with ExitStack() as files:
            src, out, orig, *more = (files.enter_context(open(path, encoding="utf-8")) for path in
                                     (d.sources, d.targets, d.originals, *(m.targets for m in self.members)))
            # each pair keeps its corpus (batches are drawn across the corpora as the task's own are) and its
            # forced prefix, as the task's training examples have them
            kept = zip(d.lines_of(d.corpora), d.lines_of(d.prefixes))
            for i, (source, target, original, *others) in enumerate(zip(src, out, orig, *more, strict=True)):
                source = source.rstrip("\n")
                corpus, prefix = next(kept)
                yield Example(source, target.rstrip("\n"), corpus=corpus, prefix=prefix)
                for other in others:  # each member's own output right after the ensemble's
                    yield Example(source, other.rstrip("\n"), corpus=corpus, prefix=prefix)
                if chosen[i]:
                    yield Example(source, original.rstrip("\n"), corpus=corpus, prefix=prefix)

    def data_files(self, split: str, data_dir: Path) -> list[Path] | None:
        if split != "train":
            return self.task.data_files(split, data_dir)
        d = self.distilled
        beside = [path for path in (d.corpora, d.prefixes) if path.is_file()]
        return [d.sources, d.targets, d.originals, *beside, *(m.targets for m in self.members),
                d.mix_file(self.original_ratio)]

    def corpus_weights(self) -> dict[str, float]:
        return self.task.corpus_weights()

    def reserved_symbols(self) -> tuple[str, ...]:
        return self.task.reserved_symbols()

    def directed(self, example: Example, direction: Direction) -> Directed:
        return self.task.directed(example, direction)

    def as_teacher_of(self, student: Task) -> str:
        return self.task.as_teacher_of(student)

    def postprocess(self, hypothesis: str, source: str) -> Postprocessed:
        return self.task.postprocess(hypothesis, source)

    def training_target(self, hypothesis: str, source: str) -> str:
        return self.task.training_target(hypothesis, source)

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        return self.task.score(hypotheses, references, sources)

    def for_group(self, group: str) -> Task:
        return self.task.for_group(group)

    def score_outputs(self, outputs: Sequence[Postprocessed], references: list[str],
                      sources: list[str] | None = None) -> Report:
        return self.task.score_outputs(outputs, references, sources)

    def score_references(self, hypotheses: list[str], references: list[list[str]],
                         sources: list[str] | None = None) -> Report:
        return self.task.score_references(hypotheses, references, sources)

    def score_files(self, hypothesis_file: Path, reference_file: Path) -> Report:
        return self.task.score_files(hypothesis_file, reference_file)

    def __getattr__(self, name: str) -> Any:
        if name == "task":  # not set yet (an object being unpickled): no task to ask
            raise AttributeError(name)
        # what a task plugin adds beyond the contract (a tree beam's constraint, a parse task's grammar) is the
        # task's own: only the training split is replaced
        return getattr(self.task, name)


def student_task(recipe: Recipe, task: Task) -> Task:
    """The task a run trains with: the recipe's own, or, when [distill] targets names a distilled set, the task
    whose training split is that set. A student recipe given to `seqxduce train` alone is refused in one line."""
    d = recipe.distill
    check_student(recipe)
    if not d.targets:
        return task
    members = [DistilledSet(recipe.path(folder)) for folder in d.member_targets]
    return DistilledTask(task, DistilledSet(recipe.path(d.targets)), d.original_ratio, members)


def check_student(recipe: Recipe) -> None:
    """A student recipe ([distill] teacher, original_ratio or member_outputs, no distilled set yet; or word_kd, no
    teacher run) is trained by `seqxduce distill`, which makes its set and names its teacher: refused in one line
    anywhere else."""
    d = recipe.distill
    if d.word_kd and not d.teacher_run:
        raise UserError(f"{recipe.source}: [distill] word_kd = {d.word_kd:g} learns from a teacher's distributions: "
                        f"run `seqxduce distill TEACHER_RUN {recipe.source} --out RUN` (which names the teacher), or "
                        "set distill.teacher_run to the teacher's run directory")
    if not d.targets and (d.teacher or d.original_ratio or d.member_outputs):
        raise UserError(f"{recipe.source}: [distill] makes a student, which trains on its teacher's outputs: run "
                        f"`seqxduce distill TEACHER_RUN {recipe.source} --out RUN`")
