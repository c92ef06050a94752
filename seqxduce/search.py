"""The searches decoder plugins build on: greedy and beam search over Model.encode/step, and the two decoders
that run them with their settings as they are (the `greedy` and `beam` decoder plugins register these).

Beam search keeps `beam` live hypotheses per source in one (B*beam)-row batch, moves hypotheses that
end in eos to an n-best finished list scored with the GNMT length penalty, drops a source from the batch once
no live hypothesis can still beat its n-best (or, with early_stop, once it has `beam` finished ones), and never
recomputes a prefix (the model's cache is reordered).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from seqxduce.api import Decoder, DecodeRequest, Hypothesis, Model, StepConstraint
from seqxduce.search_settings import BeamSettings, SearchSettings


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(request: DecodeRequest, a: float, b: int) -> torch.Tensor:
    """Maximum output length per source: a * source length + b, counted in tokens (without eos).

    The source length leaves out the eos that encoding appends, so that max_len_a = 1, max_len_b = 50 is the
    paper's "input length + 50"."""
    src_len = ((request.src != request.pad_id) & (request.src != request.eos_id)).sum(dim=1)
    return (src_len.float() * a + b).floor().long().clamp(min=1)


def _forbid_specials(logprobs: torch.Tensor, request: DecodeRequest) -> None:
    logprobs[:, request.pad_id] = float("-inf")
    if request.bos_id != request.eos_id:
        logprobs[:, request.bos_id] = float("-inf")


def _force_length(logprobs: torch.Tensor, step: int, limits: torch.Tensor, eos: int, min_len: int) -> None:
    """Only eos where a row reached its maximum length; never eos before min_len."""
    if step < min_len:
        logprobs[:, eos] = float("-inf")
    at_limit = limits <= step
    if bool(at_limit.any()):
        eos_scores = logprobs[at_limit, eos].clone()
        logprobs[at_limit] = float("-inf")
        # a row at its limit always has a way out, even if a constraint forbade eos
        logprobs[at_limit, eos] = torch.where(torch.isinf(eos_scores), torch.zeros_like(eos_scores), eos_scores)


def _next_logprobs(model: Model, last: torch.Tensor, memory, cache, request: DecodeRequest,
                   constraint: StepConstraint | None, step: int, limits: torch.Tensor, min_len: int):
    """One decoder step: float32 log-probs (N, V) with the constraint, specials and length limits applied."""
    logprobs, cache = model.step(last, memory, cache)
    logprobs = logprobs.float()
    if constraint is not None:
        logprobs = constraint.mask(logprobs)
    _forbid_specials(logprobs, request)
    _force_length(logprobs, step, limits, request.eos_id, min_len)
    return logprobs, cache


@torch.no_grad()
def greedy_search(model: Model, request: DecodeRequest, settings: SearchSettings | None = None,
                  constraint: StepConstraint | None = None,
                  choose: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[list[Hypothesis]]:
    """Pick the most probable token at each step until eos or the length limit.

    choose, if given, picks the token instead: log-probs (N, V) -> token ids (N,) (sampling decoders pass one);
    a hypothesis's score is still the model's log-probability of the tokens chosen."""
    settings = settings or SearchSettings()
    min_len = settings.min_len
    batch = request.src.size(0)
    device = request.src.device
    limits = max_lengths(request, settings.max_len_a, settings.max_len_b)
    memory = model.encode(request.src)
    cache = model.init_cache(memory)
    rows = torch.arange(batch, device=device)
    if constraint is not None:
        constraint.start(request, rows)
    last = torch.full((batch,), request.bos_id, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    chosen, scores, alive = [], [], []  # per step: (B,) token, its log-prob, whether the row was still going
    step = 0
    while not bool(done.all()):
        logprobs, cache = _next_logprobs(model, last, memory, cache, request, constraint, step, limits, min_len)
        if choose is None:
            best, choice = logprobs.max(dim=-1)
        else:
            choice = choose(logprobs)
            best = logprobs.gather(1, choice.unsqueeze(1)).squeeze(1)
        chosen.append(choice)
        scores.append(best)
        alive.append(~done)
        done = done | (choice == request.eos_id)
        if constraint is not None:
            constraint.advance(rows, choice)
        last = torch.where(done, torch.full_like(choice, request.eos_id), choice)
        step += 1
    tokens = torch.stack(chosen, dim=1).tolist()  # (B, steps)
    logps = torch.stack(scores, dim=1).tolist()
    live = torch.stack(alive, dim=1).sum(dim=1).tolist()  # steps each row took, eos included
    out = []
    for t, lp, n in zip(tokens, logps, live):
        kept = [tok for tok in t[:n] if tok != request.eos_id]
        out.append([Hypothesis(tokens=kept, score=sum(lp[:n]), logprob=sum(lp[:n]), positional_logprobs=lp[:n])])
    return out


@torch.no_grad()
def beam_search(model: Model, request: DecodeRequest, settings: BeamSettings | None = None,
                constraint: StepConstraint | None = None) -> list[list[Hypothesis]]:
    """Batched beam search with GNMT length penalty; returns the nbest finished hypotheses per source, best first.

    A source leaves the search once no live hypothesis can still finish with a higher normalized score than
    the worst of its `nbest` best finished ones (see `_live_bound`). `early_stop` is fairseq's heuristic
    instead: a source leaves as soon as it has `beam` finished hypotheses, which can miss better, longer ones.
    """
    settings = settings or BeamSettings()
    beam, alpha, min_len, early_stop = settings.beam, settings.alpha, settings.min_len, settings.early_stop
    nbest = min(settings.nbest, beam)
    batch = request.src.size(0)
    device = request.src.device
    limits_all = max_lengths(request, settings.max_len_a, settings.max_len_b)
    memory = model.encode(request.src)
    # row r of the search batch belongs to source alive[r // beam]
    alive = torch.arange(batch, device=device)
    expand = alive.repeat_interleave(beam)
    memory, _ = model.reorder(memory, None, expand)
    cache = model.init_cache(memory)
    if constraint is not None:
        constraint.start(request, expand)
    prefixes = torch.full((batch * beam, 1), request.bos_id, dtype=torch.long, device=device)
    positional = torch.zeros((batch * beam, 0), dtype=torch.float, device=device)
    # only the first beam of each source is live at step 0, so the others never duplicate it
    scores = torch.full((batch, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0
    finished = [_NBest(beam if early_stop else nbest) for _ in range(batch)]
    # per source, kept in step with `finished` (only sources that gained a hypothesis are rewritten), so that
    # no step reads every n-best list: the score to beat (-inf while not full) and whether it is full
    worst = torch.full((batch,), float("-inf"), device=device)
    full_lists = torch.zeros(batch, dtype=torch.bool, device=device)

    step = 0
    while alive.numel() > 0:
        n_alive = alive.numel()
        limits = limits_all[alive].repeat_interleave(beam)
        logprobs, cache = _next_logprobs(model, prefixes[:, -1], memory, cache, request, constraint, step, limits,
                                         min_len)
        vocab = logprobs.size(-1)
        # 2*beam candidates always hold at least beam that do not end in eos (one eos per row at most). No
        # row gives more than 2*beam of a source's best 2*beam, so each row's best 2*beam tokens are taken
        # first and the source's best among those beam * 2*beam: the same candidates as a top-k over all
        # beam * vocab sums, without adding the scores to every (row, token)
        width = min(2 * beam, vocab)
        row_scores, row_tokens = logprobs.topk(width, dim=1)  # (N, width)
        candidates = (scores.view(-1, 1) + row_scores).view(n_alive, beam * width)
        top_scores, top_index = candidates.topk(min(2 * beam, beam * vocab), dim=1)
        top_beam = torch.div(top_index, width, rounding_mode="floor")
        top_token = row_tokens.view(n_alive, beam * width).gather(1, top_index)
        is_eos = top_token == request.eos_id
        finite = torch.isfinite(top_scores)

        grown = _collect_finished(finished, alive, prefixes, positional, logprobs, top_scores, top_beam,
                                  is_eos & finite, beam, alpha, request.eos_id)
        _note(grown, finished, worst, full_lists)

        # the first `beam` live (non-eos) candidates continue
        live_rank = torch.where(is_eos, torch.full_like(top_scores, float("inf")),
                                torch.arange(top_scores.size(1), device=device).float().expand_as(top_scores))
        keep = live_rank.argsort(dim=1)[:, :beam]
        new_scores = top_scores.gather(1, keep)
        new_beam = top_beam.gather(1, keep)
        new_token = top_token.gather(1, keep)
        origin = (torch.arange(n_alive, device=device).unsqueeze(1) * beam + new_beam).view(-1)

        if early_stop:
            full = full_lists[alive]
        else:
            full = _live_bound(new_scores.max(dim=1).values, step + 1, limits_all[alive], alpha) <= worst[alive]
        source_done = full | ~torch.isfinite(new_scores).any(dim=1)
        new_token = new_token.view(-1)
        prefixes = torch.cat([prefixes[origin], new_token.view(-1, 1)], dim=1)
        positional = torch.cat([positional[origin], logprobs[origin, new_token].view(-1, 1)], dim=1)
        scores = new_scores
        if bool(source_done.any()):
            _note(_finish_dead_ends(finished, alive, source_done, prefixes, positional, scores, beam, alpha),
                  finished, worst, full_lists)
            keep_sources = (~source_done).nonzero().flatten()
            rows = (keep_sources.unsqueeze(1) * beam + torch.arange(beam, device=device)).view(-1)
            alive, scores = alive[keep_sources], scores[keep_sources]
            prefixes, positional, origin, new_token = prefixes[rows], positional[rows], origin[rows], new_token[rows]
        if alive.numel() > 0:
            if constraint is not None:
                constraint.advance(origin, new_token)
            memory, cache = model.reorder(memory, cache, origin)
        step += 1

    return [f.best(nbest) for f in finished]


class GreedyDecoder(Decoder):
    """The `greedy` decoder plugin, and validation's fast search: greedy search with its settings."""

    def __init__(self, settings: SearchSettings | None = None):
        self.settings = settings or SearchSettings()

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        return greedy_search(model, request, self.settings)


class BeamDecoder(Decoder):
    """The `beam` decoder plugin: beam search with its settings."""

    def __init__(self, settings: BeamSettings | None = None):
        self.settings = settings or BeamSettings()

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        return beam_search(model, request, self.settings)


class _NBest:
    """The `size` best finished hypotheses of one source, kept sorted best first."""

    def __init__(self, size: int):
        self.size = size
        self.hyps: list[Hypothesis] = []

    @property
    def full(self) -> bool:
        return len(self.hyps) >= self.size

    @property
    def worst(self) -> float:
        """The score a new hypothesis must beat to enter (-inf while there is room)."""
        return self.hyps[-1].score if self.full else float("-inf")

    def add(self, hyp: Hypothesis) -> None:
        if self.full and hyp.score <= self.worst:
            return
        at = next((i for i, h in enumerate(self.hyps) if hyp.score > h.score), len(self.hyps))
        self.hyps.insert(at, hyp)
        del self.hyps[self.size:]

    def best(self, n: int) -> list[Hypothesis]:
        return self.hyps[:n]


def _live_bound(best_live: torch.Tensor, length: int, limits: torch.Tensor, alpha: float) -> torch.Tensor:
    """The highest normalized score any continuation of a live hypothesis can still finish with.

    A live log-prob only falls, so it is at most best_live (<= 0) when it ends; dividing it by the length
    penalty of the final length (eos included) is largest at the longest length for alpha > 0 and at the next
    step for alpha < 0; alpha = 0 leaves the log-prob as it is.
    """
    if alpha == 0:
        return best_live
    shortest = length_penalty(length + 1, alpha)
    longest = ((5.0 + limits.float() + 1.0) / 6.0) ** alpha  # the row's length limit plus its eos
    return torch.maximum(best_live / shortest, best_live / longest)


def _note(sources: set[int], finished: list[_NBest], worst: torch.Tensor, full: torch.Tensor) -> None:
    """Copy the n-best lists of `sources` that changed into the per-source tensors the search reads."""
    for s in sources:
        worst[s] = finished[s].worst
        full[s] = finished[s].full


def _collect_finished(finished, alive, prefixes, positional, logprobs, top_scores, top_beam, take, beam, alpha, eos):
    """Offer eos candidates ranked within the first `beam` of their source to its n-best finished list."""
    take = take.clone()
    take[:, beam:] = False
    grown = set()
    for s, k in take.nonzero().tolist():
        source = finished[int(alive[s])]
        total = float(top_scores[s, k])
        row = s * beam + int(top_beam[s, k])
        length = prefixes.size(1)  # the tokens after bos plus this eos
        score = total / length_penalty(length, alpha)
        if source.full and score <= source.worst:
            continue
        lps = positional[row].tolist() + [float(logprobs[row, eos])]
        source.add(Hypothesis(tokens=prefixes[row, 1:].tolist(), score=score, logprob=total,
                              positional_logprobs=lps))
        grown.add(int(alive[s]))
    return grown


def _finish_dead_ends(finished, alive, source_done, prefixes, positional, scores, beam, alpha):
    """A source that leaves the search without any finished hypothesis keeps its best live one."""
    grown = set()
    for s in source_done.nonzero().flatten().tolist():
        source = finished[int(alive[s])]
        if source.hyps:
            continue
        k = int(scores[s].argmax())
        row = s * beam + k
        total = float(scores[s, k])
        tokens = prefixes[row, 1:].tolist()
        source.add(Hypothesis(tokens=tokens, score=total / length_penalty(len(tokens) + 1, alpha), logprob=total,
                              positional_logprobs=positional[row].tolist()))
        grown.add(int(alive[s]))
    return grown
