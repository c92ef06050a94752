"""The teacher of a distillation: the run (or imported model) whose outputs a student learns from, known by what
decides those outputs: its checkpoints' and tokenizer files' bytes and its search settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqxduce.api import UserError
from seqxduce.files import file_digest
from seqxduce.members import member_dir
from seqxduce.recipe import Recipe, load_recipe
from seqxduce.rundir import CHECKPOINT_CHOICES

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.decode import PlannedRun

# the sections that make a teacher what [distill] teacher names: its data, vocabulary and architecture
COMPARED = ("task", "tokenizer", "model")


@dataclass(frozen=True)
class Teacher:
    """A teacher run as decoding loads it: the run, what decoding.decode.plan_run chose to load (its recipe with
    the teacher's overrides, the checkpoint and the members' checkpoints ensembled in) and its tokenizer files."""

    run: Path
    plan: PlannedRun
    tokenizer_files: tuple[Path, ...]
    overrides: tuple[str, ...] = ()
    checkpoint: str | None = None

    @property
    def recipe(self) -> Recipe:
        """The teacher's recipe with its overrides, as asked of the run (not as this machine's device fits it)."""
        return self.plan.asked or self.plan.recipe

    @property
    def checkpoints(self) -> tuple[Path, ...]:
        """The checkpoint files that decode, the run's chosen one first: exactly those decode_file loads."""
        return (self.plan.checkpoint, *self.plan.members)

    def key_parts(self) -> dict[str, Any]:
        """What decides the teacher's outputs, for the distilled set's key: the bytes of its checkpoints and
        tokenizer files (another step, average or member is another teacher) and its resolved search."""
        return {"checkpoints": [file_digest(p) for p in self.checkpoints],
                "tokenizers": [file_digest(p) for p in self.tokenizer_files],
                "search": self.recipe.resolved()["decode"]}

    def described(self) -> str:
        count = len(self.checkpoints)
        return f"{self.run} ({count} model{'s' if count > 1 else ''}: {', '.join(p.name for p in self.checkpoints)})"


def find_teacher(run: Path, overrides: Sequence[str] = (), checkpoint: str | None = None) -> Teacher:
    """The teacher at `run` (a run directory) as `seqxduce decode RUN --checkpoint CHECKPOINT --set OVERRIDES`
    loads it (decoding.decode.plan_run: one answer to which checkpoints decode), refused in one line when it is not
    a run directory or holds no checkpoint. overrides: `--teacher-set` (its search, e.g. decode.beam=5);
    checkpoint: best, average or last, per member; or a file, which decodes alone (of a run of several members
    too, as decode takes it)."""
    from seqxduce.decoding.decode import plan_run

    if not Path(run).is_dir():
        raise UserError(f"distill {run}: the teacher must be a run directory (the --out of `seqxduce train` or "
                        "`seqxduce import`)")
    plan = plan_run(Path(run), overrides, checkpoint=checkpoint)
    return Teacher(Path(run).resolve(), plan, tuple(plan.run.tokenizers.files(plan.recipe)), tuple(overrides),
                   checkpoint)


def member_teachers(teacher: Teacher, where: str) -> list[Teacher]:
    """Each member of a teacher run of several members as a teacher of its own, decoding alone with the teacher's
    search and checkpoint choice ([distill] member_outputs): member 1 is the run with `train.members=1`, member k
    its own run directory. A teacher of one model is refused in one line: it has no members to add; so is a
    checkpoint file, which is one model too (the members have no file of that name)."""
    count = teacher.recipe.train.members
    if count < 2:
        raise UserError(f"{where}: [distill] member_outputs adds each member's own outputs, but the teacher "
                        f"{teacher.run} is one model; set distill.member_outputs=false, or give a run of several "
                        "members ([train] members)")
    if teacher.checkpoint not in (None, *CHECKPOINT_CHOICES):
        raise UserError(f"{where}: [distill] member_outputs decodes with each member's own checkpoint, but "
                        f"--checkpoint {teacher.checkpoint} is one file, which decodes alone; choose "
                        f"{', '.join(CHECKPOINT_CHOICES)} (each member's), or set distill.member_outputs=false")
    first = find_teacher(teacher.run, (*teacher.overrides, "train.members=1"), teacher.checkpoint)
    return [first, *(find_teacher(member_dir(teacher.run, k), teacher.overrides, teacher.checkpoint)
                     for k in range(2, count + 1))]


def check_named_teacher(student: Recipe, teacher: Teacher) -> None:
    """When the student's [distill] teacher names a recipe, the teacher run must have been trained with it: its
    [task], [tokenizer] and [model] (the data directory compared as the folder it names), refused naming the first
    key that differs."""
    named = student.distill.teacher
    if not named:
        return
    path = student.path(named)
    if not path.is_file():
        raise UserError(f"[distill] teacher = {named!r}: no such recipe ({path}); name the teacher's recipe relative "
                        "to the student's, or leave it empty for any teacher")
    expected = load_recipe(path).relocated(teacher.recipe.base_dir).compared()
    found = teacher.recipe.compared()
    for section in COMPARED:
        for key, value in expected[section].items():
            if found[section].get(key) != value:
                raise UserError(f"distill {teacher.run}: [{section}] {key} = {found[section].get(key)!r} there, but "
                                f"the recipe [distill] teacher names ({path.name}) has {value!r}; give the run "
                                "trained with that recipe, or set distill.teacher to the teacher's recipe")


def same_tokenizer(student: Recipe, teacher: Teacher) -> bool:
    """Whether the student's [tokenizer] is the teacher's: then it takes the teacher's tokenizer files, as Kim &
    Rush's students share their teacher's vocabulary, instead of training its own on the distilled text."""
    return student.resolved()["tokenizer"] == teacher.recipe.resolved()["tokenizer"] and bool(teacher.tokenizer_files)
