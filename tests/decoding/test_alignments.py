"""`seqxduce decode --alignments`: Pharaoh word alignments from the encoder-decoder attention, on words, not pieces."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from seqxduce_sentencepiece import build_sentencepiece
from seqxduce_sentencepiece.settings import SentencePieceSettings
from seqxduce_text.tokenizers import CharTokenizer
from seqxduce_transformer.transformer import Transformer

from seqxduce.api import AttentionWeights, Model, UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.alignments import cross_attention, layer_of, pharaoh, word_alignment, word_of_pieces
from seqxduce.decoding.ensemble import EnsembleModel

WORDS = "the a cat dog sat on mat ran fast house big small red green blue".split()


def invoke(*args) -> object:
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """A sentencepiece BPE so small that most words are several pieces."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(200)]
    tokenizer = build_sentencepiece(SentencePieceSettings(vocab_size=40))
    tokenizer.train(texts, tmp_path_factory.mktemp("spm"))
    return tokenizer


def test_subword_pieces_map_to_the_words_they_spell(pieces):
    text = "the green house ran fast"
    ids = pieces.encode(text)
    assert len(ids) > len(text.split())  # several words are split into pieces
    words = word_of_pieces(pieces, ids)
    assert sorted(set(words)) == [0, 1, 2, 3, 4]
    assert words == sorted(words)  # pieces of a word are consecutive
    for index, word in enumerate(text.split()):  # each word's pieces spell it
        spelled = pieces.decode([i for i, w in zip(ids, words) if w == index])
        assert spelled == word


def test_a_space_token_goes_with_the_word_that_follows_it(tmp_path: Path):
    chars = CharTokenizer()
    chars.train(["ab cd "], tmp_path)
    assert word_of_pieces(chars, chars.encode("ab cd ")) == [0, 0, 1, 1, 1, None]


def test_word_alignment_sums_a_source_words_pieces_and_averages_a_target_words():
    # source pieces: w0 = (p0), w1 = (p1, p2); target pieces: w0 = (q0, q1), w1 = (q2)
    attention = torch.tensor([[0.5, 0.3, 0.2],   # q0: p0 alone is highest, but w1 gets 0.5 as well
                              [0.4, 0.35, 0.25],  # q1: w1 gets 0.6 -> on average w1 (0.55) beats w0 (0.45)
                              [0.6, 0.2, 0.2]])   # q2: w0
    links = word_alignment(attention, [0, 1, 1], [0, 0, 1])
    assert links == [(1, 0), (0, 1)]
    assert pharaoh(links) == "1-0 0-1"
    assert word_alignment(attention, [None, None, None], [0, 0, 1]) == []


def test_layers_count_from_one_and_from_the_end():
    assert layer_of(6, -2) == 4 and layer_of(6, 1) == 0 and layer_of(6, -1) == 5
    assert layer_of(1, -2) == 0  # a one-layer model: its only layer
    with pytest.raises(UserError, match=r"alignment_layer = 7: the model has 6 layers"):
        layer_of(6, 7)


class Fixed(Model):
    """A model whose cross-attention is given: one layer, (B, H, T, S)."""

    forward = encode = init_cache = step = reorder = None

    def __init__(self, cross: torch.Tensor):
        self.cross = cross

    def attention_weights(self, src, tgt_in):
        return AttentionWeights(encoder=[], decoder=[], cross=[self.cross])


def test_heads_are_averaged_and_an_ensemble_averages_its_members():
    a = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]])  # (1, 2 heads, 1, 2)
    b = torch.tensor([[[[0.0, 1.0]], [[0.0, 1.0]]]])
    src, tgt_in = torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long)
    torch.testing.assert_close(cross_attention(Fixed(a), src, tgt_in, -1, 0, "m"), torch.tensor([[[0.5, 0.5]]]))
    torch.testing.assert_close(cross_attention(Fixed(a), src, tgt_in, -1, 1, "m"), torch.tensor([[[1.0, 0.0]]]))
    both = EnsembleModel([Fixed(a), Fixed(b)])
    torch.testing.assert_close(cross_attention(both, src, tgt_in, -1, 0, "m"), torch.tensor([[[0.25, 0.75]]]))
    with pytest.raises(UserError, match=r"alignment_heads = 3: the model has 2 heads"):
        cross_attention(Fixed(a), src, tgt_in, -1, 3, "m")


def test_a_model_without_attention_weights_is_refused_naming_it():
    class Bare(Model):
        forward = encode = init_cache = step = reorder = None

    with pytest.raises(UserError, match=r"^run: model 'bare' does not expose its attention weights"):
        cross_attention(Bare(), torch.zeros(1, 1), torch.zeros(1, 1), -2, 0, "run: model 'bare'")


def test_decode_writes_one_alignment_line_per_output_line(tiny_run: Path, tmp_path: Path):
    sources = tmp_path / "src.txt"
    sources.write_text("1 2 3\n4 5\n6 7 8 9\n", encoding="utf-8")
    for extra, lines in (([], 3), (["--set", "decode.nbest=2"], 6)):
        out, links = tmp_path / "out.txt", tmp_path / "align.txt"
        result = invoke("decode", tiny_run, "--input", sources, "--output", out, "--alignments", links,
                        "--set", "decode.max_len_b=5", *extra)
        assert result.exit_code == 0, result.output
        outputs = out.read_text().splitlines()
        aligned = links.read_text().splitlines()
        assert len(outputs) == len(aligned) == lines
        for output, alignment in zip(outputs, aligned):
            text = output.split("\t")[-1]
            source = ["1 2 3", "4 5", "6 7 8 9"][int(output.split("\t")[0])] if extra else None
            pairs = [tuple(map(int, link.split("-"))) for link in alignment.split()]
            assert [t for _, t in pairs] == list(range(len(text.split())))  # every target word, once, in order
            if source is not None:
                assert all(0 <= s < len(source.split()) for s, _ in pairs)


def test_a_learned_copy_aligns_each_word_with_itself(trained_copy_run: Path, tmp_path: Path):
    sources = tmp_path / "src.txt"
    sources.write_text("1 2 3 4 5\n7 3 9 1\n5 5 2 8 6 4 1\n", encoding="utf-8")
    out, links = tmp_path / "out.txt", tmp_path / "align.txt"
    result = invoke("decode", trained_copy_run, "--input", sources, "--output", out, "--alignments", links)
    assert result.exit_code == 0, result.output
    for source, output, alignment in zip(sources.read_text().splitlines(), out.read_text().splitlines(),
                                         links.read_text().splitlines()):
        if output == source:  # the copy is right: each output word was read from its own source word
            assert alignment == " ".join(f"{i}-{i}" for i in range(len(source.split())))


def test_alignments_of_a_model_without_attention_weights_are_refused(tiny_run: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(Transformer, "attention_weights", lambda self, src, tgt_in: None)
    sources = tmp_path / "src.txt"
    sources.write_text("1 2 3\n", encoding="utf-8")
    result = invoke("decode", tiny_run, "--input", sources, "--alignments", tmp_path / "align.txt")
    assert result.exit_code != 0
    assert "model [model] name = 'transformer' does not expose its attention weights" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "align.txt").exists()


def test_alignment_settings_are_checked_and_shown(tiny_run: Path, tmp_path: Path):
    sources = tmp_path / "src.txt"
    sources.write_text("1 2 3\n", encoding="utf-8")
    result = invoke("decode", tiny_run, "--input", sources, "--alignments", tmp_path / "a.txt",
                    "--set", "decode.alignment_layer=0")
    assert result.exit_code != 0 and "alignment_layer = 0: layers count from 1" in result.output
    result = invoke("decode", tiny_run, "--input", sources, "--alignments", tmp_path / "a.txt",
                    "--set", "decode.alignment_heads=-1")
    assert result.exit_code != 0 and "alignment_heads" in result.output
    shown = invoke("recipe", "show", tiny_run / "recipe.toml")
    assert shown.exit_code == 0, shown.output
    assert "alignment_layer = -2" in shown.output and "alignment_heads = 0" in shown.output
    assert "--alignments" in invoke("decode", "--help").output
