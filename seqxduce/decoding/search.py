"""The searches decoder plugins build on: greedy and beam search over Model.encode/step, and the two decoders
that run them with their settings as they are (the `greedy` and `beam` decoder plugins register these).

Beam search keeps `beam` live hypotheses per source in one (B*beam)-row batch, moves hypotheses that
end in eos to an n-best finished list scored with the GNMT length penalty, drops a source from the batch once
no live hypothesis can still beat its n-best (early_stopping = "never", the default) or by one of Hugging Face's
two other rules (early_stopping = true or false: `_stops`), and never recomputes a prefix (the model's cache is
reordered).

A target prefix (DecodeRequest.prefixes) is forced token by token, then the search goes on freely. It is ranked
as Hugging Face's generate(decoder_input_ids=...) and CTranslate2's target_prefix rank it: a hypothesis's score
is the log-probability of what follows the prefix (eos included) divided by the length penalty of that part's
length, so that an unlikely prefix costs every hypothesis the same and long continuations gain nothing by
diluting it. The prefix still belongs to the output: its tokens are in Hypothesis.tokens and their
log-probabilities in Hypothesis.logprob and positional_logprobs (the model's probability of the whole output,
as `seqxduce score` gives it); greedy search's score leaves the prefix out the same way.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator

import torch

from seqxduce.api import Decoder, DecodeRequest, Hypothesis, Model, StepConstraint
from seqxduce.decoding.phrases import PhraseConstraint, select
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings


class SearchStopped(Exception):
    """The caller's stop check said so between two steps (`stop_when`): the search's work is abandoned."""


_stop = threading.local()  # per thread: a server decodes in its worker thread while other threads do not stop


@contextlib.contextmanager
def stop_when(check: Callable[[], bool]) -> Iterator[None]:
    """Within the block, every search in this thread calls check() between its steps and raises SearchStopped
    once it is true (`seqxduce serve`: every client of the batch has gone or passed its deadline, or the server
    is stopping). A decoder plugin built on greedy_search or beam_search stops with them."""
    outer = getattr(_stop, "check", None)
    _stop.check = check
    try:
        yield
    finally:
        _stop.check = outer


def _stop_if_asked() -> None:
    check = getattr(_stop, "check", None)
    if check is not None and check():
        raise SearchStopped("the search was asked to stop")


def length_penalty(length: int, alpha: float, form: str = "gnmt") -> float:
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14); form "power": |Y| ** alpha,
    as Hugging Face's generate divides by."""
    if form == "power":
        return float(length) ** alpha
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(request: DecodeRequest, a: float, b: int) -> torch.Tensor:
    """Maximum output length per source: a * source length + b, counted in tokens (without eos).

    The source length leaves out the eos that encoding appends, so that max_len_a = 1, max_len_b = 50 is the
    paper's "input length + 50"."""
    src_len = ((request.src != request.pad_id) & (request.src != request.eos_id)).sum(dim=1)
    limits = (src_len.float() * a + b).floor().long().clamp(min=1)
    room = _room(request)
    if room is not None:  # a forced prefix is never cut, and phrases that must appear fit: the limit leaves room
        limits = torch.maximum(limits, torch.tensor(room, device=limits.device))
    return limits


def _room(request: DecodeRequest) -> list[int] | None:
    """Per source, the tokens its output needs at least: its forced prefix and its phrases that must appear
    (None where the request has neither)."""
    prefixes = request.prefixes if request.prefixes and any(request.prefixes) else None
    phrases = request.constraints if request.constraints and any(c.include for c in request.constraints) else None
    if prefixes is None and phrases is None:
        return None
    count = request.src.size(0)
    return [(len(prefixes[i]) if prefixes else 0) + (phrases[i].tokens_needed() if phrases else 0)
            for i in range(count)]


def shortest_limit(request: DecodeRequest, a: float, b: int) -> int:
    """A lower bound of every max_lengths(request, a, b), from what the host knows without asking the device.

    With a >= 0 a limit is at least b (float32 rounding is monotonic, so a * length + b never floors below b);
    with a < 0 it is at least a * (padded width) + b, less one for max_lengths' float32 rounding."""
    lowest = math.floor(b) if a >= 0 else math.floor(request.src.size(1) * a + b) - 1
    return max(1, lowest)


def _forbid_specials(logprobs: torch.Tensor, request: DecodeRequest) -> None:
    logprobs[:, request.pad_id] = float("-inf")
    if request.bos_id != request.eos_id:
        logprobs[:, request.bos_id] = float("-inf")


def _force_length(logprobs: torch.Tensor, step: int, limits: torch.Tensor, eos: int, min_len: int,
                  shortest: int, free_eos: bool = False) -> None:
    """Only eos where a row reached its maximum length; never eos before min_len.

    `shortest` is a lower bound of the rows' limits (shortest_limit): before it no row is at its limit and the
    (N, V) mask, a pass over the whole log-probs, is skipped; from it on every row is masked, at its limit or
    not, so that the host never asks the device whether any row is there."""
    if step < min_len:
        logprobs[:, eos] = float("-inf")
    if step < shortest:
        return
    at_limit = limits <= step  # (N,)
    eos_scores = logprobs[:, eos].clone()
    # a row at its limit always has a way out, even if a constraint forbade eos; with free_eos that eos costs
    # nothing (log-prob 0), as Hugging Face's forced_eos_token_id makes it
    way_out = torch.where(torch.isinf(eos_scores) | free_eos, torch.zeros_like(eos_scores), eos_scores)
    logprobs.masked_fill_(at_limit.unsqueeze(1), float("-inf"))
    logprobs[:, eos] = torch.where(at_limit, way_out, eos_scores)


class _Prefixes:
    """The target prefixes of a request (DecodeRequest.prefixes) as a (sources, longest) table, -1 past each end,
    and their lengths (sources,) on the device."""

    def __init__(self, request: DecodeRequest):
        given = request.prefixes or []
        self.width = max((len(p) for p in given), default=0)
        self.table = None
        self.lengths = torch.zeros(request.src.size(0), dtype=torch.long, device=request.src.device)
        if self.width:
            table = torch.full((len(given), self.width), -1, dtype=torch.long)
            for i, prefix in enumerate(given):
                table[i, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
            self.table = table.to(request.src.device)
            self.lengths = torch.tensor([len(p) for p in given], dtype=torch.long, device=request.src.device)

    def unscored(self, scores: torch.Tensor, step: int, sources: torch.Tensor) -> torch.Tensor:
        """scores (N, k) of rows of `sources` (N,) with a forced token's log-prob counted as 0 where a row's prefix
        is not over at `step`: the prefix is given, not chosen, so its cost ranks no hypothesis above another."""
        if self.table is None or step >= self.width:
            return scores
        forced = (self.table[sources, step] >= 0).unsqueeze(1)  # (N, 1)
        return torch.where(forced & torch.isfinite(scores), torch.zeros_like(scores), scores)

    def force(self, logprobs: torch.Tensor, step: int, sources: torch.Tensor) -> torch.Tensor:
        """logprobs (N, V) of rows of `sources` (N,) with, where a row's prefix is not over at `step`, every token
        but the prefix's set to -inf (its own log-prob kept)."""
        if self.table is None or step >= self.width:  # known on the host: no device read
            return logprobs
        forced = self.table[sources, step]  # (N,)
        index = forced.clamp(min=0).unsqueeze(1)
        only = torch.full_like(logprobs, float("-inf")).scatter(1, index, logprobs.gather(1, index))
        return torch.where((forced >= 0).unsqueeze(1), only, logprobs)


# the vocabulary-wide top-k and max read a row in blocks of this many entries (see _top_blocks)
BLOCK = 64


def _top_blocks(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """values.topk(k, dim=1) (the same values, tied ones possibly in another order), read in one vectorized pass.

    torch's CPU topk and max-with-index walk each row element by element; amax over blocks of BLOCK entries is
    one SIMD pass (on (256, 8,000) log-probs, 1 thread: amax 0.38 ms, max with its index 2.5 ms, topk(8) 3.9 ms,
    this top-8 2.3 ms; bench/log/2026-11-26-decode-speed.md). The k
    best entries of a row lie in the k blocks with the highest maxima (a block holding one of them has a
    maximum at least the k-th best, and at most k blocks hold one), so a top-k over those k * BLOCK entries
    finds them."""
    rows, vocab = values.shape
    whole = vocab - vocab % BLOCK
    if whole < 4 * k * BLOCK:  # a small vocabulary: the plain top-k (or max) reads little anyway
        if k == 1:
            best, at = values.max(dim=1)
            return best.unsqueeze(1), at.unsqueeze(1)
        return values.topk(k, dim=1)
    maxima = values[:, :whole].unflatten(1, (whole // BLOCK, BLOCK)).amax(dim=2)  # (N, blocks)
    blocks = maxima.topk(k, dim=1).indices  # (N, k)
    columns = (blocks.unsqueeze(2) * BLOCK + torch.arange(BLOCK, device=values.device)).view(rows, k * BLOCK)
    if whole < vocab:  # the last, partial block: its entries are always candidates
        tail = torch.arange(whole, vocab, device=values.device).expand(rows, vocab - whole)
        columns = torch.cat([columns, tail], dim=1)
    best, at = values.gather(1, columns).topk(k, dim=1)
    return best, columns.gather(1, at)


class _StepScores:
    """One step's log-probs (N, V). `share` > 1: one row stands for `share` search rows (beam search's first
    step, when a source's beams are all its one bos row)."""

    def __init__(self, values: torch.Tensor, share: int = 1):
        self.values, self.share = values, share

    def at(self, rows: torch.Tensor, tokens: torch.Tensor | int) -> torch.Tensor:
        """Log-probs of tokens (or one token id) at search rows `rows`, shape of rows."""
        if self.share > 1:
            rows = torch.div(rows, self.share, rounding_mode="floor")
        return self.values[rows, tokens]

    def topk(self, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The best `width` log-probs (N, width) of each search row and their tokens."""
        scores, tokens = _top_blocks(self.values, width)
        if self.share > 1:
            scores, tokens = scores.repeat_interleave(self.share, 0), tokens.repeat_interleave(self.share, 0)
        return scores, tokens

    def best(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The best log-prob of each row and its token."""
        best, choice = _top_blocks(self.values, 1)
        return best[:, 0], choice[:, 0]


class _StepRules:
    """What every step of one search does to the model's log-probs, bound once when the search starts, as
    fairseq's SequenceGenerator keeps its settings on self: renormalization, the target prefixes, the task's step
    constraint, the specials, and the length limits. A new rule is a field here and a line in `apply`, not one
    more parameter at every step of both searches.

    `shortest`: see _force_length. renormalize: the model's log-probs renormalized once specials are banned
    (Hugging Face's renormalize_logits), before the prefix and the limits pick among them. free_eos: see
    _force_length."""

    def __init__(self, request: DecodeRequest, prefixes: _Prefixes, constraint: StepConstraint | None,
                 min_len: int, shortest: int, free_eos: bool = False, renormalize: bool = False):
        self.request, self.prefixes = request, prefixes
        self.min_len, self.shortest = min_len, shortest
        self.free_eos, self.renormalize = free_eos, renormalize
        given = request.constraints
        self.phrases = PhraseConstraint(given) if given and any(given) else None
        # the task's step constraint (a decoder's) and the request's phrases: each keeps its own state per row
        self.constraints = [c for c in (constraint, self.phrases) if c is not None]

    def start(self, rows: torch.Tensor) -> None:
        """The search begins with rows (N,) of these sources."""
        for constraint in self.constraints:
            constraint.start(self.request, rows)

    def advance(self, origin: torch.Tensor, tokens: torch.Tensor) -> None:
        """The search kept rows: new row i continues old row origin[i] with token tokens[i]."""
        for constraint in self.constraints:
            constraint.advance(origin, tokens)

    def next(self, model: Model, last: torch.Tensor, memory, cache, step: int, limits: torch.Tensor,
             sources: torch.Tensor | None = None, share: int = 1) -> tuple[_StepScores, object]:
        """One decoder step: float32 log-probs (N, V) with the rules applied (`limits`: each row's maximum
        length; `sources`: the source of each row, for the prefixes), as _StepScores (`share`: see there)."""
        logprobs, cache = model.step(last, memory, cache)
        return _StepScores(self.apply(logprobs.float(), step, limits, sources), share), cache

    def apply(self, logprobs: torch.Tensor, step: int, limits: torch.Tensor,
              sources: torch.Tensor | None) -> torch.Tensor:
        """The rules on one step's float32 log-probs (N, V), in their order."""
        if self.renormalize:
            _forbid_specials(logprobs, self.request)
            logprobs = logprobs.log_softmax(dim=-1)
        if sources is not None:
            logprobs = self.prefixes.force(logprobs, step, sources)
        if self.phrases is not None:
            self.phrases.set_limits(limits)
        for constraint in self.constraints:
            logprobs = constraint.mask(logprobs)
        _forbid_specials(logprobs, self.request)
        _force_length(logprobs, step, limits, self.request.eos_id, self.min_len, self.shortest, self.free_eos)
        return logprobs


@torch.no_grad()
def greedy_search(model: Model, request: DecodeRequest, settings: SearchSettings | None = None,
                  constraint: StepConstraint | None = None,
                  choose: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[list[Hypothesis]]:
    """Pick the most probable token at each step until eos or the length limit.

    choose, if given, picks the token instead: log-probs (N, V) -> token ids (N,) (sampling decoders pass one);
    a hypothesis's score is still the model's log-probability of the tokens chosen.

    Rows that end leave the batch (the model's reorder keeps the others) once they are an eighth of it, so a
    batch of unequal lengths stops computing its short outputs; the host reads one number per step, as before.
    """
    settings = settings or SearchSettings()
    batch = request.src.size(0)
    device = request.src.device
    limits = max_lengths(request, settings.max_len_a, settings.max_len_b)
    shortest = shortest_limit(request, settings.max_len_a, settings.max_len_b)
    memory = model.encode(request.src)
    cache = model.init_cache(memory)
    rows = torch.arange(batch, device=device)
    prefixes = _Prefixes(request)
    rules = _StepRules(request, prefixes, constraint, settings.min_len, shortest)
    rules.start(rows)
    last = torch.full((batch,), request.bos_id, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # of the rows in the batch
    where = rows  # (n,) the source of each row still in the batch
    chosen, scores, alive = [], [], []  # per step: (B,) token, its log-prob, whether the row was still going
    step = 0
    n_rows, n_done = batch, 0
    while n_done < n_rows:
        _stop_if_asked()
        found, cache = rules.next(model, last, memory, cache, step, limits, where)
        if choose is None:
            best, choice = found.best()
        else:
            choice = choose(found.values)
            best = found.at(torch.arange(choice.numel(), device=device), choice)
        if n_rows == batch:
            chosen.append(choice)
            scores.append(best)
            alive.append(~done)
        else:  # rows that left stay eos, not alive, in the per-source records
            chosen.append(torch.full((batch,), request.eos_id, device=device).index_copy(0, where, choice))
            scores.append(torch.zeros(batch, device=device).index_copy(0, where, best.float()))
            alive.append(torch.zeros(batch, dtype=torch.bool, device=device).index_copy(0, where, ~done))
        done = done | (choice == request.eos_id)
        last = torch.where(done, torch.full_like(choice, request.eos_id), choice)
        step += 1
        n_done = int(done.sum())  # the step's one host read
        leave = n_done < n_rows and n_done >= max(1, n_rows // 8)
        # the rows still going, in their order (a sort, not nonzero(): the host knows their count already)
        keep = (torch.argsort(done.to(torch.uint8), stable=True)[: n_rows - n_done] if leave
                else torch.arange(n_rows, device=device))
        rules.advance(keep, choice[keep] if leave else choice)  # new row i continues row keep[i]
        if leave:
            memory, cache = model.reorder(memory, cache, keep)
            where, last, limits, done = where[keep], last[keep], limits[keep], done[keep]
            n_rows, n_done = keep.numel(), 0
    tokens = torch.stack(chosen, dim=1).tolist()  # (B, steps)
    logps = torch.stack(scores, dim=1).tolist()
    live = torch.stack(alive, dim=1).sum(dim=1).tolist()  # steps each row took, eos included
    given = prefixes.lengths.tolist()  # the forced tokens: in the output and its log-prob, not in its score
    out = []
    for t, lp, n, forced in zip(tokens, logps, live, given):
        kept = [tok for tok in t[:n] if tok != request.eos_id]
        out.append([Hypothesis(tokens=kept, score=sum(lp[forced:n]), logprob=sum(lp[:n]),
                               positional_logprobs=lp[:n])])
    return out


@torch.no_grad()
def beam_search(model: Model, request: DecodeRequest, settings: BeamSettings | None = None,
                constraint: StepConstraint | None = None) -> list[list[Hypothesis]]:
    """Batched beam search with GNMT length penalty; returns the nbest finished hypotheses per source, best first.

    A source leaves the search once no live hypothesis can still finish with a higher normalized score than
    the worst of its `nbest` best finished ones (see `_live_bound`; early_stopping = "never"). early_stopping =
    true (or `early_stop`, fairseq's name) leaves as soon as it has `beam` finished hypotheses, which can miss
    better, longer ones; false is Hugging Face generate's default heuristic (`_stops`).

    Each step reads one number back from the device, how many sources are done, to shrink the batch; the
    finished lists and the prefixes (as back-pointers, `_History`) stay on the device until the search ends.
    """
    settings = settings or BeamSettings()
    beam, alpha, rule = settings.beam, settings.alpha, _stopping_rule(settings)
    nbest = min(settings.nbest, beam)
    batch = request.src.size(0)
    device = request.src.device
    if batch == 0:
        return []
    src_limits = max_lengths(request, settings.max_len_a, settings.max_len_b)  # (alive sources,)
    shortest = shortest_limit(request, settings.max_len_a, settings.max_len_b)
    form = settings.length_penalty
    penalties = _Penalties(request, settings.max_len_a, settings.max_len_b, alpha, form)
    memory = model.encode(request.src)
    # row r of the search batch belongs to source alive[r // beam]
    alive = torch.arange(batch, device=device)
    expand = alive.repeat_interleave(beam)
    prefixes = _Prefixes(request)
    # renormalize: settings made before the key (a plugin's own) lack it
    rules = _StepRules(request, prefixes, constraint, settings.min_len, shortest, settings.limit_eos == "free",
                       getattr(settings, "renormalize", False))
    phrases = rules.phrases if rules.phrases is not None and rules.phrases.any_include else None
    # at step 0 a source's beams are all its one bos row: without a constraint (which keeps per-row state) the
    # model computes that row once per source, and the first reorder expands the cache to `beam` rows
    share = 1 if rules.constraints else beam
    if share == 1:
        memory, _ = model.reorder(memory, None, expand)
    cache = model.init_cache(memory)
    rules.start(expand)
    last = torch.full((batch * beam // share,), request.bos_id, dtype=torch.long, device=device)
    history = _History()
    # only the first beam of each source is live at step 0, so the others never duplicate it
    scores = torch.full((batch, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0
    # Hugging Face's rules keep `beam` finished hypotheses and compare with the worst of them; the exact search's
    # bound needs only the n-best
    finished = _Finished(batch, nbest if rule == "never" else beam, device)
    results = _Finished(batch, finished.size, device)  # the lists of the sources that left, by source index

    pick = _pick_free if phrases is None else functools.partial(_pick_banked, phrases)
    step = 0
    n_alive = batch
    while n_alive > 0:
        _stop_if_asked()
        sharing = share if step == 0 else 1  # the model's rows at this step: one per `sharing` search rows
        row_limits = src_limits.unsqueeze(1).expand(n_alive, beam // sharing).reshape(-1)
        row_sources = alive.repeat_interleave(beam // sharing) if prefixes.width > step else None
        found, cache = rules.next(model, last, memory, cache, step, row_limits, row_sources, sharing)
        vocab = found.values.size(-1)
        # 2*beam candidates always hold at least beam that do not end in eos (one eos per row at most). No
        # row gives more than 2*beam of a source's best 2*beam, so each row's best 2*beam tokens are taken
        # first and the source's best among those beam * 2*beam: the same candidates as a top-k over all
        # beam * vocab sums, without adding the scores to every (row, token)
        width = min(2 * beam, vocab)
        row_scores, row_tokens = found.topk(width)  # (N, width)
        if prefixes.width > step:  # a forced token adds nothing to the ranking score (module docstring)
            row_scores = prefixes.unscored(row_scores, step, alive.repeat_interleave(beam))
        penalty = penalties.after(step + 1, prefixes, alive)
        new_scores, new_beam, new_token = pick(finished, step, scores, found, row_scores, row_tokens, penalty,
                                               request.eos_id)
        origin = (torch.arange(n_alive, device=device).unsqueeze(1) * beam + new_beam).view(-1)
        new_logprob = found.at(origin, new_token)

        if rule == "never":
            full = _live_bound(new_scores.max(dim=1).values, step + 1 - _forced(prefixes, alive),
                               src_limits - _forced(prefixes, alive), alpha, form) <= finished.worst()
        else:
            full = _stops(rule, finished, new_scores, penalty)
        source_done = full | ~torch.isfinite(new_scores).any(dim=1)
        scores = new_scores
        n_done = int(source_done.sum())  # the step's one host read
        if n_done > 0:
            finished.finish_dead_ends(source_done, step, scores, origin, new_token, new_logprob,
                                      penalties.after(step + 2, prefixes, alive))
            # the sources still going first, in their order, then those done
            order = torch.argsort(source_done.to(torch.uint8), stable=True)
            kept, gone = order[: n_alive - n_done], order[n_alive - n_done:]
            results.store(alive[gone], finished, gone)
            finished.keep(kept)
            rows = (kept.unsqueeze(1) * beam + torch.arange(beam, device=device)).view(-1)
            alive, scores, src_limits = alive[kept], scores[kept], src_limits[kept]
            origin, new_token, new_logprob = origin[rows], new_token[rows], new_logprob[rows]
            n_alive -= n_done
        if n_alive > 0:
            history.append(origin, new_token, new_logprob)
            rules.advance(origin, new_token)
            # at step 0 the model's rows are the sources' (share > 1): row r of the search came from r // share
            parents = torch.div(origin, share, rounding_mode="floor") if step == 0 and share > 1 else origin
            memory, cache = model.reorder(memory, cache, parents)
            last = new_token
        step += 1

    return results.hypotheses(history, nbest, prefixes.lengths.tolist())


def _pick_free(finished: _Finished, step: int, scores: torch.Tensor, found: _StepScores, row_scores: torch.Tensor,
               row_tokens: torch.Tensor, penalty: torch.Tensor,
               eos: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step's choice without phrases to meet: each source's best 2 * beam candidates, of which those ending in
    eos among the first `beam` go to its finished list, and the first `beam` that do not end continue. scores
    (n, beam): the live hypotheses'; row_scores, row_tokens (n * beam, width): each row's best tokens. Returns the
    continuing (n, beam) scores, the beams they continue, and their tokens (n * beam,)."""
    n_alive, beam = scores.shape
    width, vocab = row_scores.size(1), found.values.size(-1)
    candidates = (scores.view(-1, 1) + row_scores).view(n_alive, beam * width)
    top_scores, top_index = candidates.topk(min(2 * beam, beam * vocab), dim=1)
    top_token = row_tokens.view(n_alive, beam * width).gather(1, top_index)
    return _split_off_ends(finished, beam, step, top_scores, top_index // width, top_token, found, penalty, eos)


def _pick_banked(phrases: PhraseConstraint, finished: _Finished, step: int, scores: torch.Tensor,
                 found: _StepScores, row_scores: torch.Tensor, row_tokens: torch.Tensor, penalty: torch.Tensor,
                 eos: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step's choice with phrases to meet (decoding/phrases.py), as _pick_free returns it: the candidates are
    each row's best tokens and the tokens that take it into its phrases, ordered by dynamic beam allocation over
    banks (phrases.select) instead of by score alone; an eos (only where a row met its phrases) takes its place in
    that order as in _pick_free, so that a hypothesis that may end does not leave its bank's slot to a poor
    continuation of itself."""
    n_alive, beam = scores.shape
    rows = torch.arange(n_alive * beam, device=scores.device)
    extra_scores, extra_tokens = phrases.candidates(row_scores, row_tokens, found.values)  # (N, k + P)
    width = extra_scores.size(1)
    totals = (scores.view(-1, 1) + extra_scores).view(n_alive, beam * width)
    banks = phrases.banks_after(rows.unsqueeze(1).expand(-1, width), extra_tokens).view(n_alive, beam * width)
    order = select(totals, banks, min(2 * beam, beam * width))  # (n, 2 * beam)
    top_token = extra_tokens.view(n_alive, -1).gather(1, order)
    return _split_off_ends(finished, beam, step, totals.gather(1, order), order // width, top_token, found, penalty,
                           eos)


def _split_off_ends(finished: _Finished, beam: int, step: int, top_scores: torch.Tensor, top_beam: torch.Tensor,
                    top_token: torch.Tensor, found: _StepScores, penalty: torch.Tensor,
                    eos: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Of each source's candidates in their order (top_*: (n, 2 * beam)), those ending in eos within the first
    `beam` go to its finished list and the first `beam` others continue."""
    n_alive, device = top_scores.size(0), top_scores.device
    is_eos = top_token == eos
    finite = torch.isfinite(top_scores)
    # eos candidates ranked within the first `beam` of their source are offered to its n-best list
    from_rows = torch.arange(n_alive, device=device).unsqueeze(1) * beam + top_beam[:, :beam]  # (n_alive, beam)
    finished.offer(step, from_rows, top_scores[:, :beam], found.at(from_rows, eos),
                   (is_eos & finite)[:, :beam], penalty, eos)
    # the first `beam` live (non-eos) candidates continue
    live_rank = torch.where(is_eos, torch.full_like(top_scores, float("inf")),
                            torch.arange(top_scores.size(1), device=device).float().expand_as(top_scores))
    keep = live_rank.argsort(dim=1)[:, :beam]
    return top_scores.gather(1, keep), top_beam.gather(1, keep), top_token.gather(1, keep).view(-1)


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


def _stopping_rule(settings: BeamSettings) -> bool | str:
    """The settings' early_stopping rule (True, False or "never"); a plugin's settings object without the key
    (made before it, or a plain namespace) reads its early_stop alone."""
    if hasattr(settings, "stopping_rule"):
        return settings.stopping_rule()
    return True if settings.early_stop else getattr(settings, "early_stopping", "never")


def _stops(rule: bool | str, finished: _Finished, live: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """(n,) whether each source stops after this step under Hugging Face generate's early_stopping = True or
    False (transformers 5.24, GenerationMixin._beam_search: _check_early_stop_heuristic and
    _beam_search_has_unfinished_sequences; the rule, not its code). Both wait for `beam` finished hypotheses
    (finished.full()). True stops then. False stops once, besides, the best live hypothesis's log-prob (live:
    (n, beam), after this step) divided by the penalty of the length it has now (`penalty`: that of a hypothesis
    ending at this step, eos counted, the tokens after a prefix only) is not above the worst finished score: the
    heuristic assumes a live hypothesis scores best where it stands, which a longer one under a length penalty
    with alpha > 0 can beat (the exact search, "never", waits for it)."""
    full = finished.full()
    if rule is True:
        return full
    best = live.max(dim=1).values.double() / penalty.view(-1)  # (n,); penalty (1,) or (n,) with prefixes
    return full & ~(best > finished.score[:, -1])


def _forced(prefixes: _Prefixes, sources: torch.Tensor) -> torch.Tensor | int:
    """The prefix length of each of `sources` (0 without prefixes: a plain int, no device work)."""
    return prefixes.lengths[sources] if prefixes.width else 0


def _live_bound(best_live: torch.Tensor, length: int | torch.Tensor, limits: torch.Tensor, alpha: float,
                form: str = "gnmt") -> torch.Tensor:
    """The highest normalized score any continuation of a live hypothesis can still finish with.

    A live log-prob only falls, so it is at most best_live (<= 0) when it ends; dividing it by the length
    penalty of the final length (eos included) is largest at the longest length for alpha > 0 and at the next
    step for alpha < 0; alpha = 0 leaves the log-prob as it is. `length` (tokens so far) and `limits` count
    what the score counts: with target prefixes, the tokens after each source's (a tensor per source).
    """
    if alpha == 0:
        return best_live
    if isinstance(length, torch.Tensor):  # a source still inside its prefix has scored nothing yet: at least 1
        next_len = (length + 1).clamp(min=1).double()
        shortest = next_len ** alpha if form == "power" else ((5.0 + next_len) / 6.0) ** alpha
        shortest = shortest.float()
    else:
        shortest = length_penalty(length + 1, alpha, form)
    final = limits.float() + 1.0  # the row's length limit plus its eos
    longest = final ** alpha if form == "power" else ((5.0 + final) / 6.0) ** alpha
    return torch.maximum(best_live / shortest, best_live / longest)


class _Penalties:
    """length_penalty(n, alpha) for the lengths n a hypothesis reaches, as float64 on the device, grown as the
    search goes.

    Each value is computed in Python as the search always did, so that a score is the same double as before. The
    table covers at most the longest length the host knows without asking the device (from the padded source
    width), but starts short and doubles when a step needs more: a search that ends after 20 steps builds 64
    values however high max_len_b is, and memory follows the steps taken, never the limit asked."""

    FIRST = 64

    def __init__(self, request: DecodeRequest, a: float, b: int, alpha: float, form: str = "gnmt"):
        # max_lengths rounds in float32, which may floor one higher than this double does; a row ends at its limit
        # at the latest, its eos making the length limit + 1; a dead end there, one more; a forced prefix is
        # never cut, so the limit leaves room for the longest
        longest = max(1, math.floor(max(request.src.size(1) * a, 0.0) + b), *(_room(request) or []))
        self.size = longest + 4
        self.alpha, self.form = alpha, form
        self.device = request.src.device
        self.table = torch.empty(0, dtype=torch.float64, device=self.device)

    def after(self, length: int, prefixes: _Prefixes, sources: torch.Tensor) -> torch.Tensor:
        """The penalty of hypotheses of `length` tokens (eos included) whose scores count only what follows the
        prefixes of `sources` (n,): (n, 1), or at(length) when the request has no prefix."""
        if not prefixes.width:
            return self.at(length)
        self.at(length)  # grows the table to cover it
        return self.table[(length - prefixes.lengths[sources]).clamp(min=1)].unsqueeze(1)

    def at(self, length: int) -> torch.Tensor:
        """(1,) the penalty of `length` (a slice, never a host scalar: see _Finished.offer)."""
        if length >= self.table.numel():
            grown = min(self.size, max(self.FIRST, 2 * self.table.numel(), length + 1))
            values = [length_penalty(n, self.alpha, self.form) for n in range(self.table.numel(), grown)]
            self.table = torch.cat([self.table, torch.tensor(values, dtype=torch.float64, device=self.device)])
        return self.table[length:length + 1]


class _History:
    """The search's prefixes as back-pointers: per step, the row each new row continues, its token and log-prob.

    Copying every prefix at every step would cost (N, length); a finished hypothesis instead names the step and
    row it ended at, and its tokens are followed back through these once, when the search ends."""

    def __init__(self) -> None:
        self.origin: list[torch.Tensor] = []  # per step t: (N_t+1,) rows of step t
        self.token: list[torch.Tensor] = []
        self.logprob: list[torch.Tensor] = []

    def append(self, origin: torch.Tensor, token: torch.Tensor, logprob: torch.Tensor) -> None:
        self.origin.append(origin)
        self.token.append(token)
        self.logprob.append(logprob)

    def trace(self, step: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens and log-probs (M, steps + 1) of the prefixes of rows `row` (M,) at steps `step` (M,): columns
        before each step hold its prefix, the rest is left for the caller."""
        steps = len(self.origin)
        tokens = torch.zeros((row.numel(), steps + 1), dtype=torch.long, device=row.device)
        logprobs = torch.zeros((row.numel(), steps + 1), dtype=torch.float, device=row.device)
        at = row.clone()
        for t in reversed(range(steps)):
            active = step > t  # the hypotheses whose prefix reaches back to this step
            index = torch.where(active, at, torch.zeros_like(at))  # rows of step t + 1
            tokens[:, t] = self.token[t][index]
            logprobs[:, t] = self.logprob[t][index]
            at = torch.where(active, self.origin[t][index], at)
        return tokens, logprobs


class _Finished:
    """The `size` best finished hypotheses of each of `n` sources, as tensors, best first (slots past `count`
    unused); a hypothesis is the step and row it ended at (see _History), its last token and that token's
    log-prob, how many tokens it has (eos is not one), its log-prob and its score."""

    def __init__(self, n: int, size: int, device: torch.device):
        self.size = size
        self.score = torch.full((n, size), float("-inf"), dtype=torch.float64, device=device)
        self.count = torch.zeros(n, dtype=torch.long, device=device)
        self.where = torch.zeros((n, size, 4), dtype=torch.long, device=device)  # step, row, last token, length
        self.logprob = torch.zeros((n, size, 2), device=device)  # total, the last token's

    def full(self) -> torch.Tensor:
        return self.count >= self.size

    def worst(self) -> torch.Tensor:
        """(n,) float32: the score a new hypothesis must beat to enter (-inf while there is room)."""
        last = self.score[:, -1]
        return torch.where(self.full(), last, torch.full_like(last, float("-inf"))).float()

    def offer(self, step: int, rows: torch.Tensor, totals: torch.Tensor, eos_logprobs: torch.Tensor,
              take: torch.Tensor, penalty: torch.Tensor, eos: int) -> None:
        """Add the candidates `take` (n, k) that end rows `rows` with eos at `step`, scored totals / penalty.

        One stable sort of the old list followed by the candidates in their order: a hypothesis goes after
        those already listed with an equal score (the earlier step, or the better-ranked candidate, first), and
        one that does not beat a full list's worst falls off its end. A float64 score divided by a (1,) tensor,
        never a scalar, is the double the search computed in Python (CUDA multiplies by the reciprocal of a host
        scalar)."""
        none = torch.full_like(totals, float("-inf"), dtype=torch.float64)
        score = torch.where(take, totals.double() / penalty, none)
        where = torch.stack([torch.full_like(rows, step), rows, torch.full_like(rows, eos),
                             torch.full_like(rows, step)], dim=-1)
        self._merge(score, where, torch.stack([totals, eos_logprobs], dim=-1))
        self.count = (self.count + take.sum(dim=1)).clamp(max=self.size)

    def _merge(self, score: torch.Tensor, where: torch.Tensor, logprob: torch.Tensor) -> None:
        scores = torch.cat([self.score, score], dim=1)
        order = scores.sort(dim=1, descending=True, stable=True).indices[:, : self.size]
        self.score = scores.gather(1, order)
        self.where = torch.cat([self.where, where], dim=1).gather(1, order.unsqueeze(2).expand(-1, -1, 4))
        self.logprob = torch.cat([self.logprob, logprob], dim=1).gather(1, order.unsqueeze(2).expand(-1, -1, 2))

    def finish_dead_ends(self, done: torch.Tensor, step: int, scores: torch.Tensor, origin: torch.Tensor,
                         token: torch.Tensor, logprob: torch.Tensor, penalty: torch.Tensor) -> None:
        """A source that leaves the search without any finished hypothesis keeps its best live one: the new row
        (origin, token) of the highest of its `scores` (n, beam) after `step`."""
        dead = done & (self.count == 0)
        beam = scores.size(1)
        best = scores.argmax(dim=1)
        row = torch.arange(scores.size(0), device=scores.device) * beam + best  # the new rows
        total = scores.gather(1, best.unsqueeze(1)).squeeze(1)
        score = total.double() / penalty.view(-1)  # (1,) or, with prefixes, one per source
        where = torch.stack([torch.full_like(best, step), origin[row], token[row], torch.full_like(best, step + 1)], 1)
        self.score[:, 0] = torch.where(dead, score, self.score[:, 0])
        self.where[:, 0] = torch.where(dead.unsqueeze(1), where, self.where[:, 0])
        self.logprob[:, 0] = torch.where(dead.unsqueeze(1), torch.stack([total, logprob[row]], 1), self.logprob[:, 0])
        self.count = torch.where(dead, torch.ones_like(self.count), self.count)

    def keep(self, index: torch.Tensor) -> None:
        self.score, self.count = self.score[index], self.count[index]
        self.where, self.logprob = self.where[index], self.logprob[index]

    def store(self, sources: torch.Tensor, other: _Finished, index: torch.Tensor) -> None:
        """Copy the lists `index` of `other` to the lists `sources` of this one."""
        self.score[sources], self.count[sources] = other.score[index], other.count[index]
        self.where[sources], self.logprob[sources] = other.where[index], other.logprob[index]

    def hypotheses(self, history: _History, nbest: int, forced: list[int]) -> list[list[Hypothesis]]:
        """The first `nbest` of each list as Hypothesis objects, their tokens followed back through history;
        forced: each source's prefix length, whose log-probs the search left out of the scores and a
        hypothesis's logprob counts again."""
        where = self.where.view(-1, 4)
        step, row, last, length = where.unbind(1)
        tokens, positional = history.trace(step, row)
        tokens.scatter_(1, step.unsqueeze(1), last.unsqueeze(1))
        positional.scatter_(1, step.unsqueeze(1), self.logprob.view(-1, 2)[:, 1:])
        tokens, positional, steps, lengths = tokens.tolist(), positional.tolist(), step.tolist(), length.tolist()
        scores, totals, counts = self.score.tolist(), self.logprob[..., 0].tolist(), self.count.tolist()
        out = []
        for source, count in enumerate(counts):
            hyps = []
            for slot in range(min(count, nbest)):
                m = source * self.size + slot
                given = sum(positional[m][: forced[source]]) if forced[source] else 0.0
                hyps.append(Hypothesis(tokens=tokens[m][: lengths[m]], score=scores[source][slot],
                                       logprob=totals[source][slot] + given,
                                       positional_logprobs=positional[m][: steps[m] + 1]))
            out.append(hyps)
        return out
