"""The `seqxduce` command: each command parses, calls the engine in seqxduce.engine, and prints."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import click

from seqxduce import engine
from seqxduce.api import Report, TrainingStopped, UserError
from seqxduce.export import command as export_command
from seqxduce.inspection import commands as inspect_commands
from seqxduce.registry import KINDS, PluginLoadError, Registry, registry
from seqxduce.serving.command import serve as serve_command
from seqxduce.torchrun import first_on_node, watch_launcher


def set_help(example: str) -> str:
    """--set's help, with an example of a key the command reads (a train.* key does nothing to score)."""
    return f"override a recipe value: section.key=value (repeatable), e.g. --set {example}"


ALLOW_ERRORS_HELP = ("exit 0 even when the metric could not score some outputs (e.g. a parse that is not a tree); "
                     "the warning naming them is printed all the same")
EXIT_UNSCORED = 3  # the figures were printed, but they leave out outputs the metric could not score


class Group(click.Group):
    """Turns UserError into one line and a non-zero exit; --debug shows the traceback instead."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TrainingStopped as err:  # asked for (Ctrl-C, SIGTERM): not an error, but not a success either
            if str(err):  # empty on torchrun's ranks that leave the saying to rank 0
                click.echo(str(err), err=True)
            ctx.exit(err.exit_code)
        except UserError as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise click.ClickException(str(err)) from None
        finally:  # a note left unsaid (the command was refused first) must not open the next command's output
            noted = sys.modules.get("seqxduce.console")
            if noted is not None:
                noted.console.notes.clear()


# -h as well as --help, for every command: a context setting is inherited by each subcommand, plugins' included
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


@click.group(cls=Group, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="seqxduce")
@click.option("--debug", is_flag=True, help="show tracebacks for errors")
@click.option("--strict-plugins", is_flag=True, envvar="SEQXDUCE_STRICT_PLUGINS",
              help="make every plugin problem an error instead of a warning that skips it: a plugin that cannot be "
                   "imported, a misspelled hook, a failing register_* call, a name registered twice")
@click.pass_context
def cli(ctx: click.Context, debug: bool, strict_plugins: bool) -> None:
    """seqxduce: train and decode sequence transduction models from recipes."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["strict"] = strict_plugins
    # under torchrun: a launcher that dies (SIGKILL, or a signal it does not handle) stops this process as its
    # SIGTERM would, instead of leaving it training unattended
    watch_launcher()


def _fit_threads() -> None:
    """torch's threads fitted to the CPUs this process may use (seqxduce.cpus), said as the command's first line
    (once per node under torchrun), or not at all before a refusal that comes first (one line alone). Here, not in
    the engine's functions: the thread count is the process's, and a program that calls seqxduce.train keeps the
    one it set."""
    from seqxduce.console import console
    from seqxduce.cpus import fit_threads

    line = fit_threads()
    if first_on_node():
        console.note_first(line)


def _registry(ctx: click.Context):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = registry(strict=bool(ctx.find_root().obj.get("strict")))
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    return reg


# decode's and score's streaming: --resume, --buffer-size, --processes
STREAM_OPTIONS = (
    click.option("--resume", is_flag=True,
                 help="continue the stopped job whose lines are in OUTPUT.partial (the same command line and "
                      "files); without one, start it, so the same command serves a first start and a requeue; "
                      "an output this same job completed is left as it is (one of another input, model or "
                      "settings is refused)"),
    click.option("--buffer-size", type=click.IntRange(min=1), default=8192, show_default=True,
                 help="sources read, sorted by length and decoded together before their outputs are written (the "
                      "first buffers are smaller, so that outputs appear within seconds); memory grows with it, "
                      "not with the input"),
    click.option("--processes", type=click.IntRange(min=1),
                 help="decode with N worker processes sharing the buffers and the usable CPUs (threads each: "
                      "the CPUs // N, or OMP_NUM_THREADS) (default: one per usable CPU, one thread each, for an "
                      "input file of at least 20,000 lines decoded on the CPU, else this process alone)"),
)

# the direction of a multilingual run's outputs (the task's Direction: docs/multilingual.md), for decode and score
LANG_OPTIONS = (
    click.option("--tgt-lang", metavar="LANG",
                 help="the language to write (a multilingual run's target; for one language pair its own target "
                      "only): the task tags every input as training tagged its own; a language the run never saw is "
                      "refused listing those it knows"),
    click.option("--src-lang", metavar="LANG",
                 help="with --tgt-lang or --tgt-lang-column: the sources' language, so that a direction the run "
                      "was never trained on is named in a notice (zero-shot)"),
    click.option("--tgt-lang-column", is_flag=True,
                 help="each line of the input (score: of --source) is LANG<TAB>SOURCE: its own language (an empty "
                      "LANG: --tgt-lang's, or none)"),
)

CHECKPOINT_OPTION = click.option(
    "--checkpoint", metavar="best|average|last|PATH",
    help="which of RUN's checkpoints: best (best.pt, the best validation), average (average.pt), last (the newest "
         "step), for every member and --ensemble run directory alike; or a checkpoint file, read alone with RUN's "
         "recipe. Default: the average if any, else the newest (see `seqxduce info RUN`)")


@cli.command()
@click.option("--kind", type=click.Choice(KINDS), help="list only this kind")
@click.pass_context
def plugins(ctx: click.Context, kind: str | None) -> None:
    """List every registered task, tokenizer, model, decoder, importer and engine, with the package it comes from
    (an engine with what it can do)."""
    reg = _registry(ctx)
    for k in [kind] if kind else KINDS:
        click.echo(f"{k}s:")
        for name in reg.names(k):
            c = reg.get(k, name)
            presets = f" [presets: {', '.join(sorted(c.presets))}]" if c.presets else ""
            can = f" [can: {_capabilities(name)}]" if k == "engine" else ""
            click.echo(f"  {name:<24} {c.distribution} ({c.plugin}){presets}{can}  {c.help}")


def _capabilities(engine_name: str) -> str:
    """An engine's declared features (decoding.engines.FEATURES), or why it cannot be built."""
    from seqxduce.export.engine_choice import engine_named

    try:
        return ", ".join(sorted(engine_named(engine_name).capabilities)) or "none"
    except UserError as err:
        return f"broken: {err}"


@cli.group()
def recipe() -> None:
    """Inspect a recipe file before training: its resolved keys (show), its size and cost (info)."""


@recipe.command("show")
@click.argument("file", metavar="RECIPE", type=click.Path(path_type=Path))
@click.option("--set", "overrides", multiple=True, help=set_help("train.max_steps=100"))
@click.pass_context
def recipe_show(ctx: click.Context, file: Path, overrides: tuple[str, ...]) -> None:
    """Print the full resolved recipe, defaults included, each key with its help."""
    _registry(ctx)
    click.echo(engine.load_recipe(file, overrides).to_toml())


@recipe.command("info")
@click.argument("file", metavar="RECIPE", type=click.Path(path_type=Path))
@click.option("--set", "overrides", multiple=True, help=set_help("train.max_steps=100"))
@click.pass_context
def recipe_info(ctx: click.Context, file: Path, overrides: tuple[str, ...]) -> None:
    """Count a recipe's parameters and training FLOPs before training (for a trained run see `seqxduce info`):
    per step and for max_steps, on a model built on torch's meta device; a run directory's recipe.toml uses the
    run's saved vocabulary."""
    from seqxduce.inspection.cost import cost_lines

    _registry(ctx)
    for line in cost_lines(engine.load_recipe(file, overrides), Path(file).parent):
        click.echo(line)


@cli.command()
@click.argument("recipe_file", metavar="RECIPE", type=click.Path(path_type=Path))
@click.option("--set", "overrides", multiple=True, help=set_help("tokenizer.vocab_size=8000"))
@click.option("--again", is_flag=True, help="prepare the training data anew, replacing what is there (a damaged "
              "dataset)")
@click.option("--workers", type=click.IntRange(1), help="processes that encode the corpus (default: every core)")
@click.option("--data-only", is_flag=True, help="only download or build the task's data; no tokenizer, no ids")
@click.pass_context
def prepare(ctx: click.Context, recipe_file: Path, overrides: tuple[str, ...], again: bool, workers: int | None,
            data_only: bool) -> None:
    """Download the recipe's data, train its tokenizer and encode its training split into a binarized dataset
    that every run of the recipe maps (training does this when it was not done; a cluster job need not)."""
    _registry(ctx)
    where = engine.prepare(engine.load_recipe(recipe_file, overrides), training_data=not data_only, again=again,
                           workers=workers)
    click.echo(f"data ready in {where}")


# how a training run starts (train, distill): the run directory, the recipe's overrides, new, resumed or auto
RUN_OPTIONS = (
    click.option("-o", "--output", "--out", "out", type=click.Path(path_type=Path),
                 help="run directory (default: runs/<recipe name>); --out is the same option"),
    click.option("--set", "overrides", multiple=True, help=set_help("train.max_steps=100")),
    click.option("--resume", is_flag=True, help="continue from the run directory's latest checkpoint"),
    click.option("--auto-resume", is_flag=True,
                 help="continue the run when the run directory holds a checkpoint of it, else start it: the one "
                      "command line for a first start, a requeued job and torchrun's restarts (a raised "
                      "train.max_steps or max_epochs takes the run further)"),
    click.option("--overwrite", is_flag=True, help="replace the run already in the run directory (its recipe, "
                 "tokenizers, checkpoints, average and metrics are removed first)"),
)


# a new run that starts from another's weights (train, distill: a student fine-tuned on its teacher's outputs)
FINE_TUNE_OPTIONS = (
    click.option("--init-from", type=click.Path(path_type=Path),
                 help="fine-tune: start from this run's weights (RUN: the checkpoint decode uses; or a CHECKPOINT) "
                      "and tokenizer files, with a fresh optimizer and schedule; [model] and [tokenizer] must match"),
    click.option("--keep-optimizer", is_flag=True,
                 help="with --init-from: keep that checkpoint's optimizer state (Adam's moments) too"),
)


def _with_options(options: tuple[Callable, ...]) -> Callable[[Callable], Callable]:
    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command
    return decorate


run_options = _with_options(RUN_OPTIONS)  # RUN_OPTIONS on a command, in their order
fine_tune_options = _with_options(FINE_TUNE_OPTIONS)


@cli.command()
@click.argument("recipe_file", metavar="RECIPE", type=click.Path(path_type=Path))
@run_options
@click.option("--tokenizers-from", type=click.Path(path_type=Path, file_okay=False),
              help="a new run takes this run directory's tokenizer files instead of training its own, so that "
                   "the two can be ensembled (decode --ensemble)")
@fine_tune_options
@click.option("--single", is_flag=True, hidden=True,
              help="train this directory alone even if the recipe names several members (the members' processes)")
@click.pass_context
def train(ctx: click.Context, recipe_file: Path, out: Path | None, overrides: tuple[str, ...], resume: bool,
          auto_resume: bool, overwrite: bool, tokenizers_from: Path | None, init_from: Path | None,
          keep_optimizer: bool, single: bool) -> None:
    """Train a model from a recipe into a run directory. Run under torchrun for several processes.

    With [train] members = N, trains N seeds side by side (RUN and RUN/members/K); decoding RUN ensembles them.
    Ctrl-C, SIGTERM or SIGUSR1 saves the last completed step (the step under way is dropped and replayed by the
    resume) and exits (130, 143 or 138); --resume or --auto-resume continues."""
    _registry(ctx)
    _fit_threads()
    start = engine.RunStart.from_flags(resume=resume, auto_resume=auto_resume, overwrite=overwrite,
                                       tokenizers_from=tokenizers_from, init_from=init_from,
                                       keep_optimizer=keep_optimizer)
    result = engine.train(recipe_file, out=out, start=start, overrides=overrides, single=single)
    if result.finished_before:  # said in its one line
        return
    _say_trained(result)


def _say_trained(result: engine.TrainResult) -> None:
    from seqxduce.decoding.groups import compact_line  # a task's groups folded beside their mean, as validation's

    figures = " ".join(f"{k}={v}" if isinstance(v, str) else f"{k}={v:.4g}"
                       for k, v in compact_line(result.metrics).items())
    click.echo(f"trained to step {result.step} in {result.run_dir} {figures}".rstrip())


@cli.command()
@click.argument("teacher", metavar="TEACHER_RUN", type=click.Path(path_type=Path, file_okay=False))
@click.argument("recipe_file", metavar="RECIPE", type=click.Path(path_type=Path))
@run_options
@click.option("--teacher-set", "teacher_overrides", multiple=True,
              help="change the teacher's search for the distillation, e.g. decode.beam=5 (repeatable; default: the "
                   "teacher run's own [decode])")
@click.option("--checkpoint", metavar="best|average|last|PATH",
              help="which of TEACHER_RUN's checkpoints teaches: best, average or last, for each of its members "
                   "alike; or a checkpoint file. Default: the average if any, else the newest")
@STREAM_OPTIONS[2]
@fine_tune_options
@click.pass_context
def distill(ctx: click.Context, teacher: Path, recipe_file: Path, out: Path | None, overrides: tuple[str, ...],
            resume: bool, auto_resume: bool, overwrite: bool, teacher_overrides: tuple[str, ...],
            checkpoint: str | None, processes: int | None, init_from: Path | None, keep_optimizer: bool) -> None:
    """Train a student on its teacher's outputs (sequence-level knowledge distillation): TEACHER_RUN (its
    ensemble of members, or an imported model) decodes RECIPE's training sources with its own search, streamed
    and resumable on every core; the outputs are kept once, keyed by the teacher's checkpoints, search and the
    data, for every later student; then RECIPE trains on them into RUN as `train` does ([distill] original_ratio
    adds a share of the original pairs, [distill] member_outputs each member's own outputs beside the ensemble's;
    [distill] word_kd also has it learn the teacher's next-token distributions, computed once before the first
    step). With --init-from the student starts from another run's weights, e.g. the same model trained on the
    original pairs (fine-tuned on the teacher's outputs). A stop keeps what was decoded, computed or trained; the
    same command with --auto-resume continues."""
    _registry(ctx)
    _fit_threads()
    start = engine.RunStart.from_flags(resume=resume, auto_resume=auto_resume, overwrite=overwrite,
                                       init_from=init_from, keep_optimizer=keep_optimizer)
    result = engine.distill(teacher, recipe_file, out=out, start=start, overrides=overrides,
                            teacher_overrides=teacher_overrides, checkpoint=checkpoint, processes=processes)
    if not result.finished_before:
        _say_trained(result)


@cli.command(name="import")
@click.argument("source", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--from", "importer", required=True, metavar="NAME",
              help="the importer plugin that reads DIR (`seqxduce plugins --kind importer`), e.g. marian")
@click.option("-o", "--output", "--out", "out", required=True, type=click.Path(path_type=Path),
              help="the run directory to write")
@click.option("--overwrite", is_flag=True, help="replace the run already in the run directory")
@click.pass_context
def import_command(ctx: click.Context, source: Path, importer: str, out: Path, overwrite: bool) -> None:
    """Make a run directory of a model trained elsewhere (e.g. a Hugging Face Marian / OPUS-MT folder): decode,
    serve, export and fine-tune it (`train RECIPE --init-from RUN`) as your own runs."""
    _registry(ctx)
    run, notes = engine.import_model(source, importer, out, overwrite=overwrite)
    for line in notes:
        click.echo(line)
    click.echo(f"imported {source} into {run}")


@cli.command()
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--input", "input_file", type=click.Path(path_type=Path, allow_dash=True),
              help="sources, one per line ('-' for stdin)")
@click.option("--split", help="decode one of the task's splits and print its metric instead")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="write outputs here instead of stdout")
@CHECKPOINT_OPTION
@click.option("--beam", type=click.IntRange(min=1), help="beam size (decode.beam)")
@click.option("--nbest", type=click.IntRange(min=1),
              help="write the N best hypotheses of each source, with their scores (decode.nbest; widens a narrower "
                   "beam)")
@click.option("--batch-tokens", type=click.IntRange(min=1),
              help="batch up to N padded source tokens instead of decode.batch_size sentences (decode.batch_tokens)")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), help="decode on this device (the recipe's train.device)")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16", "int8"]),
              help="compute in fp32, bf16 or fp16 (autocast; fp16 on CUDA only) or int8 (dynamically quantized "
                   "Linear layers, CPU only; with --engine ctranslate2 its compute type); default the recipe's "
                   "(decode.precision)")
@click.option("--set", "overrides", multiple=True,
              help="override any other recipe value: section.key=value (repeatable), e.g. --set decode.max_len_b=50, "
                   "or --set model.steps=N for a Universal Transformer's depth (only the model keys its plugin "
                   "declares decode-time)")
@click.option("--examples", default=3, show_default=True, help="with --split: outputs printed beside references")
@click.option("--annotations", type=click.Path(path_type=Path),
              help="also write the model's per-position figures (e.g. a Universal Transformer's ponder counts) "
                   "for each source and best output here, one JSON object per line")
@click.option("--allow-errors", is_flag=True, help="with --split: " + ALLOW_ERRORS_HELP)
@click.option("--ensemble", multiple=True, type=click.Path(path_type=Path),
              help="also a checkpoint or run directory whose predictions are averaged in (repeat it; each must "
                   "share RUN's tokenizer files, e.g. another checkpoint of the same run)")
@click.option("--alignments", type=click.Path(path_type=Path),
              help="also write source-target word alignments here in Pharaoh format (0-0 1-2 ...), one line per "
                   "output line, from the encoder-decoder attention ([decode] alignment_layer, default the "
                   "penultimate layer, and alignment_heads, default all averaged)")
@export_command.engine_option()
@click.option("--prefix-file", type=click.Path(path_type=Path),
              help="with --input: line N is target text that output N must start with, then searched freely (as "
                   "CTranslate2's target_prefix; an empty line for none); every decoder")
@click.option("--constraints", "constraints_file", type=click.Path(path_type=Path),
              help="with --input: line N holds phrases output N must contain, in any order, separated by tabs (as "
                   "fairseq-interactive reads them); a phrase written !words must not appear (\\!words: must "
                   "appear, starting with !); an empty line for none. Lexically constrained beam search (dynamic "
                   "beam allocation); CTranslate2 takes only phrases that must not appear")
@click.option("--as-targets", is_flag=True,
              help="write each source's best output as the task's training targets are written, before the task's "
                   "postprocess (parsing: the linearized tree, not the tree), to train a model on them (sequence-"
                   "level distillation by hand); one line per source")
@LANG_OPTIONS[0]
@LANG_OPTIONS[1]
@LANG_OPTIONS[2]
@STREAM_OPTIONS[0]
@STREAM_OPTIONS[1]
@STREAM_OPTIONS[2]
@click.pass_context
def decode(ctx: click.Context, run: Path, input_file: Path | None, split: str | None, output: Path | None,
           checkpoint: str | None, beam: int | None, nbest: int | None, batch_tokens: int | None,
           device: str | None, precision: str | None, overrides: tuple[str, ...], examples: int,
           annotations: Path | None, allow_errors: bool, ensemble: tuple[Path, ...], alignments: Path | None,
           engine_name: str, prefix_file: Path | None, constraints_file: Path | None, as_targets: bool,
           tgt_lang: str | None,
           src_lang: str | None, tgt_lang_column: bool, resume: bool, buffer_size: int,
           processes: int | None) -> None:
    """Decode sources with a trained run: RUN is a run directory (or one checkpoint file in it). A run trained
    with [train] members = N decodes with the ensemble of its members.

    Inputs of any length are streamed: read in buffers, each sorted by length and batched, its outputs written
    in input order before the next is read. With --output a stopped decode keeps its complete lines in
    OUTPUT.partial, and the same command with --resume continues it. Under torchrun the processes share the
    buffers and write one output.

    With --split, exits with status 3 after writing everything when the metric left outputs out of its figures
    (a warning on stderr names them), unless --allow-errors."""
    from seqxduce.decoding.changes import flag_changes

    _registry(ctx)
    for option, path in (("--output", output), ("--annotations", annotations), ("--alignments", alignments)):
        if path is not None:  # before any work: a decode must not be lost for want of a place to write it
            engine.check_writable(path, f"{option} {path}")
    if as_targets and nbest is not None and nbest > 1:
        raise click.UsageError("--as-targets writes one line per source, its best output; --nbest lines already "
                               "give each hypothesis before the task's postprocess: give one of the two")
    changes = flag_changes(beam=beam, nbest=nbest, batch_tokens=batch_tokens, device=device, precision=precision)
    _fit_threads()
    done = engine.decode_file(run, input_file, output, split=split, prefix_file=prefix_file,
                              constraints_file=constraints_file, as_targets=as_targets,
                              annotations=annotations, alignments=alignments, overrides=overrides,
                              ensemble=ensemble, checkpoint=checkpoint, changes=changes, engine=engine_name,
                              resume=resume, buffer_size=buffer_size, processes=processes, examples=examples,
                              tgt_lang=tgt_lang, src_lang=src_lang, tgt_lang_column=tgt_lang_column)
    if done.report is not None:
        # with outputs on stdout the report goes to stderr, so that stdout stays one output per line
        click.echo(done.report.text or _metric_line(done.report.metrics), err=output is None)
        _check_unscored(ctx, done.report, allow_errors)


@cli.command()
@click.argument("run", metavar="RUN", type=click.Path(path_type=Path))
@click.option("--source", "source_file", required=True, type=click.Path(path_type=Path),
              help="sources, one per line")
@click.option("--target", "target_file", required=True, type=click.Path(path_type=Path),
              help="targets, one per line, the i-th scored given the i-th source")
@click.option("--normalize", is_flag=True,
              help="add a third column: the total divided by the decoder's GNMT length penalty "
                   "((5 + length) / 6) ** alpha with [decode] alpha (beam's score, as decode's n-best lines show "
                   "it; greedy and sampling: the total)")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="write the scores here instead of stdout")
@click.option("--set", "overrides", multiple=True, help=set_help("decode.alpha=1.0"))
@click.option("--ensemble", multiple=True, type=click.Path(path_type=Path),
              help="also a checkpoint or run directory whose probabilities are averaged in, as in decode")
@CHECKPOINT_OPTION
@export_command.engine_option()
@LANG_OPTIONS[0]
@LANG_OPTIONS[1]
@LANG_OPTIONS[2]
@STREAM_OPTIONS[0]
@STREAM_OPTIONS[1]
@STREAM_OPTIONS[2]
@click.pass_context
def score(ctx: click.Context, run: Path, source_file: Path, target_file: Path, normalize: bool,
          output: Path | None, overrides: tuple[str, ...], ensemble: tuple[Path, ...], checkpoint: str | None,
          engine_name: str, tgt_lang: str | None, src_lang: str | None, tgt_lang_column: bool, resume: bool,
          buffer_size: int, processes: int | None) -> None:
    """Score given pairs with a trained run, as decode loads it (a multi-member run: its ensemble): one line per
    pair, tab-separated, the target's total log-probability and its log-probability per token, both over its
    tokens and eos (natural log), for filtering and reranking. Streamed, resumable and shared among processes
    as decode is. With --tgt-lang each pair is written as training wrote its pairs (a target's tag is scored,
    as decode's log-probability counts a forced prefix)."""
    _registry(ctx)
    if output is not None:
        engine.check_writable(output, f"--output {output}")
    _fit_threads()
    engine.score_file(run, source_file, target_file, output, normalize=normalize, overrides=overrides,
                      ensemble=ensemble, checkpoint=checkpoint, resume=resume, buffer_size=buffer_size,
                      processes=processes, engine=engine_name, tgt_lang=tgt_lang, src_lang=src_lang,
                      tgt_lang_column=tgt_lang_column)


def _check_unscored(ctx: click.Context, report: Report, allow_errors: bool) -> None:
    """Warn on stderr when the metric's figures leave outputs out, and exit 3 unless the user allows it."""
    if not report.invalid:
        return
    warning = report.warning or f"{report.invalid} outputs could not be scored and are left out of the figures"
    click.echo(f"warning: {warning}" + ("" if allow_errors else "; pass --allow-errors to accept this (exit 0)"),
               err=True)
    if not allow_errors:
        ctx.exit(EXIT_UNSCORED)


def _metric_line(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4f}" for k, v in metrics.items())


@cli.command()
@click.argument("hypotheses", type=click.Path(path_type=Path))
@click.argument("references", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--recipe", "recipe_or_run", type=click.Path(path_type=Path),
              help="a recipe file or run directory naming the task")
@click.option("--task", "task_name", help="a task plugin name (with its default settings)")
@click.option("--set", "overrides", multiple=True,
              help=set_help("task.literature_bleu=true") + " (translation: also the Multi30k papers' lowercased "
                   "Moses-tokenized BLEU); with --task, that task's settings only")
@click.option("--allow-errors", is_flag=True, help=ALLOW_ERRORS_HELP)
@click.pass_context
def evaluate(ctx: click.Context, hypotheses: Path, references: tuple[Path, ...], recipe_or_run: Path | None,
             task_name: str | None, overrides: tuple[str, ...], allow_errors: bool) -> None:
    """Score a hypothesis file against a reference file (or several: REF1 REF2 ..., each a translation of every
    line, scored as sacreBLEU scores several references) with the task's metric.

    The hypotheses come first (EVALB's own order is GOLD TEST; here it is HYPOTHESES REFERENCES). When the
    metric could not score some outputs (for ptb: EVALB's error sentences, empty outputs, unpaired lines), the
    figures are printed as the metric gives them, a warning on stderr names those outputs, and the exit status
    is 3 unless --allow-errors."""
    _registry(ctx)
    report = engine.evaluate(hypotheses, list(references), recipe=recipe_or_run, task=task_name,
                             overrides=overrides)
    click.echo(report.text or _metric_line(report.metrics))
    if report.signature:
        click.echo(report.signature)
    _check_unscored(ctx, report, allow_errors)


@cli.command()
@click.argument("checkpoints", metavar="CHECKPOINT... | RUN --last N", nargs=-1, required=True,
                type=click.Path(path_type=Path))
@click.option("--last", type=click.IntRange(1), help="average the run's last N step checkpoints (give one RUN)")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), help="averaged checkpoint file")
def average(checkpoints: tuple[Path, ...], last: int | None, output: Path) -> None:
    """Average the parameters of checkpoints named one by one, or of a run's last N step checkpoints
    (the paper averages the last 5 or 20)."""
    paths = list(checkpoints)
    if last is not None:
        if len(paths) != 1:
            raise UserError(f"average --last {last}: give one run directory, not {len(paths)} paths")
        paths = engine.last_checkpoints(paths[0], last)
    engine.average(paths, output)
    click.echo(f"averaged {len(paths)} checkpoints into {output}"
               + (f" ({', '.join(p.name for p in paths)})" if last is not None else ""))


for _command in inspect_commands.COMMANDS:
    cli.add_command(_command)
cli.add_command(serve_command)
cli.add_command(export_command.export)


def add_plugin_commands(reg: Registry | None = None, strict: bool | None = None) -> click.Group:
    """Let plugins add their commands (register_commands hook); adding the same command again replaces it."""
    if reg is None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reg = registry(strict=strict)
        for w in caught:
            click.echo(f"warning: {w.message}", err=True)
    reg.pm.hook.register_commands(cli=cli)
    return cli


def _global_flag(argv: list[str], flag: str) -> bool:
    """Whether a group option was given before the command name: plugins load before click parses."""
    for arg in argv:
        if arg == flag:
            return True
        if not arg.startswith("-"):
            return False
    return False


def main() -> None:
    """Console entry point."""
    argv = sys.argv[1:]
    debug = _global_flag(argv, "--debug")
    strict = _global_flag(argv, "--strict-plugins") or None  # None: SEQXDUCE_STRICT_PLUGINS decides
    try:
        add_plugin_commands(strict=strict)
    except UserError as err:
        if debug:
            raise
        click.echo(f"Error: {err}", err=True)
        sys.exit(1)
    except PluginLoadError as err:  # only in strict mode does a plugin's own error get here
        if debug:
            raise
        click.echo(f"Error: {err}; fix or uninstall it, run without --strict-plugins to skip it, "
                   "or add --debug for the traceback", err=True)
        sys.exit(1)
    except Exception as err:  # e.g. a plugin's register_commands failing
        if debug:
            raise
        click.echo(f"Error: a plugin failed to load ({type(err).__name__}: {err}); fix or uninstall it, "
                   "run without --strict-plugins to skip it, or add --debug for the traceback", err=True)
        sys.exit(1)
    cli(obj={})
