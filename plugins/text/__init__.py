"""seqxduce plugin: the `char` and `word` tokenizers, with a vocabulary built from the training text."""

from __future__ import annotations

from seqxduce import hookimpl
from seqxduce.api import Tokenizer

from .settings import VocabSettings, WordSettings

__all__ = ["VocabSettings", "WordSettings", "build_char", "build_word", "register_tokenizers"]


def build_char(settings: VocabSettings) -> Tokenizer:
    """Build the character tokenizer."""
    from .tokenizers import CharTokenizer

    return CharTokenizer(settings)


def build_word(settings: WordSettings) -> Tokenizer:
    """Build the whitespace word tokenizer."""
    from .tokenizers import WordTokenizer

    return WordTokenizer(settings)


@hookimpl
def register_tokenizers(register):
    """Register the `char` and `word` tokenizers."""
    register("char", build_char, settings=VocabSettings,
             help="one token per character (spaces included); vocabulary from the training text")
    register("word", build_word, settings=WordSettings,
             help="one token per whitespace-separated word; vocabulary from the training text")
