"""A distilled set made once: the student recipe's training sources written out, the teacher's outputs for them by
the streamed, resumable decode (every core, or torchrun's ranks), and the set marked whole. A second student, a
restart or another rank finds it by its key and decodes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqxduce import components
from seqxduce.api import Task, count_lines
from seqxduce.console import console
from seqxduce.corpus.distilled import DistilledSet, distilled_key
from seqxduce.corpus.prepare import Examples, data_fingerprint
from seqxduce.corpus.token_cache import cache_root
from seqxduce.decoding.stream_files import partial_path, record_path
from seqxduce.distillation.teacher import Teacher
from seqxduce.files import file_digest
from seqxduce.recipe import Recipe
from seqxduce.settings_check import keyed_values
from seqxduce.torchrun import is_rank_zero

# decode(sources, prefixes, targets, resume): the teacher's outputs for a file of sources, each forced to start with
# its line of prefixes (None: no prefixes), streamed into targets (seqxduce.decode_file with the teacher's run,
# search and processes; made by the caller)
Decode = Callable[[Path, "Path | None", Path, bool], None]
DISTILLED_PREFIX = "distilled-"


@dataclass(frozen=True)
class PlannedSet:
    """A distilled set by its key, before it is made: its folder, what the key is made of, the split it decodes."""

    distilled: DistilledSet
    parts: dict[str, Any]
    examples: Examples


def find_sets(student: Recipe, teachers: Sequence[Teacher], root: Path | None = None) -> list[PlannedSet]:
    """The distilled set of the student recipe's training split by each teacher (the ensemble, then its members
    alone with [distill] member_outputs), by its key (nothing decoded yet): what a key is made of is its teacher's
    (Teacher.key_parts), the training data's bytes (data_content, read once for all) and the student's [task]."""
    task = components.build_task(student)
    data_dir = components.data_dir(student)
    for teacher in teachers:  # a teacher that cannot read the student's sources as written: one line, before all
        notice = components.build_task(teacher.recipe).as_teacher_of(task)
        if notice and is_rank_zero():
            console.print(f"distill: notice: {notice}", markup=False, highlight=False)
    if is_rank_zero():
        task.prepare(data_dir)
    examples = Examples(task, data_dir)
    # "written": the targets are the teacher's target texts before the task's postprocess (decode_file's
    # as_targets); sets written as postprocessed outputs, which the parsing task's student cannot train on, are
    # other sets
    shared = {"data": data_content(task, data_dir, examples),
              "task": keyed_values(student.compared()["task"], student.task.settings), "written": "targets"}
    if task.corpus_weights():  # each pair's corpus and forced prefix kept beside it: sets made before did not
        shared["per_pair"] = ["corpus", "prefix"]
    planned = []
    for teacher in teachers:
        parts = {"teacher": teacher.key_parts(), **shared}
        folder = (root or cache_root()) / (DISTILLED_PREFIX + distilled_key(parts))
        planned.append(PlannedSet(DistilledSet(folder), parts, examples))
    return planned


def data_content(task: Task, data_dir: Path, examples: Examples) -> str:
    """The training split's bytes as a key part: its files' digests when the task names them, else its examples'
    text. Not their names, sizes and times, as the prepared data's key takes them (prepare.data_fingerprint): the
    set costs hours of decoding at scale and hashing its sources seconds, so a copy of the data elsewhere, a fresh
    checkout or a touched file must find the set it already made."""
    files = task.data_files("train", data_dir)
    if not files:
        return data_fingerprint(task, data_dir, examples)
    return distilled_key({"files": [file_digest(Path(path)) for path in files]})


def make_set(planned: PlannedSet, teacher: Teacher, decode: Decode, where: str) -> DistilledSet:
    """The planned set made (continuing a stopped decode of it), or found made; under torchrun rank 0 writes the
    sources and every rank decodes its share."""
    distilled = planned.distilled
    main = is_rank_zero()
    if distilled.complete:
        if main:
            console.print(f"distill: the teacher's outputs for these sources are made already: {distilled.folder}")
        return distilled
    if main and not distilled.has_sources():
        count = distilled.write_sources(iter(planned.examples), where)
        console.print(f"distill: {count} training sources to decode with the teacher {teacher.described()} "
                      f"into {distilled.folder}")
    _await_sources(distilled)
    targets = distilled.targets
    started = any(p.exists() for p in (targets, partial_path(targets), record_path(targets)))
    # a multilingual task whose target starts with its language's tag: the teacher is forced to start with it,
    # so that it writes the pair's direction and its output is the student's training target, tag included
    prefixes = distilled.prefixes if distilled.prefixes.is_file() else None
    decode(distilled.sources, prefixes, targets, started)
    if main:
        distilled.finish(count_lines(distilled.sources), planned.parts)
    return distilled


def _await_sources(distilled: DistilledSet) -> None:
    """Under torchrun, the ranks but 0 wait for the sources it writes (atomically: both files or none). If rank 0
    fails instead, torchrun ends the others."""
    while not distilled.has_sources():
        time.sleep(0.5)
