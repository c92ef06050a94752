"""Character-aware source embeddings ([model] char_ngrams): the n-grams, their index, the embedding they add,
and a model trained and decoded with them through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from seqxduce_transformer.char_ngrams import NgramSpec, bucket, ngram_index, ngrams
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import UserError, VocabInfo
from seqxduce.cli import add_plugin_commands

ENTRIES = ("<pad>", "<s>", "</s>", "<unk>", "walking", "Walked", "talking", "<unk-lc-ing>", "x", "cat", "CAT")
VOCAB = VocabInfo(src_size=len(ENTRIES), tgt_size=9, pad_id=0, bos_id=1, eos_id=2, shared=False,
                  src_tokens=ENTRIES)
TINY_RECIPE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "tiny.toml"


def test_ngrams_are_those_of_the_lower_cased_word_between_boundary_marks():
    assert ngrams("Cats", 3, 3) == ["<ca", "cat", "ats", "ts>"]
    assert ngrams("cat", 3, 5) == ["<ca", "cat", "at>", "<cat", "cat>", "<cat>"]
    assert ngrams("x", 3, 4) == ["<x>"]
    assert ngrams("aaaa", 2, 2) == ["<a", "aa", "a>"]  # each n-gram once


def test_an_unknown_word_class_shares_its_suffix_ngrams_with_the_known_words_of_that_suffix():
    assert {"ing", "ng>"} <= set(ngrams("<unk-lc-ing>", 3, 3)) & set(ngrams("walking", 3, 3))


def test_the_index_pads_with_the_padding_row_counts_the_ngrams_and_skips_the_named_ids():
    spec = NgramSpec(3, 4, buckets=1000)
    index, counts = ngram_index(("<pad>", "cat", "x"), spec, skip={0})
    assert index.shape[0] == 3 and (index[0] == 1000).all()
    cat = sorted({bucket(g, 1000) for g in ngrams("cat", 3, 4)})
    assert index[1, :len(cat)].tolist() == cat and (index[1, len(cat):] == 1000).all()
    assert counts.squeeze(1).tolist() == [1.0, float(len(cat)), 1.0]
    assert bucket("cat", 1 << 20) == 0x9E5E43A8 % (1 << 20)  # crc32("cat"): the same in every process


def _model(**settings) -> Transformer:
    torch.manual_seed(0)
    values = dict(layers=1, d_model=8, d_ff=16, heads=2, dropout=0.0, char_ngrams=4, char_ngram_buckets=97)
    values.update(settings)
    return Transformer(TransformerSettings(**values), VOCAB).eval()


def test_a_source_embedding_is_the_word_vector_plus_the_mean_of_its_ngram_vectors():
    model = _model()
    emb = model.embeddings
    ids = torch.tensor([[4, 7, 0]])
    got = emb.embed_source(ids)
    for position, entry_id in enumerate(ids[0].tolist()):
        rows = sorted({bucket(g, 97) for g in ngrams(ENTRIES[entry_id], 3, 4)})
        spelling = emb.spelling.table.weight[rows].mean(0) if entry_id != 0 else torch.zeros(8)
        want = (emb.source.weight[entry_id] + spelling) * emb.scale
        torch.testing.assert_close(got[0, position], want)
    assert got[0, 2].abs().sum() == 0  # padding stays a zero vector


def test_entries_spelled_alike_up_to_case_share_their_spelling_vector_and_it_is_trained():
    model = _model().train()
    spelled = model.embeddings.spelling(torch.tensor([[9, 10]]))
    torch.testing.assert_close(spelled[0, 0], spelled[0, 1])  # "cat" and "CAT"
    src = torch.tensor([[4, 5, 6, 7]])
    tgt = torch.tensor([[1, 3, 4, 5]])
    model(src, tgt).logits.sum().backward()
    grad = model.embeddings.spelling.table.weight.grad
    assert grad is not None and grad[:-1].abs().sum() > 0 and grad[-1].abs().sum() == 0  # the padding row: none


def test_the_universal_transformer_takes_the_same_option():
    torch.manual_seed(0)
    model = UniversalTransformer(UniversalSettings(d_model=8, d_ff=16, heads=2, steps=2, char_ngrams=3), VOCAB)
    assert model.embeddings.spelling is not None
    assert model(torch.tensor([[4, 5]]), torch.tensor([[1, 3]])).logits.shape == (1, 2, 9)


def test_a_model_without_the_spellings_of_its_source_entries_is_refused_with_the_fix():
    bare = VocabInfo(src_size=20, tgt_size=20, pad_id=0, bos_id=1, eos_id=2, shared=True)
    with pytest.raises(UserError, match="char_ngrams = 4: the model needs the spelling of its 20 source"):
        Transformer(TransformerSettings(layers=1, d_model=8, d_ff=16, heads=2, char_ngrams=4), bare)


def test_a_longest_ngram_below_the_shortest_is_refused():
    with pytest.raises(UserError, match="char_ngrams = 2 is below char_ngrams_min = 3"):
        TransformerSettings(char_ngrams=2).validate()


def test_a_recipe_trains_and_decodes_with_character_ngrams(tmp_path):
    """The trainer and decode build the model from the saved tokenizers' entries: the same n-gram index, so the
    checkpoint loads and decoding runs."""
    out = tmp_path / "run"
    runner = CliRunner()
    cli = add_plugin_commands()
    trained = runner.invoke(cli, ["train", str(TINY_RECIPE), "--out", str(out), "--set", "model.char_ngrams=4",
                                  "--set", "model.char_ngram_buckets=64", "--set", "train.max_steps=4"])
    assert trained.exit_code == 0, trained.output
    state = torch.load(out / "checkpoints" / "step_00000004.pt", map_location="cpu", weights_only=False)
    weights = state["model"] if "model" in state else state
    assert any("spelling.table.weight" in key for key in weights)
    decoded = runner.invoke(cli, ["decode", str(out), "--split", "test"])
    assert decoded.exit_code == 0, decoded.output
