"""Decoding: load a run, batch sources by length, call the decoder plugin, restore input order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from seqxduce import checkpoint as ckpt
from seqxduce import components
from seqxduce.api import Decoder, DecodeRequest, Example, Hypothesis, Model, Report, Task, UserError
from seqxduce.data import encode_source, pad_sources
from seqxduce.recipe import Recipe, Section
from seqxduce.search import greedy_search


@dataclass
class Output:
    """One decoded source: the task-formatted best output and the n-best (text, hypothesis) pairs."""

    source: str
    text: str
    nbest: list[tuple[str, Hypothesis]] = field(default_factory=list)
    reference: str | None = None
    annotations: dict[str, list] = field(default_factory=dict)  # per-position figures (decode --annotations)


class GreedyDecoder(Decoder):
    """Greedy search with the recipe decoder's length limits; used for validation during training."""

    def __init__(self, max_len_a: float, max_len_b: int):
        self.max_len_a, self.max_len_b = max_len_a, max_len_b

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        return greedy_search(model, request, max_len_a=self.max_len_a, max_len_b=self.max_len_b)


def validation_decoder(decode: Section) -> GreedyDecoder:
    settings = decode.settings
    return GreedyDecoder(getattr(settings, "max_len_a", 1.5), getattr(settings, "max_len_b", 10))


def decode_examples(model: Any, tokenizers: components.Tokenizers, task: Task,
                    examples: Sequence[Example] | Sequence[str],
                    decoder: Decoder | None, device: torch.device, precision: str = "fp32",
                    decode_settings: Section | None = None, batch_size: int = 64) -> list[Output]:
    """Decode sources (Examples or plain source strings) in input order; decoder None means greedy."""
    from seqxduce.trainer import autocast_context

    sources = [ex.source if isinstance(ex, Example) else ex for ex in examples]
    if decoder is None:
        decoder = validation_decoder(decode_settings) if decode_settings else GreedyDecoder(1.5, 10)
    if decode_settings is not None:
        batch_size = decode_settings.core.batch_size
    tgt = tokenizers.tgt
    encoded = [encode_source(tokenizers.src, s) for s in sources]
    order = sorted(range(len(sources)), key=lambda i: len(encoded[i]))
    results: list[Output | None] = [None] * len(sources)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            request = DecodeRequest(
                src=pad_sources([encoded[i] for i in chunk], tgt.pad_id).to(device),
                sources=[sources[i] for i in chunk], bos_id=tgt.bos_id, eos_id=tgt.eos_id, pad_id=tgt.pad_id,
            )
            with torch.no_grad(), autocast_context(device, precision):
                nbests = decoder.decode(model, request)
            for i, hyps in zip(chunk, nbests):
                texts = [(tgt.decode(h.tokens), h) for h in hyps]
                best = task.postprocess(texts[0][0], sources[i]) if texts else task.postprocess("", sources[i])
                results[i] = Output(sources[i], best, texts)
    finally:
        model.train(was_training)
    return [r for r in results if r is not None]


@dataclass
class LoadedRun:
    """Everything decoding needs, loaded from a run directory."""

    recipe: Recipe
    run_dir: Path
    checkpoint: Path
    task: Task
    tokenizers: components.Tokenizers
    model: Any
    decoder: Decoder
    device: torch.device


def find_checkpoint(path: Path) -> tuple[Path, Path]:
    """(run directory, checkpoint file) for a run directory or a checkpoint inside one.

    In a run directory the averaged checkpoint wins when there is one, else the latest step.
    """
    path = Path(path)
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == components.CHECKPOINT_DIR else path.parent
        return run_dir, path
    if not path.is_dir():
        raise UserError(f"{path}: no such run directory or checkpoint")
    average = path / components.AVERAGE_FILE
    if average.is_file():
        return path, average
    steps = ckpt.step_checkpoints(path / components.CHECKPOINT_DIR)
    if not steps:
        raise UserError(f"{path}: no checkpoint in {path / components.CHECKPOINT_DIR}; train first")
    return path, steps[-1]


def load_run(path: Path, overrides: Sequence[str] = ()) -> LoadedRun:
    """Load recipe, tokenizers, model weights and decoder from a run directory or checkpoint.

    Overrides of [model] keys are refused unless the model declares them decode-time keys (for instance a
    Universal Transformer's depth, `--set model.steps=N`); see components.check_decode_overrides."""
    from seqxduce.trainer import resolve_device

    run_dir, checkpoint = find_checkpoint(path)
    recipe = components.load_run_recipe(run_dir, tuple(overrides))
    components.check_decode_overrides(recipe, tuple(overrides))
    tokenizers = components.load_tokenizers(recipe, run_dir)
    device = resolve_device(recipe.train.device)
    model = components.build_model(recipe, tokenizers.vocab())
    components.load_model_weights(model, ckpt.load(checkpoint)["model"], checkpoint, run_dir / components.RECIPE_FILE)
    model.to(device).eval()
    task = components.build_task(recipe)
    decoder = components.build_decoder(recipe, tokenizers)
    return LoadedRun(recipe, run_dir, checkpoint, task, tokenizers, model, decoder, device)


def decode_lines(run: LoadedRun, sources: Sequence[str], annotate: bool = False) -> list[Output]:
    """Decode raw source lines with the run's decoder, in input order (with annotate, see annotate_outputs)."""
    outputs = decode_examples(run.model, run.tokenizers, run.task, list(sources), run.decoder, run.device,
                              run.recipe.train.precision, run.recipe.decode)
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
        annotate = getattr(run.model, "annotate", None)  # optional in the Model contract
        with torch.no_grad():
            figures = annotate(src, tgt_in) if annotate is not None else {}
        if not figures:
            raise UserError(f"{run.run_dir}: model [model] name = {run.recipe.model.core.name!r} has no "
                            "per-position figures to annotate; decode without --annotations")
        for row, (o, s_ids, t_ids) in enumerate(zip(chunk, sources, targets)):
            o.annotations = {"source_tokens": [src_tok.id_to_token(i) for i in s_ids],
                             "target_tokens": [tgt_tok.id_to_token(i) for i in t_ids]}
            for name, values in figures.items():
                length = len(s_ids) if name.startswith("source_") else len(t_ids)
                o.annotations[name] = values[row, :length].tolist()


def decode_split(run: LoadedRun, split: str, annotate: bool = False) -> tuple[list[Output], Report]:
    """Decode one of the task's splits and score it with the task's metric."""
    if split not in run.task.splits:
        raise UserError(f"--split {split!r}: the task has splits {', '.join(run.task.splits)}")
    examples = run.task.examples(split, components.data_dir(run.recipe))
    outputs = decode_examples(run.model, run.tokenizers, run.task, examples, run.decoder, run.device,
                              run.recipe.train.precision, run.recipe.decode)
    for o, ex in zip(outputs, examples):
        o.reference = ex.ref
    if annotate:
        annotate_outputs(run, outputs)
    report = run.task.score([o.text for o in outputs], [ex.ref for ex in examples], [ex.source for ex in examples])
    return outputs, report
