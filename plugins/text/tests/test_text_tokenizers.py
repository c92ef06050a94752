"""The char and word tokenizers: vocabulary order, round trips, unknowns, specials and the vocab file."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys

import pytest
import seqxduce_text
from seqxduce_text.settings import VocabSettings, WordSettings
from seqxduce_text.signatures import signature
from seqxduce_text.tokenizers import CharTokenizer, WordTokenizer
from seqxduce_text.vocab_file import escape, unescape

from seqxduce.api import UserError
from seqxduce.registry import Registry, new_manager


def trained(cls, texts, tmp_path, **settings):
    tokenizer = cls(VocabSettings(**settings))
    tokenizer.train(texts, tmp_path)
    return tokenizer


def vocabulary(tokenizer) -> list[str]:
    return [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]


@pytest.mark.parametrize("cls", [CharTokenizer, WordTokenizer])
def test_special_ids_and_tokens(cls, tmp_path):
    tokenizer = trained(cls, ["a"], tmp_path)
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert vocabulary(tokenizer) == ["<pad>", "<s>", "</s>", "<unk>", "a"]


def test_word_ids_by_frequency_then_alphabetical(tmp_path):
    tokenizer = trained(WordTokenizer, ["b a c a", "c a d"], tmp_path)
    # a: 3, c: 2, then b and d once each, alphabetical
    assert vocabulary(tokenizer)[4:] == ["a", "c", "b", "d"]
    assert tokenizer.encode("d c a b") == [7, 5, 4, 6]


def test_char_ids_by_frequency_then_alphabetical(tmp_path):
    tokenizer = trained(CharTokenizer, ["ba a", "ab"], tmp_path)
    # a: 4, b: 2, space: 1
    assert vocabulary(tokenizer)[4:] == ["a", "b", " "]


@pytest.mark.parametrize("cls", [CharTokenizer, WordTokenizer])
def test_ids_do_not_depend_on_the_order_of_the_training_text(cls, tmp_path):
    texts = [f"w{i % 7} w{i % 3} x{i % 5}" for i in range(40)]
    shuffled = texts[:]
    random.Random(0).shuffle(shuffled)
    assert vocabulary(trained(cls, texts, tmp_path)) == vocabulary(trained(cls, iter(shuffled), tmp_path))


def test_char_round_trip_is_exact_spaces_included(tmp_path):
    text = "  héllo,\twörld \n 42  "
    tokenizer = trained(CharTokenizer, [text], tmp_path)
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)
    assert tokenizer.unk_id not in ids
    assert tokenizer.decode(ids) == text


def test_word_round_trip_normalises_whitespace(tmp_path):
    tokenizer = trained(WordTokenizer, ["3 2 1 + 4"], tmp_path)
    assert tokenizer.decode(tokenizer.encode("  3 2\t1 +  4 ")) == "3 2 1 + 4"
    assert len(tokenizer.encode("3 2 1 + 4")) == 5


@pytest.mark.parametrize("cls, text, decoded",
                         [(CharTokenizer, "abz", "ab<unk>"), (WordTokenizer, "a zz b", "a <unk> b")])
def test_unknown_units_map_to_unk_and_show_when_decoded(cls, text, decoded, tmp_path):
    tokenizer = trained(cls, ["a b"], tmp_path)
    ids = tokenizer.encode(text)
    assert ids.count(tokenizer.unk_id) == 1
    assert tokenizer.decode(ids) == decoded


def test_decode_drops_pad_bos_and_eos(tmp_path):
    tokenizer = trained(WordTokenizer, ["x y"], tmp_path)
    x, y = tokenizer.encode("x y")
    ids = [tokenizer.bos_id, x, tokenizer.pad_id, y, tokenizer.eos_id, tokenizer.pad_id]
    assert tokenizer.decode(ids) == "x y"


def test_text_spelling_a_special_token_is_unknown(tmp_path):
    tokenizer = trained(WordTokenizer, ["<s> a </s> <pad>"], tmp_path)
    assert vocabulary(tokenizer) == ["<pad>", "<s>", "</s>", "<unk>", "a"]
    assert tokenizer.encode("<s> a </s> <unk>") == [3, 4, 3, 3]


def test_min_freq_keeps_frequent_units(tmp_path):
    tokenizer = trained(WordTokenizer, ["a a a b b c"], tmp_path, min_freq=2)
    assert vocabulary(tokenizer)[4:] == ["a", "b"]
    assert tokenizer.encode("c") == [tokenizer.unk_id]


def test_max_size_keeps_the_most_frequent_besides_specials(tmp_path):
    tokenizer = trained(WordTokenizer, ["a a a c c b b d"], tmp_path, max_size=2)
    assert tokenizer.vocab_size == 6
    assert vocabulary(tokenizer)[4:] == ["a", "b"]  # b and c tie at 2: alphabetical


@pytest.mark.parametrize("cls", [CharTokenizer, WordTokenizer])
def test_save_then_load_gives_the_same_tokenizer(cls, tmp_path):
    texts = ["tab\there, new\nline \\u0041 back\\slash é 中文", "\u2028 line separator \x0b"]
    tokenizer = trained(cls, texts, tmp_path)
    tokenizer.save(tmp_path, "src")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.vocab"]
    lines = (tmp_path / "src.vocab").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == tokenizer.vocab_size
    assert lines[:4] == ["<pad>", "<s>", "</s>", "<unk>"]

    loaded = cls(VocabSettings())
    loaded.load(tmp_path, "src")
    assert vocabulary(loaded) == vocabulary(tokenizer)
    for text in texts:
        assert loaded.encode(text) == tokenizer.encode(text)


def test_the_vocab_file_escapes_whitespace_and_backslashes_only():
    assert escape(" ") == "\\u0020"
    assert escape("\n") == "\\u000a"
    assert escape("\\") == "\\\\"
    assert escape("\\u0041") == "\\\\u0041"
    assert escape("中é<s>") == "中é<s>"
    for token in [" ", "\n", "\r", "\t", "\\", "\\u0041", "\\\\n", "\u2028", "\U0001d11e", "a\\b", "\x00"]:
        assert "\n" not in escape(token) and " " not in escape(token)
        assert unescape(escape(token)) == token


def test_loading_a_file_without_the_specials_is_a_user_error(tmp_path):
    (tmp_path / "x.vocab").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"x\.vocab:1: a vocabulary starts with"):
        WordTokenizer().load(tmp_path, "x")


def test_loading_a_file_with_a_duplicate_names_its_line(tmp_path):
    (tmp_path / "x.vocab").write_text("<pad>\n<s>\n</s>\n<unk>\na\nb\na\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"x\.vocab:7: token 'a' already on line 5; remove one"):
        WordTokenizer().load(tmp_path, "x")


def test_loading_a_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        CharTokenizer().load(tmp_path, "missing")


def test_using_an_untrained_tokenizer_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"call train\(\) or load\(\) first"):
        WordTokenizer().encode("a")


@pytest.mark.parametrize("word, first, expected", [
    ("Running", False, "<unk-Cap-ing>"), ("Running", True, "<unk-INITC-ing>"), ("IBM", False, "<unk-CAPS>"),
    ("walked", False, "<unk-lc-ed>"), ("1,987", False, "<unk-NUM>"), ("ex-wife", False, "<unk-lc-DASH>"),
    ("cats", False, "<unk-lc-s>"), ("glass", False, "<unk-lc>"), ("electricity", False, "<unk-lc-ity>"),
    ("...", False, "<unk>"),
])
def test_signatures_classify_a_word_by_shape_and_suffix(word, first, expected):
    assert signature(word, first) == expected


def test_signature_unknowns_read_a_rare_word_as_its_class(tmp_path):
    tokenizer = WordTokenizer(WordSettings(min_freq=2, unknown="signature"))
    tokenizer.train(["the cat sat", "the cat jumped", "big Dogs walked 12 days"], tmp_path)
    ids = tokenizer.encode("the hopping cat played 1990 Cats ...")
    # "played" is unseen but its class was learnt from "jumped" and "walked", "Cats" from "Dogs"
    assert [tokenizer.id_to_token(i) for i in ids] == [
        "the", "<unk>", "cat", "<unk-lc-ed>", "<unk-NUM>", "<unk-Cap-s>", "<unk>"]
    # a class that training never saw (-ing) falls back to <unk>; so do classless words
    tokenizer.save(tmp_path, "tgt")
    loaded = WordTokenizer(WordSettings(min_freq=2, unknown="signature"))
    loaded.load(tmp_path, "tgt")
    assert loaded.encode("the hopping cat played 1990 Cats ...") == ids
    plain = WordTokenizer(WordSettings(min_freq=2))
    plain.train(["the cat sat", "the cat jumped", "big Dogs walked 12 days"], tmp_path)
    assert plain.encode("played") == [plain.unk_id] and plain.vocab_size == 6


def test_every_setting_has_help():
    for f in dataclasses.fields(WordSettings):
        assert f.metadata["help"], f.name


def test_registered_through_the_plugin_manager(tmp_path):
    pm = new_manager(entry_points=False)
    pm.register(seqxduce_text, name="text")
    try:
        registry = Registry(pm)
        assert registry.names("tokenizer") == ["char", "word"]
        char = registry.get("tokenizer", "char")
        word = registry.get("tokenizer", "word")
        assert char.settings is VocabSettings and word.settings is WordSettings
        assert isinstance(char.factory(VocabSettings()), CharTokenizer)
        tokenizer = word.factory(WordSettings(max_size=1))
        tokenizer.train(["b a a"], tmp_path)
        assert tokenizer.vocab_size == 5
    finally:
        pm.unregister(name="text")


def test_importing_the_plugin_does_not_import_torch():
    code = "import sys, seqxduce_text; assert 'torch' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
