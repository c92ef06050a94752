"""`seqxduce distill` as one typed request: Distill names the teacher run (its overrides and checkpoint), the student
recipe and its run, how the run starts, the teacher's engine and processes; distill(request, train, join) does it
in one call: the teachers found as decode finds them, the student's run checked before any decoding, each set made
or found, then the student trained on them by the `train` the caller hands in (engine.train), in one torchrun
world that `join` opens (training.distributed.setup): distillation imports no training."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypeVar

from seqxduce.api import UserError
from seqxduce.console import console
from seqxduce.decoding.engines import Engine
from seqxduce.distillation.making import Decode, find_sets, make_set
from seqxduce.distillation.teacher import Teacher, check_named_teacher, find_teacher, member_teachers, same_tokenizer
from seqxduce.recipe import Recipe, load_recipe
from seqxduce.run_start import RunStart, check_student_run
from seqxduce.rundir import CHECKPOINT_CHOICES
from seqxduce.torchrun import is_rank_zero

T = TypeVar("T")

# what a stop of distill's decode says continues it: its own command resumes the decode by itself (--auto-resume
# too), while --resume asks for a student checkpoint that no run has before its set is made
DISTILL_CONTINUED_BY = "the same command (or it with --auto-resume)"


class World(Protocol):
    """The torchrun world a distillation decodes and trains in (training.distributed.World), closed at the end."""

    def close(self) -> None: ...


# train(recipe, out, start, overrides): the student trained as seqxduce.train trains it
Train = Callable[[Path, Path, RunStart, tuple[str, ...]], T]
# join(device, collective_timeout): the torchrun world joined once for the decode and the training
Join = Callable[[str, float], World]


@dataclass(frozen=True, kw_only=True)
class Distill:
    """What `seqxduce distill TEACHER RECIPE` asks (see seqxduce.engine.distill): the teacher run, its
    --teacher-set overrides and --checkpoint (as decode --checkpoint takes it); the student recipe, its --set
    overrides, its run directory (None: runs/<recipe name>) and start; the teacher's engine (seqxduce's, chosen
    above decoding) and decode processes."""

    teacher: Path
    recipe: Path
    engine: Engine
    out: Path | None = None
    start: RunStart = field(default_factory=RunStart)
    overrides: tuple[str, ...] = ()
    teacher_overrides: tuple[str, ...] = ()
    checkpoint: str | None = None
    processes: int | None = None

    @property
    def out_dir(self) -> Path:
        return self.out if self.out is not None else Path("runs") / self.recipe.stem


def distill(request: Distill, train: Train[T], join: Join) -> T:
    """Make (or find) the student's distilled sets with the teacher, then train the student on them with `train`,
    under torchrun in one process group (`join`): joining a second time reads the first group's addresses from
    torchrun's store (pytorch/pytorch#135712) and the ranks cannot connect."""
    student = load_recipe(request.recipe, request.overrides)
    if student.distill.targets or student.distill.member_targets:
        raise UserError(f"{request.recipe}: [distill] targets names a distilled set already; distill sets it itself: "
                        "leave it out (or train this recipe with `seqxduce train`)")
    where = f"distill ([task] of {request.recipe})"
    the_teacher = find_teacher(request.teacher, request.teacher_overrides, request.checkpoint)
    check_named_teacher(student, the_teacher)
    # the ensemble first: its set is the student's targets; then, with member_outputs, each member's alone
    teachers = [the_teacher, *(member_teachers(the_teacher, where) if student.distill.member_outputs else ())]
    world = join(student.train.device, student.train.collective_timeout)
    try:
        planned = find_sets(student, teachers)
        check_student_run(request.out_dir, request.start, [p.distilled.folder for p in planned])
        made = [make_set(plan, one, _decoding_with(one, request), where)
                for plan, one in zip(planned, teachers, strict=True)]
        start = _student_start(request.start, student, the_teacher)
        named = (f"distill.targets={made[0].folder}",)
        if len(made) > 1:
            named += ("distill.member_targets=" + json.dumps([str(m.folder) for m in made[1:]]),)
        if student.distill.word_kd:  # the teacher whose distributions the student learns from, and its checkpoint
            chosen = request.checkpoint
            if chosen not in (None, *CHECKPOINT_CHOICES):
                chosen = str(Path(chosen).resolve())
            named += (f"distill.teacher_run={the_teacher.run}", f"distill.teacher_checkpoint={chosen or ''}")
        return train(request.recipe, request.out_dir, start, (*request.overrides, *named))
    finally:
        world.close()


def _student_start(start: RunStart, student: Recipe, teacher: Teacher) -> RunStart:
    """A new student whose [tokenizer] is the teacher's takes the teacher's tokenizer files (said once)."""
    if start.mode == "resume" or start.tokenizers_from is not None or start.init_from is not None \
            or not same_tokenizer(student, teacher):
        return start
    if is_rank_zero():
        console.print("distill: the student's [tokenizer] is the teacher's: a new student takes the teacher's "
                      "tokenizer files", markup=False)
    return replace(start, tokenizers_from=teacher.run)


def _decoding_with(teacher: Teacher, request: Distill) -> Decode:
    """The teacher's streamed decode of a file of sources, as `seqxduce decode TEACHER --checkpoint C` decodes it
    (one request handed to decoding/, its engine the request's)."""
    from seqxduce.decoding.file_jobs import DecodeFile, decode_file
    from seqxduce.decoding.jobs import RunSpec

    def decode_with_teacher(sources: Path, prefixes: Path | None, targets: Path, resume: bool) -> None:
        # the targets as the task's training targets are written (for parsing the linearized tree, which the
        # student learns to write), not the task's postprocessed outputs; a stopped decode is continued by
        # distill's own command (make_set resumes it), which a stop's line says
        decode_file(DecodeFile(run=RunSpec(str(teacher.run), teacher.overrides, (), teacher.checkpoint),
                               engine=request.engine, input=sources, prefix_file=prefixes, output=targets,
                               resume=resume, processes=request.processes, as_targets=True,
                               continued_by=DISTILL_CONTINUED_BY))
    return decode_with_teacher
