"""seqxduce plugin: the `char` and `word` tokenizers, with a vocabulary built from the training text."""

from __future__ import annotations

from typing import Any

from seqxduce_text.settings import VocabSettings, WordSettings

from seqxduce import hookimpl

__all__ = ["VocabSettings", "WordSettings", "build_char", "build_word", "register_tokenizers"]


def build_char(settings: VocabSettings) -> Any:
    """Build the character tokenizer."""
    from seqxduce_text.tokenizers import CharTokenizer

    return CharTokenizer(settings)


def build_word(settings: WordSettings) -> Any:
    """Build the whitespace word tokenizer."""
    from seqxduce_text.tokenizers import WordTokenizer

    return WordTokenizer(settings)


@hookimpl
def register_tokenizers(register):
    """Register the `char` and `word` tokenizers."""
    register("char", build_char, settings=VocabSettings,
             help="one token per character (spaces included); vocabulary from the training text")
    register("word", build_word, settings=WordSettings,
             help="one token per whitespace-separated word; vocabulary from the training text")
