"""What the CLI does, as functions a Python user can call. Heavy modules (torch) load on first use."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from seqxduce.api import Report, UserError, read_lines
from seqxduce.decoding.file_jobs import StreamedFile
from seqxduce.files import check_writable
from seqxduce.recipe import Recipe, load_recipe
from seqxduce.run_start import RunStart
from seqxduce.torchrun import is_rank_zero

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.changes import Change
    from seqxduce.decoding.decode import LoadedRun, Output
    from seqxduce.decoding.jobs import RunSpec
    from seqxduce.decoding.scoring import PairScore
    from seqxduce.distillation.teacher import Teacher
    from seqxduce.export.exporting import Exported
    from seqxduce.inspection.cost import TrainingCost
    from seqxduce.inspection.run_info import RunInfo
    from seqxduce.rundir import RunDir
    from seqxduce.serving.limits import Limits
    from seqxduce.training.trainer import TrainResult

T = TypeVar("T")

# what a stop of distill's decode says continues it: its own command resumes the decode by itself (--auto-resume
# too), while --resume asks for a student checkpoint that no run has before its set is made
DISTILL_CONTINUED_BY = "the same command (or it with --auto-resume)"

__all__ = ["load_recipe", "load_run_recipe", "prepare", "train", "RunStart", "decode", "decode_split", "evaluate",
           "distill", "average", "info", "plot", "attention", "recipe_cost", "last_checkpoints",
           "format_outputs", "format_annotations", "checkpoint_for", "load_run", "read_lines", "check_writable",
           "score", "score_files",
           "decode_file", "score_file", "StreamedFile", "format_scores", "alignments", "export_run", "serve"]


def load_run_recipe(run_dir: Path, overrides: Sequence[str] = ()) -> Recipe:
    """The recipe saved in a run directory, with overrides."""
    from seqxduce.rundir import RunDir

    return RunDir(run_dir).load_recipe(overrides)


def prepare(recipe: Recipe, training_data: bool = False, again: bool = False, workers: int | None = None) -> Path:
    """Download or build the recipe's task data; returns the data directory. With training_data, also prepare
    what a new run of the recipe trains from (its tokenizers and binarized training split, under the cache root;
    see seqxduce.corpus.prepare), unless done before; again: prepare them anew (a damaged dataset)."""
    from seqxduce.components import build_task, data_dir

    where = data_dir(recipe)
    task = build_task(recipe)
    task.prepare(where)
    if training_data:
        from seqxduce.corpus.prepare import prepare_training_data

        prepare_training_data(recipe, task, where, again=again, workers=workers)
    return where


def train(recipe: Recipe | str | Path, out: str | Path | None = None, start: RunStart | None = None,
          overrides: Sequence[str] = (), single: bool = False) -> TrainResult:
    """Train a recipe (a Recipe or a recipe file) into run directory `out` (default runs/<recipe name>), started as
    `start` says (seqxduce.run_start.RunStart; default: a new run).

    A resumed run (start mode resume, or auto where `out` holds a checkpoint of this run) continues with the recipe
    saved in `out` (plus overrides), the settings it was started with; auto refuses a directory that holds another
    recipe's run (a raised [train] max_steps or max_epochs is the same run, taken further). A directory holding another
    run's files is refused for a new run unless start.overwrite (which removes that run's files first).
    start.tokenizers_from: a folder whose tokenizer files a new run takes instead of training its own (a run to ensemble
    with). start.init_from (a run directory or checkpoint): fine-tune, starting from its weights and tokenizer files
    with a fresh optimizer and schedule (start.keep_optimizer: its optimizer state too); the recipe's [model] and
    [tokenizer] must be that run's. A recipe with [train] members = N > 1 trains N seeds of it (seqxduce.members) unless
    single (how each member's own process is started).
    """
    from seqxduce.corpus.distilled import check_student
    from seqxduce.rundir import RunDir
    from seqxduce.training.trainer import train as _train

    start = start or RunStart()
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
    check_student(recipe)
    if start.init_from is not None:
        _check_one_model(start.init_from, recipe.train.members, single)
    if recipe.train.members > 1 and not single:
        from seqxduce.training.supervisor import train_members
        from seqxduce.training.trainer import TrainResult

        step = train_members(recipe, out, start, overrides=overrides)
        return TrainResult(out, step, {})
    result = _train(recipe, out, start)
    if is_rank_zero() and not result.finished_before:  # the run's README
        from seqxduce.inspection.run_readme import write_run_readme

        write_run_readme(result.run_dir)
    return result


def distill(teacher: str | Path, recipe: str | Path, out: str | Path | None = None, start: RunStart | None = None,
            overrides: Sequence[str] = (), teacher_overrides: Sequence[str] = (), checkpoint: str | None = None,
            processes: int | None = None) -> TrainResult:
    """Sequence-level knowledge distillation in one step: the teacher run (a run directory: its ensemble of
    members, or an imported model) decodes the student recipe's training sources with its own search (changed by
    teacher_overrides, e.g. decode.beam=5; checkpoint: best, average or last), streamed, resumable, on every core
    (processes; or torchrun's ranks); the outputs are kept once as a distilled set keyed by the teacher's
    checkpoints and tokenizer files, its search and the data (seqxduce.corpus.distilled), found again by every
    later student, rank and restart; then the student recipe trains on it into `out` as `train` would ([distill]
    original_ratio: a share of the original pairs beside; word_kd: the teacher's next-token distributions too,
    named to the student by teacher_run and teacher_checkpoint), starting as `start` says. A student whose
    [tokenizer] is the teacher's takes the teacher's tokenizer files."""
    from dataclasses import replace

    from seqxduce.distillation.making import find_sets, make_set
    from seqxduce.distillation.teacher import check_named_teacher, find_teacher, member_teachers, same_tokenizer
    from seqxduce.rundir import CHECKPOINT_CHOICES
    from seqxduce.training.distributed import setup

    start = start or RunStart()
    student = load_recipe(recipe, overrides)
    if student.distill.targets or student.distill.member_targets:
        raise UserError(f"{recipe}: [distill] targets names a distilled set already; distill sets it itself: leave it "
                        "out (or train this recipe with `seqxduce train`)")
    where = f"distill ([task] of {recipe})"
    the_teacher = find_teacher(Path(teacher), teacher_overrides, checkpoint)
    check_named_teacher(student, the_teacher)
    # the ensemble first: its set is the student's targets; then, with member_outputs, each member's alone
    teachers = [the_teacher, *(member_teachers(the_teacher, where) if student.distill.member_outputs else ())]

    def decoding_with(one: Teacher) -> Callable[[Path, Path | None, Path, bool], None]:
        def decode_with_teacher(sources: Path, prefixes: Path | None, targets: Path, resume: bool) -> None:
            from seqxduce.decoding.file_jobs import DecodeFile
            from seqxduce.decoding.file_jobs import decode_file as run_request
            from seqxduce.export.engine_choice import engine_named

            # the targets as the task's training targets are written (for parsing the linearized tree, which
            # the student learns to write), not the task's postprocessed outputs; a stopped decode is continued by
            # distill's own command (make_set resumes it), which a stop's line says
            run_request(DecodeFile(run=_run_spec(one.run, one.overrides, (), checkpoint),
                                   engine=engine_named("seqxduce"), input=sources, prefix_file=prefixes,
                                   output=targets, resume=resume,
                                   processes=processes, as_targets=True, continued_by=DISTILL_CONTINUED_BY))
        return decode_with_teacher

    # under torchrun one process group for the decode and the training: joining a second time reads the first
    # group's addresses from torchrun's store (pytorch/pytorch#135712) and the ranks cannot connect
    world = setup(student.train.device, student.train.collective_timeout)
    try:
        planned = find_sets(student, teachers)
        out = Path(out) if out is not None else Path("runs") / Path(recipe).stem
        _check_student_run(out, start, [p.distilled.folder for p in planned])
        made = [make_set(plan, one, decoding_with(one), where) for plan, one in zip(planned, teachers, strict=True)]
        if start.mode != "resume" and start.tokenizers_from is None and start.init_from is None \
                and same_tokenizer(student, the_teacher):
            start = replace(start, tokenizers_from=the_teacher.run)
            from seqxduce.console import console

            if is_rank_zero():
                console.print("distill: the student's [tokenizer] is the teacher's: a new student takes the "
                              "teacher's tokenizer files", markup=False)
        named = (f"distill.targets={made[0].folder}",)
        if len(made) > 1:
            named += ("distill.member_targets=" + json.dumps([str(m.folder) for m in made[1:]]),)
        if student.distill.word_kd:  # the teacher whose distributions the student learns from, and its checkpoint
            chosen = checkpoint if checkpoint in (None, *CHECKPOINT_CHOICES) else str(Path(checkpoint).resolve())
            named += (f"distill.teacher_run={the_teacher.run}", f"distill.teacher_checkpoint={chosen or ''}")
        return train(recipe, out, start, overrides=(*overrides, *named))
    finally:
        world.close()


def _check_student_run(out: Path, start: RunStart, folders: Sequence[Path]) -> None:
    """Before anything is decoded: a new run where one is refused, a --resume of a student without a checkpoint, or
    a run to continue that was trained on other distilled sets (another teacher checkpoint, search, data or
    member_outputs), is one line."""
    from seqxduce.rundir import RunDir

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
    from dataclasses import replace

    from seqxduce.recipe import differences

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
    from seqxduce.recipe import differences

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


def load_run(run: str | Path, overrides: Sequence[str] = (), ensemble: Sequence[Path] = (),
             checkpoint: str | None = None, changes: Sequence[Change] = ()) -> LoadedRun:
    """Load a run directory or checkpoint for decoding, once: what it decodes with (checkpoint, members) is in the
    result (seqxduce.decoding.decode.load_run; checkpoint: best, average, last or a file, None for the default).
    changes: decode settings as flags give them (seqxduce.decoding.changes.flag_changes(beam=5, nbest=2)),
    refused by the flag's name when out of range."""
    from seqxduce.decoding.decode import load_run as _load_run

    return _load_run(Path(run), overrides, ensemble, checkpoint, changes=changes)


def decode(run: str | Path | LoadedRun, sources: Sequence[str], overrides: Sequence[str] = (),
           annotate: bool = False, ensemble: Sequence[Path] = (), checkpoint: str | None = None,
           prefixes: Sequence[str] | None = None, prefix_where: str = "prefix ", engine: str = "seqxduce",
           changes: Sequence[Change] = (), tgt_lang: str | Sequence[str] | None = None,
           src_lang: str | None = None, constraints: Sequence[Any] | None = None) -> list[Output]:
    """Decode source lines with a run directory or checkpoint (or a run load_run loaded); outputs come back in
    input order.

    annotate: also fill each Output's annotations with the model's per-position figures (e.g. ponder counts).
    ensemble: more checkpoints or run directories (same tokenizer files) whose predictions are averaged in.
    checkpoint: which of the run's checkpoints (best, average, last or a file; default the average if any).
    prefixes: per source, target text its output must start with (then searched freely); an empty one, none;
    one the target vocabulary cannot spell is refused, named as `prefix_where` and its number.
    engine: "seqxduce" (its own search) or "ctranslate2" (an export folder, or the run exported first;
    seqxduce.decoding.engines): a feature the engine lacks is refused in one line naming both.
    changes: decode settings as flags give them, as load_run takes them.
    tgt_lang: the output's language (of a multilingual run; the task's Direction), one for all sources or one per
    source ("" for none): the task writes it as its training wrote it (a tag in the source, or a target prefix
    forced and left out of the output); one the run does not know is refused listing those it knows, a direction
    it was never trained on decodes with a notice. src_lang: the sources' language, where known (with tgt_lang).
    constraints: per source, phrases its output must hold, in any order, and phrases it must not (lexically
    constrained search, decoding/phrases.py): a list of phrases, a phrase that must not appear written "!words",
    or one line of them separated by tabs, as `decode --constraints` reads them; None or an empty one, none."""
    from seqxduce.decoding.directions import check_source_alone
    from seqxduce.decoding.phrases import constraint_features, phrases_given

    check_source_alone(tgt_lang, src_lang, "decode src_lang")
    given = phrases_given(constraints, len(sources), "decode constraints")
    features = [*(["annotations"] if annotate else []), *constraint_features(given)]
    if tgt_lang is not None and prefixes is not None and len(prefixes) != len(sources):
        raise UserError(f"decode: {len(prefixes)} prefixes for {len(sources)} sources; give one per source")

    # only an engine that declares constraints (checked before it loads) is handed them: a plugin's engine written
    # before them keeps its decode()
    phrased = {"constraints": given} if given else {}

    def work(chosen: Any, loaded: Any) -> list[Output]:
        if tgt_lang is None:
            return chosen.decode(loaded, sources, prefixes, prefix_where, annotate, **phrased)
        directions, where = _directions(loaded, src_lang), _lang_where(tgt_lang)
        read, forced = directions.decode_inputs(sources, prefixes, _per_input(tgt_lang, sources), where)
        outputs = chosen.decode(loaded, read, forced if any(forced) else None, prefix_where, annotate, **phrased)
        for output, source in zip(outputs, sources):
            output.source = source  # as given, not as the model read it
        return outputs

    return _with_engine(engine, _run_spec(run, overrides, ensemble, checkpoint, changes), "decode", features, work)


def _directions(loaded: Any, src_lang: str | None) -> Any:
    """The Directions of a Python call over what an engine loaded (its task), its notices said on stderr."""
    from seqxduce.console import console
    from seqxduce.decoding.directions import Directions

    return Directions(loaded.task, src_lang or "", lambda line: console.print(line, markup=False, highlight=False))


def _per_input(tgt_lang: str | Sequence[str], inputs: Sequence[str]) -> list[str]:
    from seqxduce.decoding.directions import per_input

    return per_input(tgt_lang, len(inputs), "tgt_lang")


def _lang_where(tgt_lang: str | Sequence[str]) -> Callable[[int], str]:
    """How a refusal names the language of input i: tgt_lang, or tgt_lang[i] for one per input."""
    return (lambda i: "tgt_lang") if isinstance(tgt_lang, str) else (lambda i: f"tgt_lang[{i}]")


def decode_split(run: str | Path | LoadedRun, split: str, overrides: Sequence[str] = (), annotate: bool = False,
                 ensemble: Sequence[Path] = (), checkpoint: str | None = None, engine: str = "seqxduce",
                 changes: Sequence[Change] = ()) -> tuple[list[Output], Report]:
    """Decode one of the task's splits with a run and score it (the rest as in decode())."""
    return _with_engine(engine, _run_spec(run, overrides, ensemble, checkpoint, changes), "decode",
                        ["annotations"] if annotate else [],
                        lambda chosen, loaded: chosen.decode_split(loaded, split, annotate))


def score(run: str | Path | LoadedRun, sources: Sequence[str], targets: Sequence[str],
          overrides: Sequence[str] = (), ensemble: Sequence[Path] = (), checkpoint: str | None = None,
          engine: str = "seqxduce", changes: Sequence[Change] = (), tgt_lang: str | Sequence[str] | None = None,
          src_lang: str | None = None) -> list[PairScore]:
    """Score given (source, target) pairs with a run as decode() loads it (its checkpoint, a multi-member run's
    ensemble, and ensemble as in decode(); engine as in decode()): each target's total log-probability, eos
    counted (seqxduce.decoding.scoring). tgt_lang and src_lang as in decode(): each pair is written as training
    wrote its pairs (with lang_tag = "target" the tag starts the target, and its log-probability is counted, as
    decode's log-probability counts a forced prefix)."""
    from seqxduce.decoding.directions import check_source_alone

    check_source_alone(tgt_lang, src_lang, "score src_lang")

    def work(chosen: Any, loaded: Any) -> list[PairScore]:
        if tgt_lang is None:
            return chosen.score(loaded, sources, targets)
        if len(sources) != len(targets):
            raise UserError(f"score: {len(sources)} sources for {len(targets)} targets; give one target per source")
        read, scored = _directions(loaded, src_lang).score_inputs(sources, targets, _per_input(tgt_lang, sources),
                                                                  _lang_where(tgt_lang))
        return chosen.score(loaded, read, scored)

    return _with_engine(engine, _run_spec(run, overrides, ensemble, checkpoint, changes), "score", ["scoring"], work)


def _with_engine(engine: str, spec: RunSpec | LoadedRun, where: str, features: Sequence[str],
                 work: Callable[[Any, Any], T]) -> T:
    """work(engine, loaded) with the engine named and what it loaded of the run (refused before any load when
    the engine lacks a feature used or does not read a setting given); a run load_run loaded is seqxduce's."""
    from seqxduce.decoding.decode import LoadedRun
    from seqxduce.export.engine_choice import engine_named

    chosen = engine_named(engine)
    if isinstance(spec, LoadedRun):
        if chosen.name != "seqxduce":
            raise UserError(f"{where} --engine {chosen.name}: a run load_run loaded is seqxduce's engine's; give the "
                            "run directory or export folder's path")
        return work(chosen, spec)
    chosen.check(spec, where, features)
    with chosen.open(spec) as loaded:
        return work(chosen, loaded)


def _run_spec(run: str | Path | LoadedRun, overrides: Sequence[str], ensemble: Sequence[str | Path],
              checkpoint: str | None, changes: Sequence[Change] = ()) -> RunSpec | LoadedRun:
    """What to load (a RunSpec), or a run load_run loaded as it is (then overrides, ensemble, checkpoint and
    changes were load_run's to apply)."""
    from seqxduce.decoding.decode import LoadedRun
    from seqxduce.decoding.jobs import RunSpec

    if isinstance(run, LoadedRun):
        if overrides or ensemble or checkpoint is not None or changes:
            raise UserError("decode: a loaded run takes no overrides, ensemble, checkpoint or changes; give them to "
                            "load_run")
        return run
    return RunSpec(str(run), tuple(overrides), tuple(str(e) for e in ensemble), checkpoint, tuple(changes))


def decode_file(run: str | Path, input: str | Path | None = None, output: str | Path | None = None, *,
                split: str | None = None, prefix_file: str | Path | None = None,
                constraints_file: str | Path | None = None,
                annotations: str | Path | None = None, alignments: str | Path | None = None,
                overrides: Sequence[str] = (), ensemble: Sequence[str | Path] = (), checkpoint: str | None = None,
                changes: Sequence[Change] = (), engine: str = "seqxduce", resume: bool = False,
                buffer_size: int | None = None, processes: int | None = None, examples: int = 0,
                as_targets: bool = False, tgt_lang: str | None = None, src_lang: str | None = None,
                tgt_lang_column: bool = False) -> StreamedFile:
    """Decode a file of any length ('-': stdin) or a task's split as `seqxduce decode` does, streamed: read in
    buffers (buffer_size sources once grown, seqxduce.decoding.streaming), outputs written in input order as
    each buffer finishes (output None: stdout), in bounded memory. With `output`, a stopped job keeps its lines in
    OUTPUT.partial and `resume` continues it; the finished file is the same, byte for byte. processes: worker
    processes of one thread each (None: with seqxduce's engine one per usable CPU for a CPU decode of at least
    AUTO_PROCESSES_FROM lines, else this process); under torchrun the ranks share the buffers. examples: with
    split, print that many outputs beside their references on stderr. as_targets: each output line is the
    source's best hypothesis as the task's training targets are written (before the task's postprocess: for
    parsing the linearized tree), one line per source, as distillation trains on it. engine as in decode().
    tgt_lang and src_lang: every line's language as in decode(); tgt_lang_column: each input line is
    LANG<TAB>SOURCE, its own language (an empty LANG: tgt_lang's, or none), carried through worker processes,
    torchrun's ranks and a resume (a resume with other languages is refused). constraints_file: line N holds the
    phrases output N must contain and must not (tab-separated, "!words" must not), as decode()'s constraints;
    read in step with the input, and a resume checks it is the same file. One typed request
    (seqxduce.decoding.file_jobs.DecodeFile) handed to decoding/."""
    from seqxduce.decoding.file_jobs import DecodeFile
    from seqxduce.decoding.file_jobs import decode_file as run_request
    from seqxduce.export.engine_choice import engine_named

    return run_request(DecodeFile(
        run=_run_spec(run, overrides, ensemble, checkpoint, changes), engine=engine_named(engine),
        input=_path(input), output=_path(output), split=split, prefix_file=_path(prefix_file),
        constraints_file=_path(constraints_file),
        annotations=_path(annotations), alignments=_path(alignments), resume=resume, buffer_size=buffer_size,
        processes=processes, examples=examples, as_targets=as_targets, tgt_lang=tgt_lang or "",
        src_lang=src_lang or "", tgt_lang_column=tgt_lang_column))


def score_file(run: str | Path, source_file: str | Path, target_file: str | Path, output: str | Path | None = None,
               *, normalize: bool = False, overrides: Sequence[str] = (), ensemble: Sequence[str | Path] = (),
               checkpoint: str | None = None, resume: bool = False, buffer_size: int | None = None,
               processes: int | None = None, engine: str = "seqxduce", tgt_lang: str | None = None,
               src_lang: str | None = None, tgt_lang_column: bool = False) -> StreamedFile:
    """Score the pairs of two files of any length as `seqxduce score` does, streamed as decode_file streams
    (read in step, written in input order as each buffer finishes, resumable with an output file, shared by
    worker processes or torchrun's ranks); engine as in decode(); tgt_lang, src_lang and tgt_lang_column (a
    column of the source file) as in decode_file(), each pair written as score() writes it."""
    from seqxduce.decoding.file_jobs import ScoreFile
    from seqxduce.decoding.file_jobs import score_file as run_request
    from seqxduce.export.engine_choice import engine_named

    return run_request(ScoreFile(
        run=_run_spec(run, overrides, ensemble, checkpoint), engine=engine_named(engine), source=Path(source_file),
        target=Path(target_file), output=_path(output), normalize=normalize, resume=resume,
        buffer_size=buffer_size, processes=processes, tgt_lang=tgt_lang or "", src_lang=src_lang or "",
        tgt_lang_column=tgt_lang_column))


def _path(given: str | Path | None) -> Path | None:
    return None if given is None else Path(given)


def export_run(run: str | Path, output: str | Path, engine: str = "ctranslate2", quantization: str = "none",
               member: int | None = None, overwrite: bool = False) -> Exported:
    """Export the checkpoint decode() uses for a run (of a multi-member run, member K's) for an inference engine
    into folder `output`, as `seqxduce export` does (needs the [ctranslate2] extra); seqxduce.export is the
    subpackage's name, hence export_run."""
    from seqxduce.export.exporting import export_run as _export_run

    return _export_run(run, output, engine, quantization, member, overwrite)


def serve(run: str | Path, host: str = "127.0.0.1", port: int = 8000, overrides: Sequence[str] = (),
          ensemble: Sequence[str | Path] = (), checkpoint: str | None = None, engine: str = "seqxduce",
          limits: Limits | None = None, **options: Any) -> None:
    """Serve a run over HTTP until SIGTERM or Ctrl-C, as `seqxduce serve` does (needs the [serve] extra), with
    the engine named (as in decode()). limits: the server's bounds (seqxduce.serving.limits.Limits, a Settings:
    each checked when built); or give them here by name (max_inputs=3). options: the command's others by their
    Python names (allowed_hosts, forwarded_allow_ips, verbose_info, threads, log_level)."""
    import dataclasses

    from seqxduce.serving.command import serve_run
    from seqxduce.serving.limits import Limits
    from seqxduce.settings_check import SettingError

    known = {f.name for f in dataclasses.fields(Limits)}
    others = ("allowed_hosts", "forwarded_allow_ips", "verbose_info", "threads", "log_level")
    for name in options:
        if name not in known and name not in others:
            raise UserError(f"serve: no option {name}; the options are those of `seqxduce serve --help`, by their "
                            "Python names")
    try:
        limits = dataclasses.replace(limits or Limits(), **{k: v for k, v in options.items() if k in known})
    except SettingError as err:
        raise UserError(f"serve: {err.at(err.key)}") from None
    serve_run(_run_spec(run, overrides, ensemble, checkpoint), engine, limits, host=host, port=port,
              **{k: v for k, v in options.items() if k in others})


def score_files(run: str | Path | LoadedRun, source_file: str | Path, target_file: str | Path,
                overrides: Sequence[str] = (), ensemble: Sequence[Path] = (), checkpoint: str | None = None,
                engine: str = "seqxduce", changes: Sequence[Change] = (), tgt_lang: str | None = None,
                src_lang: str | None = None) -> list[PairScore]:
    """score() of the pairs of two files of one sentence per line (`seqxduce score`), refused in one line unless
    there are as many of each; tgt_lang and src_lang as in score()."""
    sources, targets = read_lines(Path(source_file)), read_lines(Path(target_file))
    if len(sources) != len(targets):
        raise UserError(f"--source {source_file} has {len(sources)} lines but --target {target_file} has "
                        f"{len(targets)}: give one target line per source line")
    return score(run, sources, targets, overrides=overrides, ensemble=ensemble, checkpoint=checkpoint, engine=engine,
                 tgt_lang=tgt_lang, src_lang=src_lang)


def format_scores(scores: Sequence[PairScore], normalize: bool = False) -> list[str]:
    """One tab-separated line per pair: total log-prob, per token, and with normalize beam's normalized score."""
    from seqxduce.decoding.scoring import format_scores as _format_scores

    return _format_scores(scores, normalize)


def alignments(run: str | Path | LoadedRun, outputs: Sequence[Output], overrides: Sequence[str] = (),
               ensemble: Sequence[Path] = ()) -> list[str]:
    """Pharaoh word alignments (`0-0 1-2 ...`) of decoded outputs from the model's encoder-decoder attention, one
    line per line format_outputs() gives; run: the loaded run that decoded them, or its path (loaded as decode()
    loads it, with overrides and ensemble). See seqxduce.decoding.alignments for the layer, heads and words."""
    from seqxduce.decoding.alignments import align_outputs
    from seqxduce.decoding.jobs import RunSpec

    spec = _run_spec(run, overrides, ensemble, None)
    return align_outputs(spec.load() if isinstance(spec, RunSpec) else spec, outputs)


def checkpoint_for(run: str | Path, choice: str | None = None) -> Path:
    """The checkpoint decode() uses for a run directory or checkpoint: the run's average if any (refused when
    stale), else its newest readable step checkpoint; or choice best, average, last or a file (rundir.locate)."""
    from seqxduce.rundir import locate

    return locate(run, choice)[1]


def format_annotations(outputs: Sequence[Output], first: int = 0) -> list[str]:
    """One JSON object per output: its index (from `first`) and its annotations (tokens and per-position
    figures)."""
    from seqxduce.decoding.decode import format_annotations as _format_annotations

    return _format_annotations(outputs, first)


def format_outputs(outputs: Sequence[Output], first: int = 0) -> list[str]:
    """One line per output; with n-best, one line per hypothesis: index (from `first`), score, text
    (tab-separated); seqxduce.decoding.decode.format_outputs."""
    from seqxduce.decoding.decode import format_outputs as _format_outputs

    return _format_outputs(outputs, first)


def evaluate(hypotheses: str | Path, references: str | Path | Sequence[str | Path], recipe: str | Path | None = None,
             task: str | None = None, overrides: Sequence[str] = ()) -> Report:
    """Score a file of outputs against a file of references (or several files, each a reference translation of
    every line, as sacreBLEU takes them) with a task's metric: the task of a recipe file or run directory
    (overrides as for training), or a task plugin by name with its defaults and `task.KEY=VALUE` overrides (e.g.
    task="translation", overrides=["task.literature_bleu=true"])."""
    from seqxduce.registry import registry
    from seqxduce.settings_check import make_settings

    if (recipe is None) == (task is None):
        raise UserError("evaluate: name the task with exactly one of --recipe (file or run directory) and --task")
    if recipe is not None:
        path = Path(recipe)
        loaded = load_run_recipe(path, overrides) if path.is_dir() else load_recipe(path, overrides)
        task_obj = loaded.task.component.build(loaded.task.settings)
    else:
        component = registry().get("task", task)
        values, raw = _task_overrides(task, component.settings, overrides)
        settings = make_settings(component.settings, values, "task", f"--task {task}", raw) \
            if component.settings else None
        task_obj = component.build(settings)
    files = [Path(references)] if isinstance(references, (str, Path)) else [Path(r) for r in references]
    if len(files) == 1:
        return task_obj.score_files(Path(hypotheses), files[0])
    from seqxduce.api import read_lines

    outputs = read_lines(Path(hypotheses))
    streams = [read_lines(f) for f in files]
    for f, lines in zip(files, streams):
        if len(lines) != len(outputs):
            raise UserError(f"{hypotheses} has {len(outputs)} lines but {f} has {len(lines)}: give one reference "
                            "line per hypothesis line in every reference file")
    return task_obj.score_references(outputs, streams)


def _task_overrides(task: str, settings: type | None, overrides: Sequence[str]) -> tuple[dict, dict]:
    """The values and raw texts of `--set task.KEY=VALUE` for a task named by --task (no recipe: the task's
    defaults and these); any other section, or a key the task does not have, is refused."""
    import dataclasses

    from seqxduce.recipe import override_value, split_override

    known = {f.name for f in dataclasses.fields(settings)} if settings is not None else set()
    values, raw = {}, {}
    for text in overrides:
        section, key, value = split_override(text)
        if section != "task":
            raise UserError(f"--set {text}: with --task only task settings apply (--set task.KEY=VALUE); "
                            "give a recipe with --recipe for the others")
        if key not in known:
            raise UserError(f"--set {text}: task {task!r} has no setting {key!r}; its settings: "
                            f"{', '.join(sorted(known)) or '(none)'}")
        values[key], raw[key] = override_value(value), value
    return values, raw


def last_checkpoints(run: str | Path, last: int) -> list[Path]:
    """A run directory's last `last` step checkpoints, oldest first (what `average RUN --last N` averages)."""
    from seqxduce.rundir import RunDir

    if not Path(run).is_dir():
        raise UserError(f"average --last {last}: {run} is not a run directory; name checkpoints one by one instead")
    found = RunDir(run).step_checkpoints()
    if len(found) < last:
        raise UserError(f"average --last {last}: {run} has {len(found)} step checkpoint(s) in "
                        f"{RunDir(run).checkpoint_dir}; average fewer, or keep more ([train] keep_checkpoints)")
    return found[-last:]


def average(checkpoints: Sequence[str | Path], output: str | Path) -> Path:
    """Average the parameters of checkpoints into one file (its folder is checked before any is read)."""
    from seqxduce import checkpoint

    check_writable(output, f"average -o {output}")
    check_one_member([Path(p) for p in checkpoints])
    checkpoint.atomic_save(checkpoint.average([Path(p) for p in checkpoints]), Path(output))
    return Path(output)


def check_one_member(checkpoints: Sequence[Path]) -> None:
    """Refuse, before any is read, a run directory among the checkpoints, or checkpoints of different members of
    a run trained with [train] members = N: members start from different seeds, and the average of their
    weights is neither member (an ensemble averages their predictions instead)."""
    from seqxduce.members import member_of
    from seqxduce.rundir import CHECKPOINT_DIR

    for path in checkpoints:
        if path.is_dir():
            raise UserError(f"average {path}: a folder; name the checkpoint files to average, e.g. "
                            f"{path / CHECKPOINT_DIR}/step_*.pt (of a run with several members, each member's apart)")
    found = {}
    for path in checkpoints:
        run_dir = path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent
        whole = member_of(run_dir.resolve())
        if whole is not None:
            found.setdefault(whole, path)
    runs = {whole for whole, _ in found}
    for run in runs:
        of_run = [(k, p) for (whole, k), p in found.items() if whole == run]
        if len(of_run) > 1:
            (k1, p1), (k2, p2) = sorted(of_run)[:2]
            raise UserError(f"average: {p1} and {p2} belong to members {k1} and {k2} of {run}, trained from different "
                            "seeds, whose weights do not average into a model; average each member's own checkpoints "
                            f"(-o average.pt in that member's folder), and decode {run} to ensemble the members")


def import_model(source: str | Path, name: str, out: str | Path, overwrite: bool = False) -> tuple[Path, list[str]]:
    """Make a run directory of another toolkit's model folder with the importer plugin `name` (`seqxduce import`);
    returns the run directory and the importer's notes."""
    from seqxduce.export.importing import import_model as run_import

    return run_import(source, name, out, overwrite=overwrite)


def info(run: str | Path) -> RunInfo:
    """What `seqxduce info` shows of a run directory or checkpoint (RunInfo.as_dict() is its --json)."""
    from seqxduce.inspection.run_info import run_info

    return run_info(Path(run))


def plot(runs: Sequence[str | Path], output: str | Path = "curves.png", x: str = "step",
         extra: Sequence[str] = (), dpi: int = 100) -> Path:
    """Draw the training curves of runs into a PNG, as `seqxduce plot` does (needs the [plot] extra)."""
    from seqxduce.inspection.curves import plot_curves

    return plot_curves([Path(r) for r in runs], Path(output), x=x, extra=extra, dpi=dpi)[0]


def attention(run: str | Path, source: str, output: str | Path = "attention.png", target: str | None = None,
              kinds: Sequence[str] = ("encoder", "decoder", "cross"), layers: Sequence[int] | None = None,
              heads: Sequence[int] | None = None, mean_heads: bool = False, overrides: Sequence[str] = (),
              dpi: int = 100, member: int | None = None) -> Path:
    """Draw a run's attention weights for one source as a PNG grid, as `seqxduce attention` does ([plot] extra);
    of a run trained with [train] members = N, member K's (default 1: an ensemble has no attention of its own)."""
    from seqxduce.decoding.decode import load_run
    from seqxduce.inspection.attention_maps import attention_view
    from seqxduce.inspection.attention_plot import plot_attention

    loaded = load_run(Path(run), overrides, member=member or (1 if Path(run).is_dir() else None))
    view = attention_view(loaded, source, target)
    return plot_attention(view, Path(output), kinds=kinds, layers=layers, heads=heads, mean_heads=mean_heads,
                          dpi=dpi)[0]


def recipe_cost(recipe: str | Path, overrides: Sequence[str] = ()) -> TrainingCost | None:
    """Parameters and training FLOPs of a recipe file's model, as `seqxduce recipe info` prints them; None when
    the vocabulary size is unknown until the tokenizer is trained."""
    from seqxduce.inspection.cost import training_cost

    return training_cost(load_recipe(recipe, overrides), Path(recipe).parent)
