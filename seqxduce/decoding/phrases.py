"""Lexical constraints on a search: phrases that must appear in every output and phrases that must never appear
(DecodeRequest.constraints), as fairseq's LexicallyConstrainedBeamSearch (Post & Vilar 2018, dynamic beam
allocation; Hu et al. 2019 vectorized it) and Hugging Face's bad_words_ids / CTranslate2's suppress_sequences.

Every row of the search keeps the last `width` tokens it chose (a window as wide as the longest phrase), so that
whether a phrase is met, how far a row is into one, and whether the next token would complete a forbidden one
are all comparisons of the window with the phrases, done for every row at once:
- a phrase that must appear is met once it was the window's end at some step (the flag stays set); a row's
  progress into it is the longest end of the window that starts it (so "a a b" is found in "a a a b");
- a row's bank (Post & Vilar) counts the tokens of its met phrases plus the progress of its furthest unmet one;
  the beam is shared out over banks by `select` (fairseq's striping: the best candidate of each bank, fullest
  bank first, then the second best of each, ...), so hypotheses that met more of their phrases are kept
  beside better-scored ones that met fewer;
- a row may end (eos) only once every phrase is met, and a row whose tokens left before its length limit would
  not be enough to write its unmet phrases whole is held to them (`mask`): every output holds every phrase;
- a phrase that must not appear bans its last token wherever the window ends with the rest of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from seqxduce.api import DecodeRequest, Phrases, StepConstraint, Tokenizer, UserError

NEG_INF = float("-inf")


def _table(phrases: list[tuple[tuple[int, ...], ...]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per source, its phrases as a (B, P, L) table, -1 past each phrase's end and for missing phrases, and their
    lengths (B, P), 0 for a missing phrase."""
    count = max((len(p) for p in phrases), default=0)
    longest = max((len(x) for p in phrases for x in p), default=0)
    table = torch.full((len(phrases), count, max(longest, 1)), -1, dtype=torch.long)
    lengths = torch.zeros((len(phrases), count), dtype=torch.long)
    for b, given in enumerate(phrases):
        for i, phrase in enumerate(given):
            table[b, i, : len(phrase)] = torch.tensor(phrase, dtype=torch.long)
            lengths[b, i] = len(phrase)
    return table.to(device), lengths.to(device)


def _ends_with_start(windows: torch.Tensor, phrases: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(X, P) the longest k <= a phrase's length such that the window's last k tokens are the phrase's first k.

    windows (X, W): the last W tokens, newest last (-1 before the start); phrases (X, P, L) with lengths (X, P);
    W >= L."""
    width, longest = windows.size(1), phrases.size(2)
    best = torch.zeros(phrases.shape[:2], dtype=torch.long, device=windows.device)
    for k in range(1, longest + 1):
        tail = windows[:, width - k:].unsqueeze(1)  # (X, 1, k)
        starts = (tail == phrases[:, :, :k]).all(dim=2) & (lengths >= k)  # (X, P)
        best = torch.where(starts, torch.full_like(best, k), best)
    return best


def _furthest(progress: torch.Tensor, unmet: torch.Tensor) -> torch.Tensor:
    """(X,) the furthest progress into an unmet phrase (0 where there is none)."""
    if progress.size(1) == 0:
        return progress.sum(dim=1)
    return (progress * unmet).amax(dim=1)


class PhraseConstraint(StepConstraint):
    """The lexical constraints of a request's sources on a search's rows (a StepConstraint, beside a task's),
    and the bank of each row and candidate for beam search's allocation."""

    def __init__(self, phrases: list[Phrases]):
        self.phrases = phrases
        self.any_include = any(p.include for p in phrases)
        self.any_exclude = any(p.exclude for p in phrases)

    # ------------------------------------------------------------------ StepConstraint

    def start(self, request: DecodeRequest, rows: torch.Tensor) -> None:
        device = request.src.device
        self.eos = request.eos_id
        self.include, self.include_len = _table([p.include for p in self.phrases], device)
        self.exclude, self.exclude_len = _table([p.exclude for p in self.phrases], device)
        self.total = self.include_len.sum(dim=1)  # (B,) the tokens of a source's phrases
        self.width = max(self.include.size(2), self.exclude.size(2))
        self.source = rows
        self.window = torch.full((rows.numel(), self.width), -1, dtype=torch.long, device=device)
        self.met = torch.zeros((rows.numel(), self.include.size(1)), dtype=torch.bool, device=device)
        self.progress = torch.zeros_like(self.met, dtype=torch.long)
        self.step = 0
        self.limits: torch.Tensor | None = None

    def mask(self, logprobs: torch.Tensor) -> torch.Tensor:
        if self.any_exclude:
            logprobs = self._ban_excluded(logprobs)
        if self.any_include:
            logprobs = self._hold_to_included(logprobs)
        return logprobs

    def advance(self, origin: torch.Tensor, tokens: torch.Tensor) -> None:
        self.source = self.source[origin]
        self.window = torch.cat([self.window[origin, 1:], tokens.unsqueeze(1)], dim=1)
        if self.any_include:
            include, lengths = self.include[self.source], self.include_len[self.source]
            self.progress = _ends_with_start(self.window, include, lengths)
            self.met = self.met[origin] | ((self.progress == lengths) & (lengths > 0))
        self.step += 1

    # ------------------------------------------------------------------ the rules

    def set_limits(self, limits: torch.Tensor) -> None:
        """Each row's length limit (N,), as the search's rows are now: a row is held to its phrases once the
        tokens it has left are only enough for them."""
        self.limits = limits

    def _ban_excluded(self, logprobs: torch.Tensor) -> torch.Tensor:
        phrases, lengths = self.exclude[self.source], self.exclude_len[self.source]  # (N, P, L), (N, P)
        rows, count, longest = phrases.shape
        width = self.window.size(1)
        before = (lengths - 1).unsqueeze(2)  # (N, P, 1): the tokens a forbidden last token needs before it
        j = torch.arange(longest - 1, device=phrases.device)
        inside = j < before  # (N, P, L - 1)
        # the phrase's token j must be the window's token width - before + j
        index = (width - before + j).clamp(min=0, max=width - 1)
        recent = self.window.unsqueeze(1).expand(rows, count, width).gather(2, index)
        matched = ((recent == phrases[:, :, : longest - 1]) | ~inside).all(dim=2) & (lengths > 0)  # (N, P)
        last = phrases.gather(2, before.clamp(min=0)).squeeze(2).clamp(min=0)  # (N, P)
        current = logprobs.gather(1, last)
        banned = torch.where(matched, torch.full_like(current, NEG_INF), current)
        # several phrases may end in one token: the lowest (-inf where any is complete) wins
        return logprobs.scatter_reduce(1, last, banned, reduce="amin")

    def needed(self) -> torch.Tensor:
        """(N,) the tokens each row still needs for its unmet phrases, if it goes on with its furthest one."""
        lengths = self.include_len[self.source]
        unmet = ~self.met & (lengths > 0)
        return (lengths * unmet).sum(dim=1) - _furthest(self.progress, unmet)

    def all_met(self) -> torch.Tensor:
        return self.needed() == 0

    def _advancing(self) -> torch.Tensor:
        """(N, P) each row's next token of each unmet phrase (its first where the row is not into it), -1 where
        the phrase is met or missing."""
        phrases, lengths = self.include[self.source], self.include_len[self.source]
        at = self.progress.clamp(max=phrases.size(2) - 1).unsqueeze(2)
        token = phrases.gather(2, at).squeeze(2)
        return torch.where(~self.met & (lengths > 0), token, torch.full_like(token, -1))

    def _hold_to_included(self, logprobs: torch.Tensor) -> torch.Tensor:
        needed = self.needed()  # (N,)
        # no eos before every phrase is in
        logprobs[:, self.eos] = torch.where(needed > 0, torch.full_like(logprobs[:, self.eos], NEG_INF),
                                            logprobs[:, self.eos])
        if self.limits is None:
            return logprobs
        left = self.limits - self.step  # tokens a row may still take before its eos
        lengths = self.include_len[self.source]
        unmet = ~self.met & (lengths > 0)
        # a token that breaks off a phrase may leave every unmet phrase to write whole: a row is held to its
        # phrases once the tokens it has left would not be enough for that, so that they always fit
        hold = (needed > 0) & ((lengths * unmet).sum(dim=1) >= left)  # (N,)
        if not bool(hold.any()):
            return logprobs
        # a held row takes the next token of its furthest phrase, or the first of any unmet one
        furthest = torch.where(unmet, self.progress, torch.full_like(self.progress, -1)).argmax(dim=1)  # (N,)
        into = self.progress.gather(1, furthest.unsqueeze(1)).squeeze(1) > 0
        advancing = self._advancing()  # (N, P)
        only_furthest = torch.full_like(advancing, -1).scatter(1, furthest.unsqueeze(1),
                                                               advancing.gather(1, furthest.unsqueeze(1)))
        allowed = torch.where(into.unsqueeze(1), only_furthest, advancing)  # (N, P), -1 = none
        keep = torch.zeros_like(logprobs, dtype=torch.bool)
        keep.scatter_(1, allowed.clamp(min=0), allowed >= 0)
        held = torch.where(keep, logprobs, torch.full_like(logprobs, NEG_INF))
        return torch.where(hold.unsqueeze(1), held, logprobs)

    # ------------------------------------------------------------------ beam allocation

    def candidates(self, row_scores: torch.Tensor, row_tokens: torch.Tensor,
                   logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's own best tokens (row_scores, row_tokens: (N, k)) joined by the tokens that take it further
        into its unmet phrases, with their log-probs from `logprobs` (N, V): (N, k + P) scores and tokens, an
        advancing token already among the best ones, or missing, at -inf."""
        advancing = self._advancing()  # (N, P)
        scores = logprobs.gather(1, advancing.clamp(min=0))
        seen = (advancing.unsqueeze(2) == row_tokens.unsqueeze(1)).any(dim=2) | (advancing < 0)
        scores = torch.where(seen, torch.full_like(scores, NEG_INF), scores)
        return torch.cat([row_scores, scores], dim=1), torch.cat([row_tokens, advancing.clamp(min=0)], dim=1)

    def banks_after(self, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The bank each row of `rows` (any shape) would be in after `tokens` (the same shape)."""
        flat_rows, flat_tokens = rows.reshape(-1), tokens.reshape(-1)
        source = self.source[flat_rows]
        window = torch.cat([self.window[flat_rows, 1:], flat_tokens.unsqueeze(1)], dim=1)
        lengths = self.include_len[source]
        progress = _ends_with_start(window, self.include[source], lengths)
        met = self.met[flat_rows] | ((progress == lengths) & (lengths > 0))
        unmet = ~met & (lengths > 0)
        bank = (lengths * met).sum(dim=1) + _furthest(progress, unmet)
        return bank.view(rows.shape)


def select(scores: torch.Tensor, banks: torch.Tensor, beam: int) -> torch.Tensor:
    """Dynamic beam allocation: the `beam` candidates of each source that continue, as indices into its
    candidates. scores, banks: (n, M), a candidate that cannot continue at -inf.

    The candidates are ranked by score within their bank, and taken by that rank, the fullest bank first among
    equal ranks (fairseq's striping of Post & Vilar's banks): each bank gets its share of the beam, and the
    share of a bank without candidates goes to the others."""
    order = scores.argsort(dim=1, descending=True, stable=True)
    sorted_banks = banks.gather(1, order)
    top = int(banks.max()) + 1 if banks.numel() else 1
    one_hot = torch.nn.functional.one_hot(sorted_banks, top)  # (n, M, banks)
    rank = (one_hot.cumsum(dim=1) * one_hot).sum(dim=2) - 1  # (n, M): rank within its bank
    key = (rank * top + (top - 1 - sorted_banks)).double()
    key = torch.where(torch.isfinite(scores.gather(1, order)), key, torch.full_like(key, float("inf")))
    chosen = key.argsort(dim=1, stable=True)[:, :beam]
    return order.gather(1, chosen)


# ---------------------------------------------------------------- phrases as users write them

NOT = "!"  # a phrase written "!words" must not appear ("\!words": must appear, starting with "!")


@dataclass(frozen=True)
class PhraseText:
    """One source's constraints as text: `include`, phrases its output must contain, and `exclude`, phrases it
    must not. Written on one line (`decode --constraints FILE`, as fairseq-interactive reads them) as phrases
    separated by tabs, a phrase that must not appear marked with a leading "!"."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def from_line(cls, line: str, where: str) -> PhraseText:
        """The constraints of one line; an empty line has none; an empty phrase (two tabs in a row, a tab at an
        end, a lone "!") is refused naming `where`."""
        line = line.rstrip("\r\n")
        if not line.strip():
            return cls()
        return cls.from_list(line.split("\t"), where)

    @classmethod
    def from_list(cls, phrases: Sequence[str], where: str) -> PhraseText:
        """The constraints of a list of phrases, marked as on a line (the Python API and a served request)."""
        include, exclude = [], []
        for phrase in phrases:
            if not isinstance(phrase, str):
                raise UserError(f"{where}: a phrase must be text, not {type(phrase).__name__}")
            negative = phrase.startswith(NOT)
            text = phrase[1:] if negative else phrase.removeprefix("\\")
            if not text.strip():
                raise UserError(f"{where}: an empty phrase; give words (tab-separated phrases, \"!words\" for "
                                "words that must not appear), or leave the line empty for none")
            (exclude if negative else include).append(text.strip())
        return cls(tuple(include), tuple(exclude))

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)

    def encode(self, tokenizer: Tokenizer, where: str) -> Phrases:
        """The phrases as target ids, each tokenized as the target side is (alone, case as written). A phrase the
        target vocabulary cannot spell (an <unk> in it) is refused naming `where`: the output could not hold it
        as written."""
        def ids(text: str) -> tuple[int, ...]:
            encoded = tuple(tokenizer.encode(text))
            if not encoded or tokenizer.unk_id in encoded:
                raise UserError(f"{where}: the phrase {text!r} has a part the target vocabulary cannot spell (it "
                                "encodes to <unk>); give words the model can output, or leave the phrase out")
            return encoded

        return Phrases(tuple(map(ids, self.include)), tuple(map(ids, self.exclude)))


def encode_phrases(tokenizer: Tokenizer, given: Sequence[PhraseText], beam: int, where: str,
                   first: int = 1) -> list[Phrases]:
    """Every source's constraints as ids (PhraseText.encode), refused in one line naming `where` and the source's
    1-based number (`first`: the number of given[0]) where they cannot be searched for: more phrases that must
    appear than the beam (`beam`; 1 for greedy search) has room to keep apart."""
    encoded = []
    for number, phrases in enumerate(given, start=first):
        if len(phrases.include) > max(beam, 1):
            raise UserError(f"{where}{number}: {len(phrases.include)} phrases must appear, more than the beam "
                            f"({beam}) can keep apart (at most one per beam entry); give at most {max(beam, 1)}, "
                            "or a larger beam (--set decode.beam=N)")
        encoded.append(phrases.encode(tokenizer, f"{where}{number}"))
    return encoded


def banned_ids(tokenizer: Tokenizer, given: Sequence[PhraseText], where: str,
               first: int = 1) -> list[tuple[tuple[int, ...], ...]]:
    """Per source, the ids of its phrases that must not appear (an engine that takes only those: CTranslate2's
    suppress_sequences), refused as PhraseText.encode refuses them, naming `where` and the source's number."""
    return [phrases.encode(tokenizer, f"{where}{number}").exclude for number, phrases in enumerate(given, start=first)]


def violations(tokens: Sequence[int], phrases: Phrases) -> list[tuple[int, ...]]:
    """The phrases an output breaks: those that must appear and do not, and those that must not and do."""
    def holds(phrase: tuple[int, ...]) -> bool:
        n = len(phrase)
        return any(tuple(tokens[i:i + n]) == phrase for i in range(len(tokens) - n + 1))

    return [p for p in phrases.include if not holds(p)] + [p for p in phrases.exclude if holds(p)]


def phrases_given(given: Sequence[object] | None, count: int, where: str) -> list[PhraseText] | None:
    """Per source, the constraints a caller gave (the Python API, a served request): a PhraseText, a list of
    phrases ("!words" must not appear), or one line of tab-separated phrases; None where none is given. A list of
    another length than the sources is refused naming `where`."""
    if given is None:
        return None
    if isinstance(given, str) or len(given) != count:
        raise UserError(f"{where}: give one entry per source ({count}), each a list of phrases (\"!words\" for "
                        "words that must not appear) or an empty list for none")
    read = []
    for number, value in enumerate(given, start=1):
        here = f"{where} of input {number}"
        if isinstance(value, PhraseText):
            read.append(value)
        elif isinstance(value, str):
            read.append(PhraseText.from_line(value, here))
        elif isinstance(value, Sequence):
            read.append(PhraseText.from_list(list(value), here))
        else:
            raise UserError(f"{here}: a list of phrases or a line of them, not {type(value).__name__}")
    return read if any(read) else None


def constraint_features(given: Sequence[PhraseText] | None) -> list[str]:
    """The engine features (decoding.engines.FEATURES) these constraints use."""
    if not given:
        return []
    return [*(["constraints"] if any(p.include for p in given) else []),
            *(["negative constraints"] if any(p.exclude for p in given) else [])]
