"""The Transformer's and the Universal Transformer's attention maps (Model.attention_weights): probabilities over
the keys each position may see, recorded without changing what the fused attention computes."""

import pytest
import torch
from seqxduce_transformer.attention_maps import recording
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import VocabInfo

VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=0, bos_id=1, eos_id=2, shared=True)
SRC = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])  # (2, 5), the second row padded
TGT_IN = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0]])  # (2, 4)


def models():
    torch.manual_seed(0)
    yield Transformer(TransformerSettings(layers=2, d_model=16, d_ff=32, heads=2), VOCAB).eval()
    yield UniversalTransformer(UniversalSettings(d_model=16, d_ff=32, heads=2, act=True, act_max_steps=4,
                                                 act_halting_bias_init=-1.0), VOCAB).eval()


@pytest.mark.parametrize("model", list(models()), ids=["transformer", "universal"])
def test_attention_weights_are_probabilities_over_the_allowed_keys(model):
    weights = model.attention_weights(SRC, TGT_IN)
    assert weights.unit == ("layer" if isinstance(model, Transformer) else "depth step")
    assert len(weights.encoder) >= 1 and len(weights.decoder) == len(weights.cross) >= 1
    for w in weights.encoder:
        assert w.shape == (2, 2, 5, 5)
        assert torch.all(w[1, :, :, 3:] == 0)  # padding keys get nothing
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5))
    for w in weights.decoder:
        assert w.shape == (2, 2, 4, 4)
        assert torch.all(w.triu(1) == 0)  # no position sees a later one
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 4))
    for w in weights.cross:
        assert w.shape == (2, 2, 4, 5)
        assert torch.all(w[1, :, :, 3:] == 0)


@pytest.mark.parametrize("model", list(models()), ids=["transformer", "universal"])
def test_recording_computes_what_the_fused_attention_computes(model):
    expected = model(SRC, TGT_IN).logits
    modules = [m for m in model.modules() if hasattr(m, "recorded")]
    with recording(modules):
        recorded = model(SRC, TGT_IN).logits
        assert all(m.recorded for m in modules)
    torch.testing.assert_close(recorded, expected, rtol=1e-5, atol=1e-5)
    # outside the recording nothing is kept: decoding takes the fused path as before
    assert all(m.recorded is None for m in modules)


def test_universal_transformer_gives_one_map_per_depth_step():
    torch.manual_seed(0)
    model = UniversalTransformer(UniversalSettings(d_model=16, d_ff=32, heads=2, steps=3), VOCAB).eval()
    weights = model.attention_weights(SRC, TGT_IN)
    assert len(weights.encoder) == len(weights.decoder) == len(weights.cross) == 3
