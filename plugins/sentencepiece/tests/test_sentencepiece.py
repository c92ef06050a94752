"""The sentencepiece tokenizer plugin: training, special ids, save/load, round trip, errors."""

import random
import subprocess
import sys

import pytest
from seqxduce_sentencepiece import build_sentencepiece, register_tokenizers
from seqxduce_sentencepiece.settings import SentencePieceSettings

from seqxduce.api import Tokenizer, UserError

WORDS = "the a cat dog sat on mat ran fast house big small red green blue über straße".split()


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) for _ in range(n)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tokenizer = build_sentencepiece(SentencePieceSettings(vocab_size=100))
    tokenizer.train(corpus(), tmp_path_factory.mktemp("work"))
    return tokenizer


def test_registers_under_its_name():
    seen = {}
    register_tokenizers(register=lambda name, factory, **kw: seen.update({name: (factory, kw)}))
    factory, kw = seen["sentencepiece"]
    assert factory is build_sentencepiece and kw["settings"] is SentencePieceSettings and kw["help"]


def test_import_does_not_load_sentencepiece():
    code = "import sys, seqxduce_sentencepiece; print('sentencepiece' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_special_ids_and_vocab_size(trained):
    assert isinstance(trained, Tokenizer)
    assert (trained.pad_id, trained.bos_id, trained.eos_id, trained.unk_id) == (0, 1, 2, 3)
    assert [trained.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert trained.vocab_size == 100


def test_round_trip_and_specials_dropped(trained):
    for line in corpus(20, seed=1):
        ids = trained.encode(line)
        assert min(ids) >= 4  # no special ids in ordinary text
        assert trained.decode(ids) == line
    ids = trained.encode("the big cat")
    assert trained.decode([1, *ids, 2, 0, 0]) == "the big cat"


def test_unknown_character_maps_to_unk(trained):
    assert 3 in trained.encode("the 猫")


def test_save_load_gives_the_same_tokenizer(trained, tmp_path):
    trained.save(tmp_path, "spm.src")
    assert (tmp_path / "spm.src.model").is_file()
    vocab = (tmp_path / "spm.src.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 100 and vocab[0].split("\t")[0] == "<pad>"
    loaded = build_sentencepiece(SentencePieceSettings())
    loaded.load(tmp_path, "spm.src")
    line = "a red dog ran on the mat"
    assert loaded.encode(line) == trained.encode(line)
    assert loaded.vocab_size == 100 and loaded.id_to_token(5) == trained.id_to_token(5)


def test_training_is_deterministic(tmp_path):
    a, b = (build_sentencepiece(SentencePieceSettings(vocab_size=40, model_type="unigram")) for _ in range(2))
    a.train(corpus(), tmp_path)
    b.train(corpus(), tmp_path)
    assert [a.id_to_token(i) for i in range(40)] == [b.id_to_token(i) for i in range(40)]


def test_vocab_too_large_is_a_user_error(tmp_path):
    tokenizer = build_sentencepiece(SentencePieceSettings(vocab_size=5000))
    with pytest.raises(UserError, match="vocab_size"):
        tokenizer.train(corpus(50), tmp_path)


def test_load_missing_and_untrained_are_user_errors(tmp_path):
    tokenizer = build_sentencepiece(SentencePieceSettings())
    with pytest.raises(UserError, match="spm.model: no such file"):
        tokenizer.load(tmp_path, "spm")
    with pytest.raises(UserError, match="train"):
        tokenizer.encode("x")


def test_exports_its_model_for_hugging_face(trained, tmp_path):
    """`export --to huggingface`: the model as Marian's source.spm / target.spm; no file for another engine."""
    assert trained.export("huggingface", tmp_path, "source")
    assert (tmp_path / "source.spm").read_bytes() == trained.model_proto
    assert not trained.export("ctranslate2", tmp_path, "target")
    assert not (tmp_path / "target.spm").exists()


def test_language_tags_marian_does_not_keep_whole_are_refused(tmp_path):
    """Johnson et al.'s <2de> is a piece of its own here, which Hugging Face's MarianTokenizer would cut otherwise
    (a '▁' before it); Marian's leading >>de<< it keeps whole."""
    tagged = build_sentencepiece(SentencePieceSettings(vocab_size=100))
    tagged.reserved_symbols = ("<2de>",)
    tagged.train(corpus(), tmp_path)
    with pytest.raises(UserError, match="<2de>.*lang_tag_format"):
        tagged.export("huggingface", tmp_path, "source")
    assert not (tmp_path / "source.spm").exists()
    marian = build_sentencepiece(SentencePieceSettings(vocab_size=100))
    marian.reserved_symbols = (">>de<<",)
    marian.train(corpus(), tmp_path)
    assert marian.export("huggingface", tmp_path, "source")
