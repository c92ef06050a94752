"""The char and word tokenizers: a frequency-sorted vocabulary over characters or whitespace-split words."""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from seqxduce.api import Tokenizer

from .settings import VocabSettings, WordSettings
from .signatures import signature
from .vocab_file import read_vocab, write_vocab

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # at ids pad_id, bos_id, eos_id, unk_id


class VocabTokenizer(Tokenizer):
    """A tokenizer whose vocabulary is the training text's units, most frequent first, ties alphabetical."""

    def __init__(self, settings: VocabSettings | None = None):
        self.settings = settings or VocabSettings()
        self._tokens: list[str] | None = None
        self._ids: dict[str, int] = {}

    @abc.abstractmethod
    def split(self, text: str) -> list[str]:
        """Text to the units the vocabulary holds."""

    @abc.abstractmethod
    def join(self, tokens: list[str]) -> str:
        """Units back to text."""

    def train(self, texts: Iterable[str], workdir: Path) -> None:
        """Count units in texts and keep those above min_freq, at most max_size of them."""
        texts = list(texts)
        counts = Counter(token for text in texts for token in self.split(text))
        for special in SPECIALS:  # the text's own "<unk>" is an unknown word, not the special id
            counts.pop(special, None)
        frequent = (token for token, count in counts.items() if count >= self.settings.min_freq)
        kept = sorted(frequent, key=lambda token: (-counts[token], token))
        if self.settings.max_size > 0:
            kept = kept[: self.settings.max_size]
        self._set_tokens(SPECIALS + kept + self._unknown_classes(texts, set(kept)))

    def _unknown_classes(self, texts: Iterable[str], kept: set[str]) -> list[str]:
        """Vocabulary entries that stand for units outside it (none: they all become <unk>)."""
        return []

    def _unknown_id(self, unit: str, position: int) -> int:
        """The id of a unit outside the vocabulary, at its position in the text."""
        return self.unk_id

    def save(self, directory: Path, prefix: str) -> None:
        """Write directory/prefix.vocab."""
        write_vocab(Path(directory) / f"{prefix}.vocab", self._vocabulary())

    def load(self, directory: Path, prefix: str) -> None:
        """Read directory/prefix.vocab."""
        self._set_tokens(read_vocab(Path(directory) / f"{prefix}.vocab", SPECIALS))

    def encode(self, text: str) -> list[int]:
        """Text to ids; a unit outside the vocabulary (or spelled like a special token) becomes unk_id."""
        self._vocabulary()
        return [self._ids[token] if token in self._ids else self._unknown_id(token, position)
                for position, token in enumerate(self.split(text))]

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text; pad, bos and eos are dropped; unk is written <unk> so outputs keep their length."""
        tokens = self._vocabulary()
        dropped = (self.pad_id, self.bos_id, self.eos_id)
        return self.join([tokens[int(i)] for i in ids if int(i) not in dropped])

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return len(self._vocabulary())

    def id_to_token(self, index: int) -> str:
        """The vocabulary entry of one id."""
        return self._vocabulary()[index]

    def _set_tokens(self, tokens: list[str]) -> None:
        self._tokens = tokens
        # specials are left out so that text spelling "<s>" cannot inject a control id
        self._ids = {token: i for i, token in enumerate(tokens) if i >= len(SPECIALS)}

    def _vocabulary(self) -> list[str]:
        if self._tokens is None:
            raise RuntimeError(f"{type(self).__name__} has no vocabulary yet: call train() or load() first")
        return self._tokens


class CharTokenizer(VocabTokenizer):
    """One token per character, the space included, so decode(encode(text)) == text for known characters."""

    def split(self, text: str) -> list[str]:
        return list(text)

    def join(self, tokens: list[str]) -> str:
        return "".join(tokens)


class WordTokenizer(VocabTokenizer):
    """One token per whitespace-separated word; decoding joins words with single spaces. With unknown =
    "signature", a word outside the vocabulary becomes its class (seqxduce_text.signatures), when training saw it."""

    def __init__(self, settings: WordSettings | None = None):
        super().__init__(settings or WordSettings())

    def _unknown_classes(self, texts: Iterable[str], kept: set[str]) -> list[str]:
        if getattr(self.settings, "unknown", "unk") != "signature":
            return []
        seen = {signature(word, position == 0) for text in texts
                for position, word in enumerate(self.split(text)) if word not in kept}
        return sorted(seen - kept - set(SPECIALS))

    def _unknown_id(self, unit: str, position: int) -> int:
        if getattr(self.settings, "unknown", "unk") != "signature":
            return self.unk_id
        return self._ids.get(signature(unit, position == 0), self.unk_id)

    def split(self, text: str) -> list[str]:
        return text.split()

    def join(self, tokens: list[str]) -> str:
        return " ".join(tokens)
