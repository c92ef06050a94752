"""The `tree_beam` decoder: the core's beam search under the tree constraint."""

from __future__ import annotations

from seqxduce.api import Decoder, DecodeRequest, Hypothesis, Model, Tokenizer
from seqxduce.search import beam_search

from .constraint import TreeConstraint
from .settings import TreeBeamSettings


class TreeBeamDecoder(Decoder):
    """Beam search (GNMT length penalty) that only produces well-formed linearized trees (unless constrained is
    off, which leaves the plain beam search for comparison)."""

    def __init__(self, settings: TreeBeamSettings, tokenizer: Tokenizer):
        self.settings = settings
        self.constraint: TreeConstraint | None = None
        if settings.constrained:
            self.constraint = TreeConstraint(tokenizer, leaf_tokens=settings.leaf_tokens or None,
                                             max_len_a=settings.max_len_a, max_len_b=settings.max_len_b,
                                             words_in_target=settings.words_in_target,
                                             punctuation_tags=settings.punctuation_tags,
                                             punctuation_words=settings.punctuation_words,
                                             either_words=settings.either_words)

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        return beam_search(model, request, self.settings, constraint=self.constraint)
