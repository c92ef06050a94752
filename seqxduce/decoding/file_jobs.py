"""A decode or score of a file as one typed request: DecodeFile and ScoreFile name what is decoded (the run and
its settings, a RunSpec), by which engine (decoding/engines.py), from which input into which outputs, resumed or
not, by how many processes; decode_file(request) and score_file(request) do it in one call, streamed
(decoding/stream_job.py: buffers, the record a stopped job resumes from, worker processes, torchrun's ranks).

Read in this order: the requests (their own checks in __post_init__), decode_file and score_file (the input
checked before any model loads, the engine's load, the job's record and its run), then what they share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqxduce.api import Report, TrainingStopped, UserError, count_lines, iter_lines
from seqxduce.decoding.engines import Engine, Planned
from seqxduce.decoding.jobs import RunSpec
from seqxduce.recipe import Recipe
from seqxduce.torchrun import is_rank_zero

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.streaming import BufferGrid, BufferJob, Processor

# decode and score spread an input of at least this many lines over one single-thread process per usable CPU
# when decoding on the CPU (bench/decode_scale.py: two such processes decode faster than one of two threads)
AUTO_PROCESSES_FROM = 20_000


@dataclass
class StreamedFile:
    """What decode_file and score_file did: input lines done in all (a resumed job's earlier ones included) and
    by this call, seconds, a split's metric (decode --split), whether the output was complete already (resume),
    and what decoded (checkpoint and members, or the export)."""

    done: int = 0
    new: int = 0
    seconds: float = 0.0
    report: Report | None = None
    complete_already: bool = False
    described: str = ""
    kept: list = field(default_factory=list, repr=False)  # a split's postprocessed outputs (for its metric)
    writer: bool = True  # this process wrote the outputs (under torchrun: rank 0)


@dataclass(frozen=True, kw_only=True)
class FileRequest:
    """What a streamed decode and a streamed score share: what decodes, where the outputs go (None: stdout), and
    how the job runs (resume a stopped one, buffer size, worker processes: None for the engine's default);
    continued_by: the command a stop's line says continues the job (distill's decode continues by its own command,
    which resumes the decode itself, where a --resume would ask for a student checkpoint)."""

    run: RunSpec
    engine: Engine
    output: Path | None = None
    resume: bool = False
    buffer_size: int | None = None
    processes: int | None = None
    continued_by: str = "the same command with --resume"
    # the direction of every line (a multilingual run's target language; decoding/directions.py), or each line's
    # own, in a first column LANG<TAB> (tgt_lang then stands for an empty one); the sources' language, where known
    tgt_lang: str = ""
    src_lang: str = ""
    tgt_lang_column: bool = False

    def __post_init__(self) -> None:
        from seqxduce.decoding.directions import check_source_alone

        if self.resume and self.output is None:
            raise UserError("--resume continues a stopped job's --output file; give --output")
        check_source_alone(self.tgt_lang or self.tgt_lang_column, self.src_lang,
                           f"--src-lang {self.src_lang}")

    @property
    def directed(self) -> bool:
        """Whether a direction is chosen for some line."""
        return bool(self.tgt_lang) or self.tgt_lang_column


@dataclass(frozen=True, kw_only=True)
class DecodeFile(FileRequest):
    """`seqxduce decode`: exactly one of an input file ('-': stdin) and a task's split; per source a prefix
    (prefix_file, with input); annotations and alignments files beside the output; with split, `examples`
    outputs printed beside their references; with as_targets, each output line is the best hypothesis written as
    the task's training targets are (Task.training_target: what distillation trains on)."""

    input: Path | None = None
    split: str | None = None
    prefix_file: Path | None = None
    constraints_file: Path | None = None
    annotations: Path | None = None
    alignments: Path | None = None
    examples: int = 0
    as_targets: bool = False

    def __post_init__(self) -> None:
        if (self.input is None) == (self.split is None):
            raise UserError("decode: give exactly one of --input FILE (or -) and --split NAME")
        if self.prefix_file is not None and self.input is None:
            raise UserError("decode --prefix-file: give it with --input (one prefix per source line)")
        if self.constraints_file is not None and self.input is None:
            raise UserError("decode --constraints: give it with --input (one line of phrases per source line)")
        if self.split is not None and self.directed:
            raise UserError("decode --split: a split's examples carry their own languages; give --tgt-lang and "
                            "--tgt-lang-column with --input")
        super().__post_init__()


@dataclass(frozen=True, kw_only=True)
class ScoreFile(FileRequest):
    """`seqxduce score`: the pairs of two files read in step; normalize adds the length-normalized column."""

    source: Path
    target: Path
    normalize: bool = False


def decode_file(request: DecodeFile) -> StreamedFile:
    """Decode a file of any length or a task's split, streamed (see seqxduce.engine.decode_file)."""
    engine = request.engine
    features = [name for name, used in (("annotations", request.annotations), ("alignments", request.alignments),
                                         ("prefixes", request.prefix_file)) if used is not None]
    features += _constraint_features(request.constraints_file)
    engine.check(request.run, "decode", features)
    engine.check_processes(request.run, request.processes)
    total, languages = _input_lines(request)
    finished = _finished_already(request, "decode", _decode_finals(request), request.split is not None,
                                 lambda plan: _decode_record(request, plan.described, plan.model_files, plan.recipe))
    if finished is not None:
        return finished
    early = _planned_directions(request, languages)
    with _Stops("decode", request.output) as stops, engine.open(request.run) as loaded:
        _say(f"decoding with {engine.announced(loaded)}")
        prefix_where = f"--prefix-file {request.prefix_file}:" if request.prefix_file is not None else "line "
        job = engine.decode_job(request.run, annotate=request.annotations is not None,
                                align=request.alignments is not None, split=request.split is not None,
                                prefix_where=prefix_where, as_targets=request.as_targets,
                                **_constraint_where(request.constraints_file))
        directions = early or _directions(request, loaded.task, languages)
        return _stream_decode(request, job, job.processor_for(loaded), loaded, total, stops, directions)


def score_file(request: ScoreFile) -> StreamedFile:
    """Score the pairs of two files of any length, streamed (see seqxduce.engine.score_file)."""
    engine = request.engine
    engine.check(request.run, "score", ["scoring"])
    engine.check_processes(request.run, request.processes)
    languages: set[str] = set()
    if request.tgt_lang_column:
        sources, languages = _column_languages(request.source)
    else:
        sources = count_lines(request.source)
    targets = count_lines(request.target)
    if sources != targets:
        raise UserError(f"--source {request.source} has {sources} lines but --target {request.target} has "
                        f"{targets}: give one target line per source line")
    finals = {"output": request.output} if request.output is not None else {}
    finished = _finished_already(request, "score", finals, False,
                                 lambda plan: _score_record(request, plan.described, plan.model_files, plan.recipe))
    if finished is not None:
        return finished
    early = _planned_directions(request, languages)
    with _Stops("score", request.output) as stops, engine.open(request.run) as loaded:
        _say(f"scoring with {engine.announced(loaded)}")
        job = engine.score_job(request.run, request.normalize)
        described = engine.described(loaded, request.run)
        record = _score_record(request, described, engine.model_files(loaded, request.run), loaded.recipe)
        directions = early or _directions(request, loaded.task, languages)
        items: Iterable = zip(iter_lines(request.source), iter_lines(request.target))
        if directions is not None:
            items = _directed(request, items, directions, request.source, scoring=True)
        done = _run_stream(request, _Streamed(job, job.processor_for(loaded), _processes(request, sources, loaded),
                                              items, sources, finals, record, "score"), stops)
        done.described = described
        return done


def _finished_already(request: FileRequest, what: str, finals: dict[str, Path], keep: bool,
                      record_of: Callable[[Planned], dict]) -> StreamedFile | None:
    """--resume on an output that is complete (no stopped job's record beside it), found so before any model
    loads when the engine knows its load beforehand (Engine.planned): the output of this same job is done, one of
    another job is refused naming what differs (stream_files.OutputFiles). None: the job has work to do, or the
    engine must load to know. record_of: the job's record from the planned load, as the command keys it."""
    from seqxduce.decoding.stream_files import OutputFiles, partial_path, record_path

    output = request.output
    if not request.resume or output is None or not output.exists() or record_path(output).exists() \
            or partial_path(output).exists():
        return None
    planned = request.engine.planned(request.run)
    if planned is None:
        return None
    files = OutputFiles(finals, {**record_of(planned), "buffer_size": _grid(request).size}, keep=keep)
    if files.open(resume=True):  # cannot be: no record and the final output there
        raise RuntimeError(f"{output}: a complete output opened as a job to continue")
    _say_complete(what, output, keep)
    return StreamedFile(count_lines(output), 0, complete_already=True, described=planned.described)


def _decode_finals(request: DecodeFile) -> dict[str, Path]:
    return {name: Path(path) for name, path in (("output", request.output), ("annotations", request.annotations),
                                                ("alignments", request.alignments)) if path is not None}


def _score_record(request: ScoreFile, described: str, model_files: list[Path], recipe: Recipe) -> dict:
    """What a streamed score's resume record keys the job by (as _decode_record)."""
    return {"command": "score", "source": _file_key(request.source), "target": _file_key(request.target),
            "checkpoint": described, "checkpoint_files": [_file_key(p) for p in model_files],
            "normalize": request.normalize, **_lang_record(request), **_decode_settings(recipe)}


def _decode_record(request: DecodeFile, described: str, model_files: list[Path], recipe: Recipe) -> dict:
    """What a streamed decode's resume record keys the job by (stream_files.OutputFiles: another is refused)."""
    return {"command": "decode", "input": _described_input(request.input, request.split),
            "prefix_file": _file_key(request.prefix_file), "checkpoint": described,
            # absent without constraints, so that the records of jobs before them read the same
            **({"constraints_file": _file_key(request.constraints_file)} if request.constraints_file else {}),
            **({"as_targets": True} if request.as_targets else {}), **_lang_record(request),
            "checkpoint_files": [_file_key(p) for p in model_files], **_decode_settings(recipe)}


def _lang_record(request: FileRequest) -> dict:
    """The directions chosen, as a resume record keys them (a job of another language is another job); absent
    when none is chosen, so that the records of jobs before them read the same."""
    return {key: value for key, value in (("tgt_lang", request.tgt_lang), ("src_lang", request.src_lang),
                                          ("tgt_lang_column", request.tgt_lang_column)) if value}


def _input_lines(request: DecodeFile) -> tuple[int | None, set[str]]:
    """The input's line count (None for stdin or a split) and, with --tgt-lang-column, the languages of its
    column, refused before any model loads when the prefix file does not match it, or when torchrun's ranks
    cannot all read stdin."""
    from seqxduce.decoding.stream_job import under_torchrun

    if request.input is None:
        return None, set()
    if str(request.input) == "-":
        if under_torchrun():
            raise UserError("--input -: under torchrun every rank reads the input; give a file")
        return None, set()
    languages: set[str] = set()
    if request.tgt_lang_column:
        total, languages = _column_languages(request.input)
    else:
        total = count_lines(request.input)
    if request.prefix_file is not None:
        prefixes = count_lines(request.prefix_file)
        if prefixes != total:
            raise UserError(f"--prefix-file {request.prefix_file}: {prefixes} prefixes for {total} sources; give one "
                            "prefix line per source line (an empty line for none)")
    if request.constraints_file is not None:
        lines = count_lines(request.constraints_file)
        if lines != total:
            raise UserError(f"--constraints {request.constraints_file}: {lines} lines for {total} sources; give one "
                            "line of tab-separated phrases per source line (an empty line for none)")
    return total, languages


def _constraint_features(path: Path | None) -> list[str]:
    """The engine features a constraints file uses, read once before any model loads (a line that cannot be
    read, such as an empty phrase, is refused here naming it)."""
    from seqxduce.decoding.phrases import PhraseText, constraint_features

    if path is None:
        return []
    return constraint_features([PhraseText.from_line(line, f"--constraints {path}:{number}")
                                for number, line in enumerate(iter_lines(path), start=1)])


def _constraint_where(path: Path | None) -> dict[str, str]:
    """How a decode job names a constraints file's lines in its refusals (none without one)."""
    return {"constraint_where": f"--constraints {path}:"} if path is not None else {}


def _column_languages(path: Path) -> tuple[int, set[str]]:
    """A --tgt-lang-column file's line count and languages, read once before any model loads."""
    from seqxduce.decoding.directions import column_languages

    return column_languages(iter_lines(path), lambda number: f"--tgt-lang-column {path}:{number}")


def _planned_directions(request: FileRequest, languages: set[str]) -> Any:
    """_directions before any model loads, over the task of the recipe the engine will load (Engine.planned),
    so that a language the run does not know is refused at once; None where the engine knows it only once
    loaded (then _directions over the loaded task), or when no direction is chosen."""
    if not request.directed:
        return None
    planned = request.engine.planned(request.run)
    if planned is None:
        return None
    from seqxduce.components import build_task

    return _directions(request, build_task(planned.recipe), languages)


def _directions(request: FileRequest, task: Any, languages: set[str]) -> Any:
    """The Directions of a file's job over the run's task, every language it names checked before any line is
    decoded (a column read from stdin is checked line by line); None when none is chosen."""
    from seqxduce.decoding.directions import Directions

    if not request.directed:
        return None
    directions = Directions(task, request.src_lang, _say)
    given = f" --src-lang {request.src_lang}" if request.src_lang else ""
    if request.tgt_lang:
        directions.check([request.tgt_lang], lambda lang: f"--tgt-lang{given}")
    source = getattr(request, "input", None) or getattr(request, "source", None)
    directions.check(sorted(languages - {""}), lambda lang: f"--tgt-lang-column {source}{given}")
    return directions


def _directed(request: FileRequest, items: Iterable, directions: Any, path: Path | None,
              scoring: bool = False) -> Iterator:
    """A file's items as the model reads them for each line's direction (decoding/directions.py)."""
    from seqxduce.decoding.directions import directed_items

    return directed_items(items, directions, request.tgt_lang, request.tgt_lang_column, scoring,
                          lambda number: f"{path}:{number}")


def _stream_decode(request: DecodeFile, job: BufferJob, process: Processor, loaded: Any, total: int | None,
                   stops: _Stops, directions: Any = None) -> StreamedFile:
    """The streamed job of decode_file, whichever engine's `process` does the buffers."""
    from seqxduce.api import Postprocessed
    from seqxduce.decoding.decode import score_outputs, split_examples

    engine, split, examples = request.engine, request.split, request.examples
    items: Iterable
    if split is not None:
        items = split_examples(loaded.task, loaded.recipe, split)
        total = len(items)
    elif request.prefix_file is not None or request.constraints_file is not None:
        items = _in_step(request.input, request.prefix_file, request.constraints_file)
    else:
        items = iter_lines(request.input)
    if directions is not None:
        items = _directed(request, items, directions, request.input)
    finals = _decode_finals(request)
    described = engine.described(loaded, request.run)
    record = _decode_record(request, described, engine.model_files(loaded, request.run), loaded.recipe)

    def show(piece) -> None:  # a split's first outputs beside their references, as they come
        for k, text in enumerate(piece.lines["output"][: max(examples - piece.start, 0)]):
            ex = items[piece.start + k]
            _say(f"src: {ex.source}\nhyp: {text}\nref: {ex.ref}\n")

    done = _run_stream(request, _Streamed(job, process, _processes(request, total, loaded), items, total, finals,
                                          record, "decode", keep=split is not None,
                                          on_piece=show if split is not None and examples else None), stops)
    done.described = described
    if split is not None and done.writer and not done.complete_already:
        outputs = [Postprocessed(k["text"], k["figures"]) for k in done.kept]
        done.report = score_outputs(loaded.task, outputs, items)
    return done


def _processes(request: FileRequest, lines: int | None, loaded: Any) -> int:
    """Worker processes: as asked; else, for an engine that spreads a long CPU decode, one per usable CPU from
    AUTO_PROCESSES_FROM lines on (decoding.streaming.processes_for); else this process alone."""
    from seqxduce.decoding.stream_job import under_torchrun
    from seqxduce.decoding.streaming import processes_for

    if request.processes is None and not request.engine.auto_processes:
        return 1
    return processes_for(request.processes, lines, request.engine.on_cpu(loaded), under_torchrun(),
                         AUTO_PROCESSES_FROM)


@dataclass
class _Streamed:
    """One streamed job as decode_file and score_file put it together: the work per buffer and the loaded run's
    processor (None: each worker process loads its own), the worker processes, the input items and how many
    (None: unknown until read), the final output files and the record that keys them, what the job is called
    ("decode", "score"), whether its outputs are kept for a split's metric, and what to show of each piece."""

    job: BufferJob
    process: Processor | None
    processes: int
    items: Iterable
    total: int | None
    finals: dict[str, Path]
    record: dict
    what: str
    keep: bool = False
    on_piece: Callable | None = None


def _run_stream(request: FileRequest, streamed: _Streamed, stops: _Stops) -> StreamedFile:
    """run_job with the outputs' files (refused before any work when a file cannot be written)."""
    from seqxduce.cpus import per_worker_threads
    from seqxduce.decoding.stream_files import OutputFiles
    from seqxduce.decoding.stream_job import Plan, run_job

    s = streamed
    grid = _grid(request)
    files = OutputFiles(s.finals, {**s.record, "buffer_size": grid.size}, keep=s.keep) if s.finals else None
    threads = per_worker_threads(s.processes)
    plan = Plan(grid, s.processes, threads, request.resume, s.what, request.continued_by)
    process = s.process
    if s.processes > 1:
        _say(f"{s.what}: {s.processes} worker processes of {threads} thread(s) each")
        process = None  # each worker loads its own
    result = run_job(s.job, s.items, s.total, files, request.output is None, plan, process, on_piece=s.on_piece)
    stops.written = True
    if result.late_signal:
        from seqxduce.stopping import signal_name

        where = "its outputs went to stdout" if not s.finals else f"{next(iter(s.finals.values()))} is complete"
        _say(f"{signal_name(result.late_signal)}: came after the last line was written; {where}")
    if result.complete_already:
        _say_complete(s.what, next(iter(s.finals.values())), s.keep)
    return StreamedFile(result.done, result.new, result.seconds, complete_already=result.complete_already,
                        kept=result.kept, writer=result.writer)


def _grid(request: FileRequest) -> BufferGrid:
    """The job's buffers: --buffer-size, else the default (part of the job's record)."""
    from seqxduce.decoding.streaming import DEFAULT_BUFFER, BufferGrid

    return BufferGrid(request.buffer_size or DEFAULT_BUFFER)


def _say_complete(what: str, output: Path, split: bool) -> None:
    """--resume found the output complete, written by this same job: nothing to do."""
    metric = " (and to print the split's metric)" if split else ""
    _say(f"{what}: {output} is complete already (no stopped job to continue); run without --resume to write it "
         f"anew{metric}")


class _Stops:
    """A signal outside the streamed job's own handling (run_job's): while the model loads, before the job opens
    its files, and after its files are final (a split's metric, the ending), it ends the command at once, with a
    line saying what was written, instead of the signal's default action (no word, and no exit status a
    requeue script can tell from a crash). `written`: the job's files are final."""

    def __init__(self, what: str, output: Path | None):
        self.what, self.output, self.written = what, output, False

    def __enter__(self) -> _Stops:
        from seqxduce.stopping import stop_at_once

        self._handling = stop_at_once()
        self._handling.__enter__()
        return self

    def __exit__(self, kind, error, trace) -> None:
        from seqxduce.stopping import StoppedAtOnce, signal_name

        self._handling.__exit__(kind, error, trace)
        if isinstance(error, StoppedAtOnce):
            said = f"{signal_name(error.signum)}: {self.what} stopped "
            if self.written:
                where = "(its outputs went to stdout)" if self.output is None else f"({self.output} is complete)"
                message = f"{said}after writing every line {where}"
            else:
                message = f"{said}before writing any line; run the same command again to start it"
            raise TrainingStopped(message, exit_code=128 + error.signum) from None


def _in_step(input: Path | None, prefix_file: Path | None,
             constraints_file: Path | None = None) -> Iterator[tuple[str, ...]]:
    """(source, prefix) pairs of the input and the prefix file read in step ("" for each prefix without one),
    and with a constraints file (source, prefix, constraints line) triples; a file that ends before the input,
    or after it, is refused naming it."""
    sources = iter_lines(input)
    beside = [(f"--prefix-file {prefix_file}", "prefixes", "one prefix", iter_lines(prefix_file) if prefix_file
               else None)]
    if constraints_file is not None:
        beside.append((f"--constraints {constraints_file}", "lines", "one line of phrases",
                       iter_lines(constraints_file)))
    for number, source in enumerate(sources, start=1):
        item = [source]
        for flag, what, one, lines in beside:
            line = "" if lines is None else next(lines, None)
            if line is None:
                raise UserError(f"{flag}: {number - 1} {what} for more sources; give {one} per source line (an "
                                "empty line for none)")
            item.append(line)
        yield tuple(item)
    for flag, what, one, lines in beside:
        if lines is not None and next(lines, None) is not None:
            raise UserError(f"{flag}: more {what} than the sources of {input}; give {one} per source line")


def _described_input(input: Path | None, split: str | None) -> str | None:
    return f"split {split}" if split is not None else ("stdin" if str(input) == "-" else _file_key(input))


def _file_key(path: Path | None) -> str | None:
    """A file as a resume record names it: its absolute path, size and modification time (a changed file is
    another job)."""
    if path is None or str(path) == "-":
        return None if path is None else "stdin"
    stat = Path(path).stat()
    return f"{Path(path).resolve()} {stat.st_size} {stat.st_mtime_ns}"


def _decode_settings(recipe: Recipe) -> dict:
    """What in a recipe decides the bits a decode writes, as a resume record compares it."""
    settings = recipe.decode.settings
    return {"decoder": recipe.decode.core.name, "decode": dataclasses.asdict(recipe.decode.core),
            "search": dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else None,
            "device": recipe.train.device, "precision": recipe.train.precision}


def _say(message: str) -> None:
    """A note on stderr, from one process only under torchrun (rank 0)."""
    from seqxduce.console import console

    if is_rank_zero():
        console.print(message, markup=False, highlight=False)
