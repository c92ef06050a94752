"""Decoding an exported model with CTranslate2 through the task's own pipeline: `seqxduce decode DIR --engine
ctranslate2` (DIR from `seqxduce export`, or a run directory, exported first into a temporary folder).

The run's tokenizers encode the sources, ctranslate2.Translator searches over their vocabulary entries (the
export's vocabulary is ours by id, see export.py), the target tokenizer decodes the entries' ids and the task
postprocesses and scores, exactly as seqxduce.decoding.decode does: the deployed model's metric is measured as ours.

Search settings come from the recipe's [decode] (greedy or beam; others are refused), aligned with
seqxduce.decoding.search: the length limit is a * source length + b tokens (one Translator call per limit), min_len
holds, pad and bos are never chosen; an output that ends right after its forced prefix (a multilingual target's
tag alone), which CTranslate2's search never gives, is found where seqxduce's search finds it
(_ending_after_prefix). CTranslate2 returns its `beam` finished hypotheses, those cut at the limit
included; each is rescored with its eos by one teacher-forced pass (see _rescore), as our search forces an eos
at the limit, and they are ranked as our beam ranks them: log-prob / ((5 + length) / 6) ** alpha, the GNMT
penalty that CTranslate2 itself lacks (with alpha > 0 the search's inner ranking can still differ from ours).
Parity with our own decoding: bench/export_parity.py and tests/test_export_parity.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqxduce import components
from seqxduce.api import Example, Hypothesis, Task, UserError
from seqxduce.decoding.changes import Change, SearchShape, with_changes
from seqxduce.decoding.decode import Output, encode_prefixes, stream_lines, task_prefixes
from seqxduce.decoding.scoring import PairScore, format_scores, scores_of
from seqxduce.decoding.search import length_penalty
from seqxduce.decoding.streaming import Buffer, Piece, Processor
from seqxduce.device import device_for, torchrun_local_rank
from seqxduce.export.exporting import ACTS_AS, HONOURED, check_engine, export_run, is_export, require_ctranslate2
from seqxduce.recipe import Recipe
from seqxduce.rundir import RunDir

SEARCHES = ("greedy", "beam")
# decode --precision as a CTranslate2 compute type
CT2_COMPUTE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


@dataclass
class ExportedRun:
    """What decoding with the engine needs: the export's recipe, tokenizers, task and translator."""

    recipe: Recipe
    directory: Path
    task: Task
    tokenizers: components.Tokenizers
    translator: Any  # ctranslate2.Translator


def load_export(path: Path | str, overrides: Sequence[str] = (), work: Path | None = None,
                compute_type: str = "default", changes: Sequence[Change] = ()) -> ExportedRun:
    """Load an export folder; a run directory or checkpoint is exported into `work` first (float32). changes:
    decode settings given by flags (decoding.changes), as load_run takes them."""
    ct2 = require_ctranslate2()
    path = Path(path)
    if not is_export(path):
        if work is None:
            raise UserError(f"{path}: not an export folder; `seqxduce export {path} --to ctranslate2 -o DIR` first")
        path = export_run(path, work / "ctranslate2", member=_one_member(path, overrides)).directory
    check_engine(path, "ctranslate2")
    exported = RunDir(path)
    recipe = with_changes(exported.load_recipe(overrides), changes)
    if recipe.decode.component.name not in SEARCHES:
        raise UserError(f"[decode] name = {recipe.decode.component.name!r}: CTranslate2 decodes with "
                        f"{' or '.join(SEARCHES)} search; --set decode.name=beam")
    gpus = ct2.get_cuda_device_count()
    # under torchrun each rank on its own GPU (cuda:LOCAL_RANK), as seqxduce's engine decodes
    device, _, index = device_for(recipe.train.device, gpus > 0, gpus, torchrun_local_rank()).partition(":")
    if recipe.decode.core.precision != "recipe":  # decode --precision: CTranslate2's own compute type
        compute_type = CT2_COMPUTE[recipe.decode.core.precision]
    # on the CPU as many threads as torch's engine takes (its default: the physical cores, or OMP_NUM_THREADS;
    # `serve --threads`): CTranslate2's own default is 4 whatever the machine has, which oversubscribes a 2-core
    # one and makes the two engines' figures incomparable (on one 2-core machine its calls on a few sources took
    # 15x longer at 2 threads than at 1: bench/log/2026-11-27-decode-int8.md)
    _warn_unread(recipe.decode.settings)
    threads = {"intra_threads": torch.get_num_threads()} if device == "cpu" else {}
    if index:
        threads["device_index"] = int(index)
    translator = ct2.Translator(str(path), device=device, compute_type=compute_type, **threads)
    return ExportedRun(recipe, path, components.build_task(recipe), exported.tokenizers.load(recipe), translator)


def _one_member(path: Path, overrides: Sequence[str]) -> int | None:
    """Which member of a `[train] members = N` run to export for CTranslate2, which decodes one model: member 1
    when the overrides ask for one member (`--set train.members=1`, how seqxduce's engine decodes member 1 alone);
    None for any other run. An ensemble asked for as a whole is refused naming both ways to one model."""
    run = RunDir(path)
    if not path.is_dir() or not run.recipe_file.is_file():
        return None
    count = run.load_recipe().train.members
    if count == 1:
        return None
    if run.load_recipe(overrides).train.members == 1:
        return 1
    raise UserError(f"{path}: an ensemble of {count} members ([train] members = {count}), and CTranslate2 decodes one "
                    f"model: --set train.members=1 decodes member 1 alone, and `seqxduce export {path} --to "
                    "ctranslate2 --member K -o DIR` exports member K to decode")


def _warn_unread(settings: object) -> None:
    """A warning per decode setting CTranslate2's search does not read. Said, not refused: an imported Marian model
    sets them (renormalize_logits, and early_stopping = false, generate's default), and its outputs under
    CTranslate2 are what CTranslate2's own converter of that model gives."""
    from seqxduce.console import console

    unread = []
    if getattr(settings, "renormalize", False):
        unread.append("renormalize = true is not applied by --engine ctranslate2 (its scores are the model's "
                      "log-probabilities over every token); decode with --engine seqxduce for Hugging Face's "
                      "renormalize_logits")
    rule = settings.stopping_rule() if hasattr(settings, "stopping_rule") else "never"  # BeamSettings
    if rule != "never":
        unread.append(f"early_stopping = {str(rule).lower()} is not applied by --engine ctranslate2 (its search "
                      "stops a source once its best candidate has ended and it has `beam` finished hypotheses, "
                      "then ranks them with the length penalty: docs/coming-from.md, \"Stopping rules\"); decode "
                      "with --engine seqxduce for Hugging Face's rule")
    for field in dataclasses.fields(settings) if dataclasses.is_dataclass(settings) else ():
        value = getattr(settings, field.name)
        if field.name in HONOURED or field.name in ("renormalize", "early_stopping", "early_stop"):
            continue  # the search reads it, or a line above says what it does instead
        if value != ACTS_AS.get(field.name, field.default):
            shown = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else value
            unread.append(f"{field.name} = {shown} is not applied by --engine ctranslate2 (its search reads "
                          f"{', '.join(sorted(HONOURED))}); decode with --engine seqxduce for it")
    for line in unread:
        console.print(f"warning: [decode] {line}", markup=False, highlight=False)


def translate_ids(run: ExportedRun, sources: Sequence[list[int]], prefixes: Sequence[list[int]] | None = None,
                  banned: Sequence[Sequence[Sequence[int]]] | None = None) -> list[list[Hypothesis]]:
    """n-best Hypotheses for source ids (without eos: the export appends it), as seqxduce's search gives them;
    prefixes: target ids each output starts with (CTranslate2's target_prefix), ranked as seqxduce's search
    ranks them: a score of what follows the prefix (seqxduce.decoding.search); banned: per source, target id
    phrases its outputs must not hold (CTranslate2's suppress_sequences, which holds for a whole batch: sources
    are batched by their phrases too)."""
    settings = run.recipe.decode.settings
    shape = SearchShape.of(settings)
    beam, alpha, form, nbest = shape.beam, shape.alpha, shape.form, shape.nbest  # form: gnmt, or power (HF's)
    src_tok, tgt_tok = run.tokenizers.src, run.tokenizers.tgt
    tgt_ids = {tgt_tok.id_to_token(i): i for i in range(tgt_tok.vocab_size)}
    specials = [[tgt_tok.id_to_token(tgt_tok.pad_id)], [tgt_tok.id_to_token(tgt_tok.bos_id)]]
    given = [list(p) for p in prefixes] if prefixes is not None else [[] for _ in sources]
    # the limit leaves room for a forced prefix, as seqxduce's search does
    limits = [max(1, int(len(ids) * settings.max_len_a + settings.max_len_b), len(p)) for ids, p in zip(sources, given)]
    eos = tgt_tok.id_to_token(tgt_tok.eos_id)
    avoid = [tuple(tuple(tgt_tok.id_to_token(t) for t in phrase) for phrase in (banned[i] if banned else ()))
             for i in range(len(sources))]
    results: list[list[Hypothesis]] = [[] for _ in sources]
    for limit, phrases in sorted(set(zip(limits, avoid))):
        chosen = [i for i, n in enumerate(limits) if n == limit and avoid[i] == phrases]
        batch = [[src_tok.id_to_token(t) for t in sources[i]] for i in chosen]
        forced = [[tgt_tok.id_to_token(t) for t in given[i]] for i in chosen]
        found = run.translator.translate_batch(
            batch, target_prefix=forced if any(forced) else None, beam_size=beam, num_hypotheses=beam,
            length_penalty=0.0, return_end_token=True, max_decoding_length=limit,
            min_decoding_length=settings.min_len, suppress_sequences=specials + [list(p) for p in phrases],
            max_batch_size=run.recipe.decode.core.batch_size)
        outputs = [[h[:-1] if h and h[-1] == eos else h for h in result.hypotheses] for result in found]
        for k in _ending_after_prefix(run, batch, forced, beam, settings.min_len, limit, specials):
            if forced[k] not in outputs[k]:  # greedy: the ending itself; beam: one more candidate, ranked below
                outputs[k] = [forced[k]] if beam == 1 else [*outputs[k], forced[k]]
        positional = _rescore(run, [(src, out) for src, outs in zip(batch, outputs) for out in outs])
        for i, outs in zip(chosen, outputs):
            hyps = [_hypothesis(out, next(positional), alpha, tgt_ids, form, len(given[i])) for out in outs]
            results[i] = sorted(hyps, key=lambda h: -h.score)[:nbest]
    return results


def _ending_after_prefix(run: ExportedRun, batch: list[list[str]], forced: list[list[str]], beam: int,
                         min_len: int, limit: int, specials: list[list[str]]) -> list[int]:
    """Which of the batch's prefixed sources seqxduce's search would end right after the prefix (an empty output
    after a multilingual target's tag): CTranslate2's search never ends a hypothesis at the first step after its
    target prefix, whatever the model's probability of eos there, where seqxduce's offers that ending to its
    n-best list when eos is among the `beam` best tokens of that step (greedy: the best), once min_len allows it.
    One step past each prefix (beam 1, the model's scores of that step: return_logits_vocab) says where."""
    rows = [k for k, p in enumerate(forced) if p and min_len <= len(p) < limit]
    if not rows:
        return []
    import numpy as np

    ct2 = require_ctranslate2()
    eos = run.tokenizers.tgt.eos_id
    probe = run.translator.translate_batch(
        [batch[k] for k in rows], target_prefix=[forced[k] for k in rows], beam_size=1,
        max_decoding_length=max(len(forced[k]) for k in rows) + 1, min_decoding_length=0, return_logits_vocab=True,
        suppress_sequences=specials, max_batch_size=run.recipe.decode.core.batch_size)
    ending = []
    for k, result in zip(rows, probe):
        view = result.logits[0][len(forced[k])]  # the step after the prefix, (V,), on the translator's device
        view = view if view.device == "cpu" else view.to_device(ct2.Device.cpu)
        step = np.asarray(view.to(ct2.DataType.float32)).reshape(-1)  # numpy has no bfloat16
        if int((step > step[eos]).sum()) < beam:  # pad and bos suppressed (-inf), as seqxduce's search bans them
            ending.append(k)
    return ending


def _rescore(run: ExportedRun, pairs: list[tuple[list[str], list[str]]]) -> Iterator[list[float]]:
    """Each output's log-probabilities per position, eos included, by one teacher-forced pass (score_batch
    appends the eos). The search's own scores will not do: CTranslate2 suppresses pad and bos before the softmax,
    which renormalises the others, where our search forbids them after it; and at the length limit it stops
    without the eos that our search forces."""
    scored = run.translator.score_batch([src for src, _ in pairs], [out for _, out in pairs],
                                        max_batch_size=run.recipe.decode.core.batch_size)
    return iter([list(result.log_probs) for result in scored])


def _hypothesis(tokens: list[str], positional: list[float], alpha: float, ids: dict[str, int],
                form: str = "gnmt", forced: int = 0) -> Hypothesis:
    """Our Hypothesis of one CTranslate2 output: its logprob over every position, its score over what follows
    the `forced` prefix tokens (their length left out of the penalty's, which counts the eos), as our beam's."""
    out = [ids[t] for t in tokens]
    after = float(sum(positional[forced:]))
    return Hypothesis(tokens=out, score=after / length_penalty(len(out) - forced + 1, alpha, form),
                      logprob=float(sum(positional)))


def decode_sources(run: ExportedRun, examples: Sequence[Example] | Sequence[str],
                   prefixes: Sequence[list[int]] | None = None,
                   banned: Sequence[Sequence[Sequence[int]]] | None = None) -> list[Output]:
    """Outputs in input order, as seqxduce.decoding.decode.decode_sources gives them (prefixes: target ids per
    source, decoding.decode.encode_prefixes; without them, the examples' own: a multilingual target's language
    tag, CTranslate2's target_prefix)."""
    sources = [ex.source if isinstance(ex, Example) else ex for ex in examples]
    if prefixes is None:
        prefixes = task_prefixes(run.tokenizers.tgt, examples)
    nbests = translate_ids(run, [run.tokenizers.src.encode(s) for s in sources], prefixes, banned)
    outputs = []
    for source, hyps in zip(sources, nbests):
        texts = [(run.tokenizers.tgt.decode(h.tokens), h) for h in hyps]
        best = run.task.postprocess(texts[0][0] if texts else "", source)
        outputs.append(Output(source, best.text, texts, figures=best.figures))
    return outputs


def score_pairs(run: ExportedRun, sources: Sequence[str], targets: Sequence[str]) -> list[PairScore]:
    """Each target's log-probability given its source, eos counted, as seqxduce.decoding.scoring.score_pairs
    gives it (one CTranslate2 score_batch pass; normalized with the run's [decode] alpha as beam's score)."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources for {len(targets)} targets: give one target line per source line")
    src_tok, tgt_tok = run.tokenizers.src, run.tokenizers.tgt
    pairs = [([src_tok.id_to_token(t) for t in src_tok.encode(s)], [tgt_tok.id_to_token(t) for t in tgt_tok.encode(t)])
             for s, t in zip(sources, targets)]
    shape = SearchShape.of(run.recipe.decode.settings)
    return scores_of(list(_rescore(run, pairs)), shape.alpha if shape.has_beam else 0.0)


@dataclass(frozen=True)
class Ct2ScoreJob:
    """Score buffers of (source, target) pairs with CTranslate2, as jobs.ScoreJob does with seqxduce's model."""

    path: str
    overrides: tuple[str, ...] = ()
    normalize: bool = False

    def processor(self) -> Processor:
        return self.processor_for(load_export(_export_folder(self.path), self.overrides))

    def processor_for(self, run: ExportedRun) -> Processor:
        return lambda buffer: Piece(buffer.start, len(buffer.items), {"output": format_scores(
            score_pairs(run, [s for s, _ in buffer.items], [t for _, t in buffer.items]), self.normalize)})


def _export_folder(path: str) -> str:
    """A worker process's translator loads an export folder (a run directory would be exported again by every
    worker: export it once, `seqxduce export`); CTranslate2Engine.check_processes refuses it before any work."""
    if not is_export(path):
        raise UserError(f"--processes with --engine ctranslate2: {path} is not an export folder; "
                        f"`seqxduce export {path} -o DIR` first and decode DIR, or give --processes 1")
    return path


@dataclass(frozen=True)
class Ct2DecodeJob:
    """Decode buffers of a streamed input (seqxduce.decoding.streaming) with CTranslate2, as jobs.DecodeJob does
    with seqxduce's search: the same lines, n-best numbering and a split's kept outputs (with `as_targets`, the
    best hypotheses' target texts)."""

    path: str
    overrides: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    split: bool = False
    prefix_where: str = "prefix "
    as_targets: bool = False
    constraint_where: str = "constraints of input "

    def processor(self) -> Processor:
        """A worker process's own translator, loaded from an export folder."""
        return self.processor_for(load_export(_export_folder(self.path), self.overrides, changes=self.changes))

    def processor_for(self, run: ExportedRun) -> Processor:
        return lambda buffer: self._piece(run, buffer)

    def _piece(self, run: ExportedRun, buffer: Buffer) -> Piece:
        from seqxduce.decoding.jobs import read_items
        from seqxduce.decoding.phrases import banned_ids

        items, given, constraints = read_items(buffer.items)
        prefixes = banned = None
        if given is not None:
            prefixes = encode_prefixes(run.tokenizers.tgt, given, self.prefix_where, first=buffer.start + 1)
        if constraints is not None:  # only those that must not appear: the engine refused the others before
            banned = banned_ids(run.tokenizers.tgt, constraints, self.constraint_where, first=buffer.start + 1)
        outputs = decode_sources(run, items, prefixes, banned)
        lines = stream_lines(run.task, outputs, buffer.start, self.split, self.as_targets)
        kept = [{"text": o.text, "figures": o.figures} for o in outputs] if self.split else []
        return Piece(buffer.start, len(outputs), {"output": lines}, kept)
