"""The Transformer as a Hugging Face MarianMTModel (hf_export.py): every variant Marian computes gives
transformers the same log-probabilities as our model (interleaved sinusoids through renumbered dimensions);
what no transformers class computes is refused in one line before anything is written."""

from __future__ import annotations

import pytest
import torch
from seqxduce_transformer.hf_export import residual_order
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import ExportRequest, UserError, VocabInfo
from seqxduce.decoding.search_settings import BeamSettings

transformers = pytest.importorskip("transformers", reason="transformers is not installed (the `test` extra)")

SIZE = 23
TOKENS = ("<pad>", "<s>", "</s>", "<unk>", *(f"w{i}" for i in range(4, SIZE)))


def model_of(seed: int = 0, **extra) -> Transformer:
    """A random model whose norms and biases are not at their init either (a swapped one shows)."""
    torch.manual_seed(seed)
    settings = TransformerSettings(d_model=16, d_ff=32, heads=2, layers=2, dropout=0.0, **extra)
    model = Transformer(settings, VocabInfo(src_size=SIZE, tgt_size=SIZE, pad_id=0, bos_id=1, eos_id=2, shared=True))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
        if model.embeddings.output_bias is not None:
            model.embeddings.output_bias.normal_()
    return model.eval()


def export(model, directory, search=None) -> ExportRequest:
    request = ExportRequest("huggingface", directory, TOKENS, TOKENS, 0, 1, 2, 3, decoder="beam",
                            search=search or BeamSettings())
    assert model.export(request)
    return request


VARIANTS = {
    "paper (interleaved sinusoids)": dict(),
    "Marian's halves": dict(sinusoid_layout="halves"),
    "separate embeddings, untied output, gelu_tanh": dict(share_embeddings=False, tie_output=False,
                                                          activation="gelu_tanh"),
    "unscaled embeddings, output bias, swish, 3/1 layers": dict(scale_embeddings=False, output_bias=True,
                                                                activation="swish", encoder_layers=3,
                                                                decoder_layers=1),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_marian_gives_our_log_probs(variant, tmp_path):
    from transformers import MarianMTModel

    model = model_of(**VARIANTS[variant])
    export(model, tmp_path)
    hf = MarianMTModel.from_pretrained(tmp_path).eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 16]])
    with torch.no_grad():
        ours = model(src, tgt).logits.log_softmax(-1)
        theirs = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits.log_softmax(-1)
    gap = (ours - theirs).abs().max().item()
    if VARIANTS[variant].get("sinusoid_layout") == "halves":
        assert gap == 0.0  # the same sums in the same order
    else:
        assert gap < 1e-5  # the sums of renumbered dimensions in another order


def test_two_vocabularies_are_marian_s_separate_vocabs(tmp_path):
    """[tokenizer] shared = false: vocab.json and target_vocab.json, unshared embeddings of their own sizes."""
    import json

    from transformers import MarianMTModel

    torch.manual_seed(0)
    settings = TransformerSettings(d_model=16, d_ff=32, heads=2, layers=1, dropout=0.0, share_embeddings=False)
    model = Transformer(settings, VocabInfo(src_size=SIZE, tgt_size=19, pad_id=0, bos_id=1, eos_id=2,
                                            shared=False)).eval()
    target = ("<pad>", "<s>", "</s>", "<unk>", *(f"t{i}" for i in range(4, 19)))
    assert model.export(ExportRequest("huggingface", tmp_path, TOKENS, target, 0, 1, 2, 3))
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["vocab_size"], config["decoder_vocab_size"]) == (SIZE, 19)
    assert not config["share_encoder_decoder_embeddings"] and config["tie_word_embeddings"]
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["separate_vocabs"]
    assert list(json.loads((tmp_path / "target_vocab.json").read_text())) == list(target)
    hf = MarianMTModel.from_pretrained(tmp_path).eval()
    src, tgt = torch.tensor([[5, 6, 22, 2]]), torch.tensor([[1, 11, 18]])
    with torch.no_grad():
        gap = (model(src, tgt).logits - hf(input_ids=src, decoder_input_ids=tgt).logits).abs().max().item()
    assert gap < 1e-5


def test_residual_order_turns_interleaved_sinusoids_into_halves():
    from seqxduce_transformer.embedding import sinusoid_table

    model = model_of()
    interleaved = sinusoid_table(50, 16)[:, residual_order(model)]
    assert torch.allclose(interleaved, sinusoid_table(50, 16, "halves"), atol=1e-6)


def test_generation_config_says_the_run_s_search(tmp_path):
    import json

    request = export(model_of(), tmp_path, BeamSettings(beam=5, alpha=1.0, length_penalty="power", max_len_a=0,
                                                        max_len_b=30, limit_eos="free", early_stopping=False))
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["num_beams"] == 5 and generation["length_penalty"] == 1.0
    assert generation["max_new_tokens"] == 31 and generation["early_stopping"] is False
    assert generation["decoder_start_token_id"] == 1 and generation["bad_words_ids"] == [[0], [1]]
    assert not [note for note in request.notes if note.startswith("generation")]
    # the default GNMT penalty has no generate() counterpart: the closest, and a note for the model card
    (tmp_path / "gnmt").mkdir()
    request = export(model_of(), tmp_path / "gnmt")
    assert any("gnmt" in note for note in request.notes)


REFUSED = {
    "pre-norm": (dict(norm="pre"), "[model] norm = 'pre'"),
    "learned positions": (dict(positions="learned", max_positions=64), "[model] positions = 'learned'"),
    "source bos": (dict(source_bos=True), "[model] source_bos = true"),
    "d_k": (dict(d_k=6, d_v=6), "[model] d_k = 6"),
    "band attention": (dict(attention_window=2), "[model] attention_window = 2"),
}


@pytest.mark.parametrize("variant", list(REFUSED))
def test_what_marian_cannot_compute_is_refused_before_writing(variant, tmp_path):
    extra, named = REFUSED[variant]
    with pytest.raises(UserError) as refused:
        export(model_of(**extra), tmp_path)
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert not any(tmp_path.iterdir())


def test_universal_transformer_is_refused(tmp_path):
    settings = UniversalSettings(d_model=16, d_ff=32, heads=2, steps=2, dropout=0.0)
    model = UniversalTransformer(settings, VocabInfo(src_size=SIZE, tgt_size=SIZE, pad_id=0, bos_id=1, eos_id=2,
                                                     shared=True))
    with pytest.raises(UserError, match="universal_transformer"):
        export(model, tmp_path)
    assert not any(tmp_path.iterdir())
