"""Decoding, i.e. running a trained model over sources: load a run, batch sources by length, call the decoder
plugin (which runs a search over the model), restore input order, postprocess with the task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from seqxduce import checkpoint as ckpt
from seqxduce import components, rundir
from seqxduce.api import (
    Decoder,
    DecodeRequest,
    Example,
    Hypothesis,
    Model,
    Output,
    Phrases,
    Postprocessed,
    Report,
    Task,
    Tokenizer,
    UserError,
)
from seqxduce.console import console
from seqxduce.data import encode_source, pad_sources
from seqxduce.decoding.changes import Change, with_changes
from seqxduce.decoding.groups import group_names, score_by_group
from seqxduce.decoding.options import (
    check_precision,
    compile_step,
    decode_precision,
    fit_precision,
    prepare_for_decoding,
)
from seqxduce.decoding.phrases import PhraseText, encode_phrases, violations
from seqxduce.device import autocast_context, resolve_device
from seqxduce.members import member_checkpoints, member_dir
from seqxduce.recipe import Recipe, split_override


def encode_prefixes(tokenizer: Tokenizer, prefixes: Sequence[str], where: str, first: int = 1) -> list[list[int]]:
    """Target prefixes as ids; one the target vocabulary cannot spell (an <unk> in it) is refused in one line
    naming `where` and its 1-based number (`first`: the number of prefixes[0], for a buffer of a long file)."""
    encoded = []
    for number, text in enumerate(prefixes, start=first):
        ids = tokenizer.encode(text)
        if tokenizer.unk_id in ids or (text.strip() and not ids):
            raise UserError(f"{where}{number}: the prefix {text!r} has a part the target vocabulary cannot spell "
                            f"(it encodes to <unk>); a forced prefix must be text the model can output: rephrase it "
                            "or leave it out")
        encoded.append(ids)
    return encoded


@dataclass
class DecodeParts:
    """What decoding runs with: the model and its tokenizers, the task that frames its outputs, the decoder, the
    device, and the recipe whose [train] precision and [decode] batching it decodes with. A run loaded from disk
    (LoadedRun) is one; validation builds one around the model it trains."""

    recipe: Recipe
    task: Task
    tokenizers: components.Tokenizers
    model: Model
    decoder: Decoder
    device: torch.device


def task_prefixes(tokenizer: Tokenizer, examples: Sequence[Example] | Sequence[str]) -> list[list[int]] | None:
    """The examples' own target prefixes as ids (a multilingual target's language tag, Example.prefix), forced as a
    --prefix-file's are; None when no example has one."""
    if not any(isinstance(ex, Example) and ex.prefix for ex in examples):
        return None
    return encode_prefixes(tokenizer, [ex.prefix if isinstance(ex, Example) else "" for ex in examples],
                           "the task's target prefix of example ")


def decode_sources(run: DecodeParts, examples: Sequence[Example] | Sequence[str], decoder: Decoder | None = None,
                   prefixes: Sequence[list[int]] | None = None,
                   constraints: Sequence[Phrases] | None = None) -> list[Output]:
    """Run the model over sources (Examples or plain source strings) with the run's decoder (or `decoder`),
    batched by length as [decode] says (at most batch_size sources, or with batch_tokens > 0 at most that many
    padded source tokens) in its decode precision (decoding.options.decode_precision: [decode] precision, or the
    recipe's [train] precision), and give the task's outputs in input order; prefixes (target ids per source,
    encode_prefixes) start each output; constraints (per source, phrases.encode_phrases) are phrases each output
    holds or avoids: a decoder that does not honour them is refused in one line, never passed over silently."""
    model, tokenizers, device, decode = run.model, run.tokenizers, run.device, run.recipe.decode.core
    decoder = decoder if decoder is not None else run.decoder
    sources = [ex.source if isinstance(ex, Example) else ex for ex in examples]
    tgt = tokenizers.tgt
    if prefixes is None:
        prefixes = task_prefixes(tgt, examples)
    encoded = [encode_source(tokenizers.src, s) for s in sources]
    order = sorted(range(len(sources)), key=lambda i: len(encoded[i]))
    results: list[Output | None] = [None] * len(sources)
    precision = decode_precision(run.recipe)
    autocast = precision if precision in ("bf16", "fp16") else "fp32"  # int8 is in the model's Linear layers
    was_training = model.training
    model.eval()
    try:
        for chunk in source_batches(order, [len(e) for e in encoded], decode.batch_size, decode.batch_tokens):
            request = DecodeRequest(
                src=pad_sources([encoded[i] for i in chunk], tgt.pad_id).to(device),
                sources=[sources[i] for i in chunk], bos_id=tgt.bos_id, eos_id=tgt.eos_id, pad_id=tgt.pad_id,
                prefixes=None if prefixes is None else [list(prefixes[i]) for i in chunk],
                constraints=None if constraints is None else [constraints[i] for i in chunk],
            )
            with torch.no_grad(), autocast_context(device, autocast):
                nbests = decoder.decode(model, request)
            if request.constraints is not None:
                _check_honoured(decoder, request.constraints, nbests)
            for i, hyps in zip(chunk, nbests):
                texts = [(tgt.decode(h.tokens), h) for h in hyps]
                best = run.task.postprocess(texts[0][0] if texts else "", sources[i])
                results[i] = Output(sources[i], best.text, texts, figures=best.figures)
    finally:
        model.train(was_training)
    return [r for r in results if r is not None]


def _check_honoured(decoder: Decoder, constraints: Sequence[Phrases], nbests: Sequence[Sequence[Hypothesis]]) -> None:
    """Refuse outputs that break their constraints: the core's searches never do, a decoder plugin that ignores
    DecodeRequest.constraints would."""
    for phrases, hyps in zip(constraints, nbests):
        if phrases and any(violations(h.tokens, phrases) for h in hyps):
            raise UserError(f"decode: the decoder {type(decoder).__name__} does not honour constraints (an output "
                            "breaks them); decode with the recipe's beam or greedy decoder, or without constraints")


def source_batches(order: Sequence[int], lengths: Sequence[int], batch_size: int,
                   batch_tokens: int = 0) -> list[list[int]]:
    """Consecutive batches of `order` (indices sorted by length, shortest first): at most batch_size each, or with
    batch_tokens > 0 as many as keep (count x longest) within batch_tokens; a source longer than that goes alone."""
    if batch_tokens <= 0:
        return [list(order[start:start + batch_size]) for start in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > batch_tokens:  # sorted: the newest is the longest
            batches.append(current)
            current = []
        current.append(i)
    return batches + ([current] if current else [])


@dataclass
class LoadedRun(DecodeParts):
    """Everything decoding needs, loaded from a run directory: what was loaded (checkpoint, members) included, so
    that a command says what it decodes with from what it loaded."""

    run_dir: Path = Path()
    checkpoint: Path = Path()
    members: list[Path] = field(default_factory=list)  # the other checkpoints ensembled in, in order
    run_members: int = 1  # [train] members of the run directory named (1: a single-model run)
    member: int | None = None  # the member loaded alone (load_run's member), None for the run as a whole

    def described(self) -> str:
        """'CHECKPOINT + MEMBER + ...': what this decodes with, for a command's first line."""
        return str(self.checkpoint) + "".join(f" + {p}" for p in self.members)


@dataclass
class PlannedRun:
    """What load_run will load, found without loading any weights: the run directory, the checkpoint chosen, the
    recipe (overrides and changes applied) and the checkpoints ensembled in (a resumed job's key needs no more)."""

    run: rundir.RunDir
    checkpoint: Path
    recipe: Recipe
    members: list[Path]
    run_members: int
    member: int | None
    precision_note: str | None = None  # what fit_precision changed, said once the load begins
    # the recipe as asked of the run (overrides and changes), before fit_precision: the same whatever device
    # decodes it (a distilled set's key is made of its [decode], found again on another machine)
    asked: Recipe | None = None

    def described(self) -> str:
        """As LoadedRun.described says it once loaded."""
        return str(self.checkpoint) + "".join(f" + {p}" for p in self.members)


def plan_run(path: Path, overrides: Sequence[str] = (), ensemble: Sequence[Path] = (), checkpoint: str | None = None,
             member: int | None = None, changes: Sequence[Change] = ()) -> PlannedRun:
    """load_run's choices (arguments as load_run's), made without loading a model."""
    run, chosen = rundir.locate(path, checkpoint)
    recipe = run.load_recipe(overrides)
    components.check_decode_overrides(recipe, tuple(overrides))
    recipe = with_changes(recipe, changes)
    run_members = recipe.train.members if Path(path).is_dir() else 1
    whole = Path(path).is_dir() and member is None and (checkpoint is None or checkpoint in rundir.CHECKPOINT_CHOICES)
    members = member_checkpoints(run, recipe, checkpoint) if whole else []
    if member is not None:
        run, chosen, recipe = _member_alone(path, run, chosen, recipe, member, overrides, checkpoint)
        recipe = with_changes(recipe, changes)
    # --ensemble run directories take the same choice (best, average or last) as this run's members
    choice = checkpoint if checkpoint in rundir.CHECKPOINT_CHOICES else None
    members += [p for extra in ensemble for p in _checkpoints_of(Path(extra), choice)]
    # here, not at the load: a resumed decode's record keys the precision the bits come from
    fitted, precision_note = fit_precision(recipe, resolve_device(recipe.train.device))
    return PlannedRun(run, chosen, fitted, members, run_members, member, precision_note, recipe)


def load_run(path: Path, overrides: Sequence[str] = (), ensemble: Sequence[Path] = (), checkpoint: str | None = None,
             member: int | None = None, changes: Sequence[Change] = ()) -> LoadedRun:
    """Load recipe, tokenizers, model weights and decoder from a run directory or checkpoint.

    Overrides of [model] keys are refused unless the model declares them decode-time keys (for instance a
    Universal Transformer's depth, `--set model.steps=N`); see components.check_decode_overrides; they apply to
    every member. A run directory trained with [train] members = N is the ensemble of its members
    (seqxduce.members), unless member = K asks for member K alone; with ensemble (more checkpoints or run
    directories sharing this run's tokenizer files) those are averaged in too. checkpoint: which of the run's
    checkpoints (best, average or last, for each member and --ensemble run directory alike; or a file, alone), see
    rundir.locate; None: the average if any, else the newest. The model is then quantized and its step compiled as
    [decode] quantize / compile say (decoding.options). changes: decode settings given by flags or request
    fields (decoding.changes), applied after the overrides and refused naming the flag or field."""
    from seqxduce.decoding.ensemble import EnsembleModel, load_members

    plan = plan_run(path, overrides, ensemble, checkpoint, member, changes)
    run, chosen, recipe, members = plan.run, plan.checkpoint, plan.recipe, plan.members
    device = resolve_device(recipe.train.device)
    if plan.precision_note:
        console.print(plan.precision_note, markup=False, highlight=False)
    built = components.build_components(recipe, run.tokenizers.load(recipe))
    ckpt.load_weights(built.model, ckpt.load(chosen)["model"], chosen,
                      f"decode with the recipe it was trained with ({run.recipe_file})")
    model = built.model.to(device).eval()
    if members:
        model_overrides = [o for o in overrides if split_override(o)[0] == "model"]
        model = EnsembleModel([model, *load_members(run, members, device, model_overrides)])
    precision = decode_precision(recipe)
    check_precision(precision, device)
    model = prepare_for_decoding(model, precision, device)
    if recipe.decode.core.compile:
        model = compile_step(model)
    decoder = components.build_decoder(recipe, built.tokenizers)
    return LoadedRun(recipe=recipe, task=built.task, tokenizers=built.tokenizers, model=model, decoder=decoder,
                     device=device, run_dir=run.path, checkpoint=chosen, members=members,
                     run_members=plan.run_members, member=member)


def _member_alone(path: Path, run: rundir.RunDir, chosen: Path, recipe: Recipe, member: int,
                  overrides: Sequence[str], checkpoint: str | None) -> tuple[rundir.RunDir, Path, Recipe]:
    """(run directory, checkpoint, recipe) of member K of the run named, to load it without the others."""
    if not Path(path).is_dir():
        raise UserError(f"--member {member}: {path} is one checkpoint already; give the run directory")
    count = recipe.train.members
    if not 1 <= member <= count:
        raise UserError(f"--member {member}: {run.path} has {count} member(s) ([train] members = {count}); give "
                        f"1..{count}")
    if member == 1:  # the run directory itself
        return run, chosen, recipe
    where = member_dir(run.path, member)
    alone, chosen = rundir.locate(where, checkpoint)
    return alone, chosen, alone.load_recipe(overrides)


def _checkpoints_of(path: Path, choice: str | None = None) -> list[Path]:
    """The checkpoints an --ensemble path stands for: a file itself; a run directory its decode checkpoint (or the
    `choice`: best, average or last) and, when it was trained with [train] members = N, its other members' too (the
    run as a whole)."""
    if not path.is_dir():
        return [rundir.locate(path)[1]]
    run, chosen = rundir.locate(path, choice)
    return [chosen, *member_checkpoints(run, run.load_recipe(), choice)]


def decode_lines(run: LoadedRun, sources: Sequence[str], annotate: bool = False,
                 prefixes: Sequence[str] | None = None, prefix_where: str = "prefix ",
                 constraints: Sequence[PhraseText] | None = None, constraint_where: str = "constraints of input ",
                 first: int = 1) -> list[Output]:
    """Decode raw source lines with the run's decoder, in input order (with annotate, see annotate_outputs);
    prefixes: one target text per source that its output must start with (`decode --prefix-file`); constraints:
    per source, phrases its output must hold and phrases it must not (`decode --constraints`), refused naming
    `constraint_where` and the source's number (`first`: the number of sources[0]) where they cannot be met."""
    encoded = None
    if prefixes is not None:
        if len(prefixes) != len(sources):
            raise UserError(f"{prefix_where.rstrip(':')}: {len(prefixes)} prefixes for {len(sources)} sources; give "
                            "one prefix line per source line (an empty line for none)")
        encoded = encode_prefixes(run.tokenizers.tgt, prefixes, prefix_where, first)
    phrases = None
    if constraints is not None and any(constraints):
        if len(constraints) != len(sources):
            raise UserError(f"{constraint_where.rstrip(' ')}: constraints for {len(constraints)} sources, "
                            f"{len(sources)} given; give one constraints line per source line (an empty line for "
                            "none)")
        beam = getattr(run.recipe.decode.settings, "beam", 1)
        phrases = encode_phrases(run.tokenizers.tgt, constraints, beam, constraint_where, first)
    outputs = decode_sources(run, list(sources), prefixes=encoded, constraints=phrases)
    if annotate:
        annotate_outputs(run, outputs)
    return outputs


def annotate_outputs(run: LoadedRun, outputs: Sequence[Output]) -> None:
    """Fill each output's annotations with the model's per-position figures (Model.annotate) for its source
    and its best hypothesis: the source and output tokens, and per figure one number per position."""
    if not outputs or not outputs[0].nbest:
        return
    src_tok, tgt_tok = run.tokenizers.src, run.tokenizers.tgt
    batch_size = run.recipe.decode.core.batch_size
    for start in range(0, len(outputs), batch_size):
        chunk = outputs[start:start + batch_size]
        sources = [encode_source(src_tok, o.source) for o in chunk]
        targets = [o.nbest[0][1].tokens + [tgt_tok.eos_id] for o in chunk]  # what each target position chose
        src = pad_sources(sources, src_tok.pad_id).to(run.device)  # (B, S)
        tgt_in = pad_sources([[tgt_tok.bos_id] + t[:-1] for t in targets], tgt_tok.pad_id).to(run.device)  # (B, T)
        with torch.no_grad():
            figures = run.model.annotate(src, tgt_in)
        if not figures:
            also = f" (nor has any of the {len(run.members)} other member(s) ensembled in)" if run.members else ""
            raise UserError(f"{run.run_dir}: model [model] name = {run.recipe.model.core.name!r} has no "
                            f"per-position figures to annotate{also}; decode without --annotations")
        for row, (o, s_ids, t_ids) in enumerate(zip(chunk, sources, targets)):
            o.annotations = {"source_tokens": [src_tok.id_to_token(i) for i in s_ids],
                             "target_tokens": [tgt_tok.id_to_token(i) for i in t_ids]}
            for name, values in figures.items():
                length = len(s_ids) if name.startswith("source_") else len(t_ids)
                o.annotations[name] = values[row, :length].tolist()


def split_examples(task: Task, recipe: Recipe, split: str) -> list[Example]:
    """The examples of one of the task's splits, from the recipe's data folder; an unknown split in one line."""
    if split not in task.splits:
        raise UserError(f"--split {split!r}: the task has splits {', '.join(task.splits)}")
    return task.examples(split, components.data_dir(recipe))


def decode_split(run: LoadedRun, split: str, annotate: bool = False) -> tuple[list[Output], Report]:
    """Decode one of the task's splits and score it with the task's metric."""
    examples = split_examples(run.task, run.recipe, split)
    outputs = decode_sources(run, examples)
    for o, ex in zip(outputs, examples):
        o.reference = ex.ref
    if annotate:
        annotate_outputs(run, outputs)
    return outputs, score_outputs(run.task, outputs, examples)


def score_outputs(task: Task, outputs: Sequence[Output] | Sequence[Postprocessed],
                  examples: Sequence[Example]) -> Report:
    """The task's metric of decoded outputs (with the figures its postprocess gave) against the examples; a split
    whose examples name groups (Example.group) per group and as their mean (decoding.groups)."""
    if group_names(examples):
        return score_by_group(task, outputs, examples, _score_set)
    return _score_set(task, outputs, examples)


def _score_set(task: Task, outputs: Sequence[Output] | Sequence[Postprocessed],
               examples: Sequence[Example]) -> Report:
    """score_outputs of one set: the task's metric over all its outputs at once."""
    done = [Postprocessed(o.text, o.figures) for o in outputs]
    sources = [ex.source for ex in examples]
    counts = {len(ex.more_references) for ex in examples}
    if counts and counts != {0}:  # a split with several references per source
        if len(counts) != 1:
            raise UserError(f"the task's split gives {min(counts) + 1} to {max(counts) + 1} references per source; "
                            "give every source the same number")
        streams = [[ex.ref for ex in examples]] + [[ex.more_references[k] for ex in examples]
                                                   for k in range(counts.pop())]
        return task.score_references([o.text for o in done], streams, sources)
    return task.score_outputs(done, [ex.ref for ex in examples], sources)


def format_outputs(outputs: Sequence[Output], first: int = 0) -> list[str]:
    """One line per output; with n-best, one line per hypothesis: index, score, text (tab-separated), the
    index counted from `first` (the position of outputs[0] in the input).

    The one-best line is the task's postprocessed output (e.g. a parse tree); n-best lines give each
    hypothesis's decoded target text before postprocessing (e.g. the linearized tree): the task's output format
    and its score concern the one-best only."""
    lines: list[str] = []
    for i, o in enumerate(outputs, start=first):
        if len(o.nbest) <= 1:
            lines.append(o.text)
            continue
        for text, hyp in o.nbest:
            lines.append(f"{i}\t{hyp.score:.4f}\t{text}")
    return lines


def stream_lines(task: Task, outputs: Sequence[Output], first: int, split: bool, as_targets: bool) -> list[str]:
    """A streamed buffer's output lines, as both engines' decode jobs write them: the training targets
    (as_targets), a split's task outputs (one per source), or decode's lines (format_outputs: n-best numbered from
    `first`, the position of outputs[0] in the whole input)."""
    if as_targets:
        return target_lines(task, outputs)
    return [o.text for o in outputs] if split else format_outputs(outputs, first)


def target_lines(task: Task, outputs: Sequence[Output]) -> list[str]:
    """One line per source, n-best or not: its best hypothesis written as the task's training targets are
    (Task.training_target: for parsing the linearized tree, not the tree), so that the lines train a model
    (distillation) as the task's own targets do."""
    return [task.training_target(o.nbest[0][0] if o.nbest else "", o.source) for o in outputs]


def format_annotations(outputs: Sequence[Output], first: int = 0) -> list[str]:
    """One JSON object per output: its index (counted from `first`) and its annotations (tokens and
    per-position figures)."""
    import json

    return [json.dumps({"index": i, **o.annotations}, ensure_ascii=False) for i, o in enumerate(outputs, start=first)]
