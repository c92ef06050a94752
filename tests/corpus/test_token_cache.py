"""The tokenized-corpus cache: a second encoding of the same data with the same tokenizer files reads the ids
instead of tokenizing, anything that changes the ids changes the key, and a second run reads the first's cache."""

from __future__ import annotations

import pytest

from seqxduce.api import Example
from seqxduce.corpus import token_cache
from seqxduce.corpus.token_cache import encode_pairs_cached
from seqxduce.recipe import load_recipe
from seqxduce.training.run import assemble
from tests.tiny import TINY_RECIPE as RECIPE


class LengthTokenizer:
    """Ids are word lengths (+3); eos is 2. Counts its calls, so a test can see whether it tokenized."""

    eos_id = 2

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        return [len(w) + 3 for w in text.split()]


EXAMPLES = [Example("a bb ccc", "dddd e"), Example("ff", "g hh"), Example("i j k l m n o", "p")]


def test_a_second_encoding_reads_the_cache_and_gives_the_same_pairs(tmp_path):
    vocab = tmp_path / "tokenizer.vocab"
    vocab.write_text("words\n")
    tok = LengthTokenizer()
    first, skipped, read = encode_pairs_cached(EXAMPLES, tok, tok, 6, 6, [vocab], root=tmp_path / "cache")
    assert read is None and skipped == 1 and tok.calls == 6  # the 7-word source (8 with eos) is over 6
    again, skipped_again, read = encode_pairs_cached(EXAMPLES, tok, tok, 6, 6, [vocab], root=tmp_path / "cache")
    assert read is not None and tok.calls == 6  # nothing tokenized
    assert again == first and skipped_again == 1
    assert first[0].src == [4, 5, 6, 2] and first[0].tgt == [7, 4]


@pytest.mark.parametrize("change", ["data", "tokenizer", "limits"])
def test_what_changes_the_ids_changes_the_key(tmp_path, change):
    vocab = tmp_path / "tokenizer.vocab"
    vocab.write_text("words\n")
    tok = LengthTokenizer()
    encode_pairs_cached(EXAMPLES, tok, tok, 6, 6, [vocab], root=tmp_path / "cache")
    examples, limit = EXAMPLES, 6
    if change == "data":
        examples = [*EXAMPLES[:2], Example("i j", "p")]
    elif change == "tokenizer":
        vocab.write_text("other words\n")
    else:
        limit = 10
    _, _, read = encode_pairs_cached(examples, tok, tok, limit, limit, [vocab], root=tmp_path / "cache")
    assert read is None
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_a_second_run_on_the_same_data_does_not_tokenize_its_training_pairs(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    first = assemble(load_recipe(RECIPE, []), tmp_path / "first").plan

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(token_cache, "encode_pairs", no_tokenizing)
    second = assemble(load_recipe(RECIPE, []), tmp_path / "second").plan
    assert second.train_pairs == first.train_pairs
    off = assemble(load_recipe(RECIPE, ["train.token_cache=false"]), tmp_path / "off").plan  # the cache is not read
    assert off.train_pairs == first.train_pairs
