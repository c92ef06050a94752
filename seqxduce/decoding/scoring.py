"""Scoring given source-target pairs with a trained run (`seqxduce score`), as fairseq's --score-reference and
Marian's scorer do: the model's log-probability of each target given its source, for filtering and reranking.

One teacher-forced forward per batch: the target is fed as bos + its tokens, and every position's log-probability
of the next token is read off, its eos included, as a decoder counts a hypothesis (seqxduce.decoding.search: a finished
hypothesis's log-prob sums its tokens' and its eos'). The model is the run's as `decode` loads it
(seqxduce.decoding.decode.load_run): its checkpoint, a multi-member run's ensemble (probabilities averaged),
quantized as [decode] says. So the score of an output that decode reported is the log-prob decode reported for
it, up to float rounding (a full forward against incremental steps; more of it under bf16 or fp16 autocast), and so
is its normalized score (see PairScore). Two outputs of a search differ by construction: one that ended without eos (a
source whose every live hypothesis became impossible: the search keeps its best, eos not counted), and one whose
eos a constraint forbade at the length limit (the search lets it out at log-prob 0); scoring counts the eos the
model gives.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from seqxduce.api import Model, PairScore, Tokenizer, UserError
from seqxduce.data import encode_source, pad_sources
from seqxduce.decoding.decode import LoadedRun, source_batches
from seqxduce.decoding.search import length_penalty
from seqxduce.decoding.search_settings import BeamSettings
from seqxduce.device import autocast_context


def decoder_alpha(run: LoadedRun) -> float:
    """The length-penalty alpha the run's decoder normalizes its scores with: [decode] alpha for a decoder whose
    settings extend BeamSettings (beam, tree_beam), else 0 (greedy and sampling report the raw log-prob)."""
    settings = run.recipe.decode.settings
    return settings.alpha if isinstance(settings, BeamSettings) else 0.0


def score_ids(model: Model, tokenizer: Tokenizer, sources: Sequence[list[int]], targets: Sequence[list[int]],
              device: torch.device, precision: str = "fp32", batch_size: int = 64) -> list[list[float]]:
    """Per-position log-probabilities of each target (ids without bos/eos) given its source (ids as the encoder
    sees them, eos included): one list per pair, its last entry the eos', in input order. Batched by length."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources for {len(targets)} targets: give one target per source")
    order = sorted(range(len(sources)), key=lambda i: (len(sources[i]), len(targets[i])))
    results: list[list[float]] = [[] for _ in sources]
    bos, eos, pad = tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id
    was_training = model.training
    model.eval()
    try:
        for chunk in source_batches(order, [len(s) for s in sources], batch_size):
            src = pad_sources([sources[i] for i in chunk], pad).to(device)  # (B, S)
            tgt_in = pad_sources([[bos] + targets[i] for i in chunk], pad).to(device)  # (B, T)
            tgt_out = pad_sources([targets[i] + [eos] for i in chunk], pad).to(device)  # (B, T): what each chose
            with torch.no_grad(), autocast_context(device, precision):
                logits = model(src, tgt_in).logits  # (B, T, V)
            # float32 as the searches read a step's log-probs (seqxduce.decoding.search._StepRules)
            logprobs = logits.float().log_softmax(dim=-1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
            for i, values in zip(chunk, logprobs.tolist()):
                results[i] = values[: len(targets[i]) + 1]  # the padding's positions left out
    finally:
        model.train(was_training)
    return results


def score_pairs(run: LoadedRun, sources: Sequence[str], targets: Sequence[str]) -> list[PairScore]:
    """The run's score of each (source, target) text pair, in input order.

    A target text is scored as the run's target tokenizer encodes it; for an output that a decoder produced in
    another segmentation than the tokenizer's own (possible with subwords), score its ids with score_ids."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources for {len(targets)} targets: give one target line per source line")
    src_ids = [encode_source(run.tokenizers.src, s) for s in sources]
    tgt_ids = [run.tokenizers.tgt.encode(t) for t in targets]
    positional = score_ids(run.model, run.tokenizers.tgt, src_ids, tgt_ids, run.device,
                           run.recipe.train.precision, run.recipe.decode.core.batch_size)
    return scores_of(positional, decoder_alpha(run))


def scores_of(positional: Sequence[Sequence[float]], alpha: float) -> list[PairScore]:
    """PairScores of per-position log-probabilities, normalized as beam search normalizes a finished hypothesis:
    divided by ((5 + length) / 6) ** alpha, its length counting the eos (seqxduce.decoding.search.beam_search)."""
    out = []
    for values in positional:
        total = float(sum(values))
        out.append(PairScore(total, len(values), total / length_penalty(len(values), alpha)))
    return out


def format_scores(scores: Sequence[PairScore], normalize: bool = False) -> list[str]:
    """One line per pair, tab-separated: total log-prob and log-prob per token (eos counted); with normalize, a
    third column, the total divided by the decoder's length penalty (the score decode's n-best lines show)."""
    if normalize:
        return [f"{s.logprob:.4f}\t{s.per_token:.4f}\t{s.normalized:.4f}" for s in scores]
    return [f"{s.logprob:.4f}\t{s.per_token:.4f}" for s in scores]
