"""What the CLI does, as functions a Python user can call. Heavy modules (torch) load on first use."""

from __future__ import annotations

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
    from seqxduce.export.exporting import Exported
    from seqxduce.inspection.cost import TrainingCost
    from seqxduce.inspection.run_info import RunInfo
    from seqxduce.serving.limits import Limits
    from seqxduce.training.trainer import TrainResult

T = TypeVar("T")

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
    from seqxduce.distillation.teacher_targets import teacher_soft_targets
    from seqxduce.run_start import starting
    from seqxduce.training.trainer import train as train_run

    begun = starting(recipe, out, start or RunStart(), overrides, single, check=check_student)
    if begun.recipe.train.members > 1 and not single:
        from seqxduce.training.supervisor import train_members
        from seqxduce.training.trainer import TrainResult

        return TrainResult(begun.out, train_members(begun.recipe, begun.out, begun.start, begun.overrides), {})
    # word_kd's teacher pass is distillation's, handed to the run: training imports no distillation
    result = train_run(begun.recipe, begun.out, begun.start, teacher_pass=teacher_soft_targets)
    if is_rank_zero() and not result.finished_before:  # the run's README
        from seqxduce.inspection.run_readme import write_run_readme

        write_run_readme(result.run_dir)
    return result


def distill(teacher: str | Path, recipe: str | Path, out: str | Path | None = None, start: RunStart | None = None,
            overrides: Sequence[str] = (), teacher_overrides: Sequence[str] = (), checkpoint: str | None = None,
            processes: int | None = None) -> TrainResult:
    """Sequence-level knowledge distillation in one step: the teacher run (a run directory: its ensemble of
    members, or an imported model) decodes the student recipe's training sources with its own search (changed by
    teacher_overrides, e.g. decode.beam=5; checkpoint: best, average or last, or a file, which decodes alone, as
    `decode --checkpoint FILE` loads it), streamed, resumable, on every core (processes; or torchrun's ranks); the
    outputs are kept once as a distilled set keyed by the teacher's checkpoints (those its decode loads) and
    tokenizer files, its search and the data (seqxduce.corpus.distilled), found again by every later student, rank
    and restart; then the student recipe trains on it into `out` as `train` would ([distill] original_ratio: a
    share of the original pairs beside; word_kd: the teacher's next-token distributions too, named to the student
    by teacher_run and teacher_checkpoint), starting as `start` says. A student whose [tokenizer] is the teacher's
    takes the teacher's tokenizer files. One typed request (seqxduce.distillation.student.Distill) handed to
    distillation/, with `train` passed in."""
    from seqxduce.distillation.student import Distill
    from seqxduce.distillation.student import distill as run_request
    from seqxduce.export.engine_choice import engine_named
    from seqxduce.training.distributed import setup

    return run_request(Distill(teacher=Path(teacher), recipe=Path(recipe), engine=engine_named("seqxduce"),
                               out=_path(out), start=start or RunStart(), overrides=tuple(overrides),
                               teacher_overrides=tuple(teacher_overrides), checkpoint=checkpoint,
                               processes=processes), train=train, join=setup)


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
    from seqxduce.decoding.directions import check_call, decode_directed
    from seqxduce.decoding.phrases import constraint_features, phrases_given

    check_call("decode", tgt_lang, src_lang, sources, prefixes)
    given = phrases_given(constraints, len(sources), "decode constraints")
    # only an engine that declares constraints (checked before it loads) is handed them: a plugin's engine written
    # before them keeps its decode()
    phrased = {"constraints": given} if given else {}
    return _with_engine(engine, _run_spec(run, overrides, ensemble, checkpoint, changes), "decode",
                        [*(["annotations"] if annotate else []), *constraint_features(given)],
                        lambda chosen, loaded: decode_directed(chosen, loaded, sources, prefixes, prefix_where,
                                                               annotate, tgt_lang, src_lang, **phrased))


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
    from seqxduce.decoding.directions import check_call, score_directed

    check_call("score", tgt_lang, src_lang, sources)
    return _with_engine(engine, _run_spec(run, overrides, ensemble, checkpoint, changes), "score", ["scoring"],
                        lambda chosen, loaded: score_directed(chosen, loaded, sources, targets, tgt_lang, src_lang))


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
    from seqxduce.decoding.evaluation import evaluate_files

    return evaluate_files(hypotheses, references, recipe, task, overrides)


def last_checkpoints(run: str | Path, last: int) -> list[Path]:
    """A run directory's last `last` step checkpoints, oldest first (what `average RUN --last N` averages)."""
    from seqxduce.rundir import last_step_checkpoints

    return last_step_checkpoints(Path(run), last)


def average(checkpoints: Sequence[str | Path], output: str | Path) -> Path:
    """Average the parameters of checkpoints into one file (its folder is checked before any is read)."""
    from seqxduce import checkpoint
    from seqxduce.members import check_one_member

    check_writable(output, f"average -o {output}")
    check_one_member([Path(p) for p in checkpoints])
    checkpoint.atomic_save(checkpoint.average([Path(p) for p in checkpoints]), Path(output))
    return Path(output)


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
