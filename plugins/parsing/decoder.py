"""The `tree_beam` decoder: the core's beam search under the tree constraint."""

from __future__ import annotations

from seqxduce.api import Decoder, DecodeRequest, Hypothesis, Model, Tokenizer
from seqxduce.search import beam_search

from .constraint import TreeConstraint
from .linearize import PLACEHOLDER
from .settings import PTB_POS_TAGS, TreeBeamSettings

# the modes whose target vocabulary holds the words beside the tags
WORDS_BESIDE_TAGS = ("after_leaf", "before_leaf", "ahead")


def leaves(settings: TreeBeamSettings) -> list[str] | None:
    """The entries a leaf may be: [decode] leaf_tokens; else, when the words share the target vocabulary with the
    tags, the treebank's tags and XX (the constraint would otherwise take every word of that vocabulary as a
    possible tag); else None, every entry that is no bracket or special."""
    if settings.leaf_tokens:
        return settings.leaf_tokens
    return PTB_POS_TAGS + [PLACEHOLDER] if settings.words_in_target in WORDS_BESIDE_TAGS else None


class TreeBeamDecoder(Decoder):
    """Beam search (GNMT length penalty) that only produces well-formed linearized trees (unless constrained is
    off, which leaves the plain beam search for comparison)."""

    def __init__(self, settings: TreeBeamSettings, tokenizer: Tokenizer):
        self.settings = settings
        self.constraint: TreeConstraint | None = None
        if settings.constrained:
            self.constraint = TreeConstraint(tokenizer, leaf_tokens=leaves(settings),
                                             max_len_a=settings.max_len_a, max_len_b=settings.max_len_b,
                                             words_in_target=settings.words_in_target,
                                             punctuation_tags=settings.punctuation_tags,
                                             punctuation_words=settings.punctuation_words,
                                             either_words=settings.either_words)

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        return beam_search(model, request, self.settings, constraint=self.constraint)
