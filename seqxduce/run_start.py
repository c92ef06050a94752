"""How a training run starts, as one typed value made and checked once where a run starts (the CLI, engine.train)
and carried from there to the trainer: a new run, a resumed one, or `auto` (start when the run directory holds no
checkpoint of this run, continue when it does: the one command line a requeued job and torchrun's restarts run
again); a new run may take its tokenizer files from another folder or its weights from another run.

Beside the value, the policy of a start, the same for `train` and `distill`: `starting` resolves a start against
the run directory (an auto start, a resumed run's own recipe, the notice of an edited recipe file, --init-from of
one model), and `check_student_run` checks a student's run before its teacher decodes anything."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from seqxduce.errors import UserError
from seqxduce.recipe import Recipe, differences, load_recipe
from seqxduce.rundir import RunDir

Mode = Literal["new", "resume", "auto"]
MODES: tuple[str, ...] = ("new", "resume", "auto")


@dataclass(frozen=True)
class RunStart:
    """mode: new, resume or auto (resolved against the run directory by `resolved`); overwrite (new runs only):
    replace the run already in the directory; tokenizers_from: a folder whose tokenizer files a new run takes;
    init_from: a run directory or checkpoint a new run starts from (fine-tuning), its optimizer state too with
    keep_optimizer. Contradictions are refused in one line when the value is made, however it is made."""

    mode: Mode = "new"
    overwrite: bool = False
    tokenizers_from: Path | None = None
    init_from: Path | None = None
    keep_optimizer: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"RunStart: mode {self.mode!r} is none of {', '.join(MODES)}")
        for name in ("tokenizers_from", "init_from"):  # a str from the Python API is a path as the CLI gives it
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        problem = self._contradiction()
        if problem:
            raise UserError(f"train: {problem}")

    def _contradiction(self) -> str:
        """What in these flags contradicts itself, or ''."""
        if self.mode == "resume" and self.overwrite:
            return "give --resume (continue the run) or --overwrite (replace it), not both"
        if self.mode == "auto" and self.overwrite:
            return ("give --auto-resume (continue the run, or start it) or --overwrite (replace it), not both: "
                    "a requeued --overwrite would throw away what the job before it trained")
        if self.mode == "resume" and self.init_from is not None:
            return "--init-from starts a new run from another's weights, --resume continues this one; give one of them"
        if self.mode == "resume" and self.tokenizers_from is not None:
            return "--resume continues with the run's own tokenizer files; leave out --tokenizers-from"
        if self.init_from is not None and self.tokenizers_from is not None:
            return "--init-from takes the tokenizer files of the run it names; leave out --tokenizers-from"
        if self.keep_optimizer and self.init_from is None:
            return "--keep-optimizer keeps the optimizer of --init-from's checkpoint; give --init-from"
        return ""

    @classmethod
    def from_flags(cls, resume: bool = False, auto_resume: bool = False, overwrite: bool = False,
                   tokenizers_from: Path | str | None = None, init_from: Path | str | None = None,
                   keep_optimizer: bool = False) -> RunStart:
        """The start the command line's flags describe."""
        if resume and auto_resume:
            raise UserError("train: give --resume (continue a run, refused where there is none) or --auto-resume "
                            "(continue it, or start it), not both")
        mode: Mode = "resume" if resume else "auto" if auto_resume else "new"
        return cls(mode, overwrite, None if tokenizers_from is None else Path(tokenizers_from),
                   None if init_from is None else Path(init_from), keep_optimizer)

    @property
    def resume(self) -> bool:
        """Whether the run continues from its checkpoints (an `auto` start must be resolved first)."""
        if self.mode == "auto":
            raise ValueError("RunStart: an auto start is resolved against the run directory first (resolved)")
        return self.mode == "resume"

    def resolved(self, has_checkpoint: bool, has_leftovers: bool) -> RunStart:
        """An auto start as what it is here: resume where the run directory holds a checkpoint of this run, else a
        new run (replacing the files an earlier attempt of the same run left before its first checkpoint). The
        caller checks first that the directory holds this recipe's run. Other modes are returned unchanged."""
        if self.mode != "auto":
            return self
        if has_checkpoint:
            return replace(self, mode="resume", tokenizers_from=None, init_from=None, keep_optimizer=False)
        return replace(self, mode="new", overwrite=has_leftovers)


@dataclass(frozen=True)
class Started:
    """A run's start resolved where it starts: the recipe it trains (a resumed run's own, with the overrides), its
    run directory, its start (an auto one resolved) and the overrides a member's process reads too."""

    recipe: Recipe
    out: Path
    start: RunStart
    overrides: tuple[str, ...]


def starting(recipe: Recipe | str | Path, out: str | Path | None, start: RunStart, overrides: Sequence[str] = (),
             single: bool = False, check: Callable[[Recipe], None] | None = None) -> Started:
    """engine.train's start resolved (see its docstring): out None is runs/<recipe name>; an auto start is
    resolved against the run directory (_auto_start); a resumed run trains the recipe it saved, with a notice when
    the recipe file named differs from it (not for a member's own process: single); check, the caller's own check
    of the recipe that trains (engine.train: a student recipe is distill's), comes before --init-from's: one
    model's."""
    if out is None:
        if isinstance(recipe, Recipe):
            raise UserError("train: name the run directory (out) for a recipe given as an object")
        out = Path("runs") / Path(recipe).stem
    out = Path(out)
    run_dir = RunDir(out)
    if start.mode == "auto":
        given = recipe if isinstance(recipe, Recipe) else load_recipe(recipe, overrides)
        start, further = _auto_start(start, run_dir, given)
        if start.resume and not isinstance(recipe, Recipe):  # the run's recipe, as --resume takes it
            overrides = (*overrides, *further)  # (a member's process reads them too)
            recipe = run_dir.load_recipe(overrides)
        else:
            recipe = given
    elif not isinstance(recipe, Recipe):
        if start.resume and run_dir.recipe_file.is_file():
            saved = run_dir.load_recipe(overrides)
            if not single:  # the user's command, not a member's process
                run_dir.check_start(resume=True)  # a refusal comes alone, before the notice
                _say_recipe_differs(Path(recipe), run_dir.recipe_file, saved, overrides)
            recipe = saved
        else:
            recipe = load_recipe(recipe, overrides)
    if check is not None:
        check(recipe)
    if start.init_from is not None:
        _check_one_model(start.init_from, recipe.train.members, single)
    return Started(recipe, out, start, tuple(overrides))


def check_student_run(out: Path, start: RunStart, folders: Sequence[Path]) -> None:
    """Before anything is decoded: a new run where one is refused, a --resume of a student without a checkpoint, or
    a run to continue that was trained on other distilled sets (another teacher checkpoint, search, data or
    member_outputs), is one line."""
    run_dir = RunDir(out)
    if start.mode == "new":
        run_dir.check_start(resume=False, overwrite=start.overwrite)
        return
    if start.mode == "resume" and not run_dir.step_checkpoints():  # else refused only after the whole decode
        raise UserError(f"distill --resume: {run_dir.checkpoint_dir} holds no student checkpoint to continue; drop "
                        "--resume (the same command without it, or with --auto-resume, continues a stopped decode "
                        "of the teacher's outputs and then trains the student)")
    if not run_dir.recipe_file.is_file():
        return
    saved = run_dir.load_recipe().distill
    trained_on = [Path(p) for p in (saved.targets, *saved.member_targets) if p]
    if trained_on and trained_on != list(folders):
        raise UserError(f"distill: {out} was trained on the distilled set {', '.join(map(str, trained_on))}; this "
                        f"teacher, search and data make {', '.join(map(str, folders))}: continue it with the teacher "
                        "checkpoint, --teacher-set and [distill] member_outputs it started with, or train into "
                        "another --out")


def _auto_start(start: RunStart, run_dir: RunDir, recipe: Recipe) -> tuple[RunStart, tuple[str, ...]]:
    """--auto-resume resolved against the run directory, the same way on every rank of a world: each decides from
    the files alone, before any rank writes there but rank 0 removing what an earlier attempt of this run left
    before its first checkpoint (then a rank that looks later still decides "a new run, replacing leftovers", or
    "a new run" once they are gone: the same start; no rank writes a checkpoint before every rank has joined the
    world). A directory holding another recipe's run is refused in one line; a run of this recipe that the file
    (or --set) takes further, a raised [train] max_steps or max_epochs, is this run: with the start come the
    overrides that take it there (as `--resume --set train.max_steps=N` does)."""
    if run_dir.recipe_file.is_file():
        saved = run_dir.load_recipe()
        raised = _raised_reach(recipe, saved)
        same_reach = replace(recipe, train=replace(recipe.train, **{key: getattr(saved.train, key) for key in raised}))
        found = differences(same_reach, saved)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise UserError(f"--auto-resume: {run_dir.path} holds a run of another recipe ({found[0]}{more}); "
                            f"continue that run with `seqxduce train {run_dir.recipe_file} --out {run_dir.path} "
                            "--resume`, replace it with --overwrite, or train into another --out")
        further = tuple(f"train.{key}={value}" for key, value in raised.items())
        return start.resolved(has_checkpoint=bool(run_dir.step_checkpoints()), has_leftovers=True), further
    # no recipe: what an attempt killed before it saved its recipe left (metrics) is replaced, while checkpoints
    # without a recipe are no run this one can tell its own, and a new run refuses them (check_start)
    leftovers = run_dir.path.is_dir() and bool(run_dir.run_files()) and not run_dir.step_checkpoints()
    return start.resolved(has_checkpoint=False, has_leftovers=leftovers), ()


# [train] keys that say how far a run goes, not what it trains: raised, they take the same run further
REACH_KEYS = ("max_steps", "max_epochs")


def _raised_reach(given: Recipe, saved: Recipe) -> dict[str, int]:
    """The reach keys whose value the given recipe raises over the run's saved one (max_epochs 0: no limit)."""
    def reach(key: str, value: int) -> float:
        return math.inf if key == "max_epochs" and value == 0 else value

    return {key: getattr(given.train, key) for key in REACH_KEYS
            if reach(key, getattr(given.train, key)) > reach(key, getattr(saved.train, key))}


def _say_recipe_differs(given: Path, saved_file: Path, saved: Recipe, overrides: Sequence[str]) -> None:
    """One notice when `train FILE --resume` names a recipe file that differs from the run's saved recipe: the run
    goes on with its own settings, and an edited file would otherwise be ignored without a word."""
    from seqxduce.console import console

    if given.resolve() == saved_file.resolve():
        return
    try:
        found = differences(load_recipe(given, overrides), saved)
    except UserError:  # a file that does not load is not what the run reads either; resuming does not need it
        return
    if found:
        shown = "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")
        console.print(f"train --resume: {given} differs from the recipe the run was started with ({saved_file}): "
                      f"{shown}. The run goes on with its own recipe; to change a setting of a resumed run, give it "
                      "with --set (for example --set train.members=4).", markup=False)  # "[train]" is no style


def _check_one_model(init_from: Path, members: int, single: bool) -> None:
    """--init-from fine-tunes one model from one model: refused in one line with [train] members = N > 1, or when it
    names a run of several members (whose directory is member 1 alone: taking it would drop the others silently)."""
    from seqxduce.members import member_dirs

    if members > 1 and not single:
        raise UserError(f"train: --init-from fine-tunes one model, but [train] members = {members}; add --set "
                        "train.members=1 (to fine-tune an ensemble, fine-tune each member into its own run and "
                        "decode one with --ensemble the others)")
    found = member_dirs(init_from) if init_from.is_dir() else [init_from]
    if len(found) > 1:
        raise UserError(f"--init-from {init_from}: a run of {len(found)} members ([train] members = {len(found)}), "
                        "and fine-tuning starts from one model; name one member: a checkpoint of member 1 "
                        f"({init_from}/average.pt, best.pt or checkpoints/step_*.pt) or member K's run directory "
                        f"({init_from}/members/K)")
