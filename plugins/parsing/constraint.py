"""A StepConstraint under which beam search only writes well-formed linearized trees.

Rules: the sequence starts with an opening bracket; a closing bracket must carry the label of the innermost
open constituent and may not close an empty one; there are exactly as many leaves as source words (sources
are whitespace-tokenized); eos comes only after the root is closed. Given the search's length limit, a
bracket is opened only if the tree can still be finished within it (each missing leaf and each open bracket
costs one token), so the forced eos at the limit never cuts a tree short. Each row keeps a small state (stack of
open labels, depth, leaves placed, whether the innermost constituent is still empty), and the mask for all
rows is built at once from per-token-class masks over the vocabulary.

When the target carries the words (words_in_target, see linearize.py), the word token is forced to be the next
source word as the target tokenizer writes it (<unk> for a word outside its vocabulary): after each leaf
("after_leaf"; the word is then given, so it costs nothing to the score), before each leaf ("before_leaf"; writing
it is the decision to place a leaf there, so it is scored as the model's probability of any word at that point, not
of this word, and the leaf's tag must follow), ahead of its leaf ("ahead": the first word is the first token and
each other follows the leaf before it; given, so free, as after_leaf), or as the leaf itself ("as_leaf").

With POS-tag leaves, punctuation follows the words: a word that is always punctuation (',', '--') gets one of the
tags the scorer deletes (EVALB COLLINS.prm: `` '' . : ,) and any other word gets none; a word that may be either
("'": possessive or closing quote) is free, except right after punctuation, where it closes a quotation. EVALB
cannot score a tree whose punctuation differs from the gold tree's (it stops with a length mismatch), so the rule
decides nothing the sentence does not already say, and a wrong punctuation tag can no longer cost a whole sentence.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from seqxduce.api import DecodeRequest, StepConstraint, Tokenizer, UserError
from seqxduce.search import max_lengths

from .linearize import is_close, is_open

OTHER, OPEN, CLOSE, LEAF, EOS = range(5)  # token classes; OTHER (specials, <unk>, ...) is never allowed
NOT_PUNCT, PUNCT, EITHER = range(3)  # what a source word's leaf may be


def is_unknown_class(token: str) -> bool:
    """<unk-Cap-s> and the like: a word tokenizer's stand-in for unknown words, never a leaf label."""
    return token.startswith("<") and token.endswith(">")


def padded(rows: list[list[int]], fill: int, device: torch.device) -> torch.Tensor:
    """(len(rows), longest) long tensor of the rows, filled after each row's end."""
    out = torch.full((len(rows), max([len(r) for r in rows] + [1])), fill, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out.to(device)


class TreeConstraint(StepConstraint):
    """Only well-formed trees with one leaf per source word (see the module docstring)."""

    def __init__(self, tokenizer: Tokenizer, leaf_tokens: Iterable[str] | None = None,
                 max_len_a: float | None = None, max_len_b: int | None = None, words_in_target: str = "none",
                 punctuation_tags: Iterable[str] = (), punctuation_words: Iterable[str] = (),
                 either_words: Iterable[str] = ()):
        self.max_len = None if max_len_a is None or max_len_b is None else (max_len_a, max_len_b)
        self.tokenizer = tokenizer
        self.words_in_target = words_in_target
        leaves = set(leaf_tokens) if leaf_tokens else None
        specials = {tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id}
        size = tokenizer.vocab_size
        kind = [OTHER] * size
        label = [-1] * size
        labels: dict[str, int] = {}
        for i in range(size):
            if i in specials:
                continue
            token = tokenizer.id_to_token(i)
            if is_open(token) or is_close(token):
                kind[i] = OPEN if is_open(token) else CLOSE
                label[i] = labels.setdefault(token[1:], len(labels))
            elif "(" not in token and ")" not in token and not is_unknown_class(token) \
                    and (leaves is None or token in leaves):
                kind[i] = LEAF
        closable = {label[i] for i in range(size) if kind[i] == CLOSE}
        for i in range(size):
            if kind[i] == OPEN and label[i] not in closable:
                kind[i] = OTHER  # a constituent that could never be closed
        kind[tokenizer.eos_id] = EOS
        if OPEN not in kind or LEAF not in kind:
            raise UserError("decoder tree_beam: the target vocabulary has no opening brackets like '(S' or no "
                            "leaves like 'XX'; use it with the ptb task and a target-only vocabulary "
                            "([tokenizer] shared = false), and check [decode] leaf_tokens")
        self.kind = torch.tensor(kind)  # (V,)
        self.label = torch.tensor(label)  # (V,)
        tags = set(punctuation_tags)
        self.punct_leaf = torch.tensor([k == LEAF and tokenizer.id_to_token(i) in tags for i, k in enumerate(kind)])
        # before_leaf: what the model gives to "a word comes next" (all but brackets, eos, padding and bos)
        tokens = [tokenizer.id_to_token(i) for i in range(size)]
        self.word_like = torch.tensor([not (is_open(t) or is_close(t)) and i not in specials - {tokenizer.unk_id}
                                       for i, t in enumerate(tokens)])
        # XX leaves (or words as leaves) carry no punctuation tag to choose, so the rule would forbid every leaf
        self.punct_rule = bool(self.punct_leaf.any()) and words_in_target != "as_leaf"
        self.punctuation_words, self.either_words = set(punctuation_words), set(either_words)

    # ------------------------------------------------------------ search protocol

    def start(self, request: DecodeRequest, rows: torch.Tensor) -> None:
        """Fresh state for each row: nothing open, no leaf placed, the row's source word count to reach."""
        device = rows.device
        self.kind, self.label = self.kind.to(device), self.label.to(device)
        self.is_open = self.kind == OPEN  # (V,)
        self.is_close = self.kind == CLOSE
        self.is_leaf = self.kind == LEAF
        self.is_eos = self.kind == EOS
        words = torch.tensor([len(s.split()) for s in request.sources], dtype=torch.long, device=device)
        self.need = words[rows]  # (N,)
        n = rows.numel()
        self.words = self._word_ids(request.sources, device)[rows] if self.words_in_target != "none" else None
        self.punct_leaf, self.word_like = self.punct_leaf.to(device), self.word_like.to(device)
        self.word_class = self._word_classes(request.sources, device)[rows] if self.punct_rule else None
        # a word is due: after a leaf, its word (after_leaf), its tag (before_leaf) or the next word (ahead); ahead
        # also writes the first word before anything else
        self.completing = (self.need > 0) if self.words_in_target == "ahead" \
            else torch.zeros(n, dtype=torch.bool, device=device)
        # the search's limit: at most `limit` tokens before eos (see seqxduce.search.max_lengths)
        self.limit = max_lengths(request, *self.max_len)[rows] if self.max_len else None
        self.steps = torch.zeros(n, dtype=torch.long, device=device)
        self.depth = torch.zeros(n, dtype=torch.long, device=device)
        self.placed = torch.zeros(n, dtype=torch.long, device=device)
        self.empty = torch.zeros(n, dtype=torch.bool, device=device)
        self.done = torch.zeros(n, dtype=torch.bool, device=device)
        self.stack = torch.full((n, 16), -1, dtype=torch.long, device=device)  # (N, capacity) open labels
        self.advanced = 0  # tokens advanced so far, on the host

    def _word_ids(self, sources: list[str], device: torch.device) -> torch.Tensor:
        """(B, longest) target ids of each source's words, padded with -1."""
        encoded = [self.tokenizer.encode(source) for source in sources]
        for source, ids in zip(sources, encoded):
            if len(ids) != len(source.split()):
                raise UserError(f"decoder tree_beam: words_in_target = {self.words_in_target!r} needs one target token "
                                f"per source word, but the target tokenizer writes {len(ids)} for the "
                                f"{len(source.split())} words of {source[:60]!r}; use [tokenizer] name = 'word'")
        return padded(encoded, -1, device)

    def _word_classes(self, sources: list[str], device: torch.device) -> torch.Tensor:
        """(B, longest) per source word: NOT_PUNCT, PUNCT or EITHER (padding: EITHER)."""
        return padded([self._classes_of(source.split()) for source in sources], EITHER, device)

    def _classes_of(self, words: list[str]) -> list[int]:
        """A free word right after punctuation closes a quotation (`. '`: no possessive follows a full stop), so it
        takes a punctuation tag there."""
        classes = []
        for i, w in enumerate(words):
            after_punct = i > 0 and words[i - 1] in self.punctuation_words
            classes.append(PUNCT if w in self.punctuation_words or (w in self.either_words and after_punct)
                           else EITHER if w in self.either_words else NOT_PUNCT)
        return classes

    def _leaf_fits_word(self) -> torch.Tensor:
        """(N, V) True at the leaves whose punctuation status matches the next word's (all leaves without the rule)."""
        if self.word_class is None:
            return self.is_leaf.unsqueeze(0)
        # before_leaf: the tag is chosen after its word was placed
        word_at = self.placed - 1 if self.words_in_target == "before_leaf" else self.placed
        index = word_at.clamp(0, self.word_class.size(1) - 1).unsqueeze(1)
        word = self.word_class.gather(1, index)  # (N, 1)
        return self.is_leaf & ((word == EITHER) | (self.punct_leaf.unsqueeze(0) == (word == PUNCT)))

    def _forced_word(self) -> torch.Tensor:
        """(N,) the target id of the word each row writes next (the last placed leaf's, after_leaf; the next
        leaf's, ahead)."""
        index = self.placed - 1 if self.words_in_target == "after_leaf" else self.placed
        return self.words.gather(1, index.clamp(0, self.words.size(1) - 1).unsqueeze(1)).squeeze(1)

    def allowed(self) -> torch.Tensor:
        """(N, V) True where a token keeps the row on the way to a well-formed tree."""
        completing = self.completing.unsqueeze(1)
        if self.words_in_target in ("after_leaf", "ahead"):
            return self._allowed_structure() & ~completing | self._forced_mask(self.completing)
        if self.words_in_target == "before_leaf":
            return self._allowed_structure() & ~completing | completing & self._leaf_fits_word()
        return self._allowed_structure()

    def _forced_mask(self, rows: torch.Tensor) -> torch.Tensor:
        """(N, V) True at the forced word of each row in rows."""
        vocab = torch.arange(self.kind.numel(), device=rows.device)
        return rows.unsqueeze(1) & (vocab.unsqueeze(0) == self._forced_word().unsqueeze(1))

    def _allowed_structure(self) -> torch.Tensor:
        """(N, V) the brackets, leaves and eos that keep the row on the way to a well-formed tree."""
        inside = self.depth > 0
        room = self.placed < self.need  # every new constituent and leaf needs a word still unplaced
        top = self.stack.gather(1, (self.depth - 1).clamp(min=0).unsqueeze(1)).squeeze(1)  # (N,)
        # the root may close only when every word is placed, since nothing can follow it
        can_close = inside & ~self.empty & ((self.depth > 1) | ~room)
        fresh_empty_source = ~inside & ~self.done & (self.need == 0)
        can_open = ~self.done & room
        if self.limit is not None:
            # shortest completion after an open: the missing leaves (with their words), then a close per open bracket
            per_leaf = 2 if self.words_in_target in ("after_leaf", "before_leaf", "ahead") else 1
            can_open &= self.steps + 1 + per_leaf * (self.need - self.placed) + self.depth + 1 <= self.limit
        leaf = self._forced_mask(inside & room) if self.words_in_target in ("as_leaf", "before_leaf") \
            else (inside & room).unsqueeze(1) & self._leaf_fits_word()
        return (
            can_open.unsqueeze(1) & self.is_open
            | leaf
            | can_close.unsqueeze(1) & self.is_close & (self.label.unsqueeze(0) == top.unsqueeze(1))
            | (self.done | fresh_empty_source).unsqueeze(1) & self.is_eos
        )

    def mask(self, logprobs: torch.Tensor) -> torch.Tensor:
        """logprobs (N, V) with every token that would break the tree set to -inf; a forced word scores 0
        (after_leaf) or the probability of any word there (before_leaf)."""
        allowed = self.allowed()
        masked = logprobs.masked_fill(~allowed, float("-inf"))
        if self.words_in_target in ("after_leaf", "ahead"):
            # the word after a leaf is the source's, not a choice: scoring it would rank trees by word frequency
            masked = masked.masked_fill(self._forced_mask(self.completing), 0.0)
        elif self.words_in_target == "before_leaf":
            # placing a leaf is a choice, which word it carries is not: score "some word here", not this word
            any_word = logprobs.masked_fill(~self.word_like, float("-inf")).logsumexp(dim=1, keepdim=True)
            forced = self._forced_mask(~self.completing) & allowed
            masked = torch.where(forced, any_word.expand_as(masked), masked)
        return masked

    def advance(self, origin: torch.Tensor, tokens: torch.Tensor) -> None:
        """Row i continues old row origin[i] with tokens[i]: push, pop, or count a leaf."""
        self.need, self.depth, self.placed = self.need[origin], self.depth[origin], self.placed[origin]
        self.empty, self.done, self.stack = self.empty[origin], self.done[origin], self.stack[origin]
        self.steps = self.steps[origin] + 1
        if self.limit is not None:
            self.limit = self.limit[origin]
        if self.words is not None:
            self.words = self.words[origin]
        if self.word_class is not None:
            self.word_class = self.word_class[origin]
        kind = self.kind[tokens]  # (N,)
        # a leaf's second token (after_leaf: its word; before_leaf: its tag) is no bracket and no new leaf, whatever
        # its vocabulary entry looks like
        structural = ~self.completing[origin]
        opening = (kind == OPEN) & ~self.done & structural
        # a forbidden token only arrives on a row whose score is already -inf; keep its state sane
        closing = (kind == CLOSE) & (self.depth > 0) & structural
        if self.words_in_target in ("as_leaf", "before_leaf"):
            leaf = (tokens == self._forced_word()) & (kind != OPEN) & (kind != CLOSE) & (kind != EOS) & structural
        else:
            leaf = (kind == LEAF) & structural
        if self.words_in_target == "ahead":
            self.completing = leaf & (self.placed + 1 < self.need)  # the next word follows, unless this was the last
        else:
            self.completing = leaf & (self.words_in_target in ("after_leaf", "before_leaf"))
        # a row opens at most one bracket per token, so no row is deeper than the tokens advanced: the stack grows
        # by that count, known on the host, and the push is masked, so the device is never asked how deep rows are
        if self.advanced >= self.stack.size(1):
            self.stack = torch.cat([self.stack, torch.full_like(self.stack, -1)], dim=1)
        self.advanced += 1
        at = self.depth.unsqueeze(1)  # (N, 1) where a row's new open label goes
        self.stack.scatter_(1, at, torch.where(opening.unsqueeze(1), self.label[tokens].unsqueeze(1),
                                               self.stack.gather(1, at)))
        self.depth = self.depth + opening.long() - closing.long()
        self.placed = self.placed + leaf.long()
        # a closed child makes its parent non-empty, as a leaf does
        self.empty = torch.where(opening, True, torch.where(leaf | closing, False, self.empty))
        self.done = self.done | (closing & (self.depth == 0))
