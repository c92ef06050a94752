"""The Table 3 settings of the transformer plugin: per-head d_k / d_v, learned positions (row E) and restricted
self-attention (paper sec. 4), for the Transformer and the Universal Transformer."""

from __future__ import annotations

import math

import pytest
import torch
from seqxduce_transformer.attention import MultiHeadAttention, band_mask, encoder_self_mask
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import UserError, VocabInfo
from seqxduce.recipe import build_recipe
from seqxduce.registry import registry

PAD, BOS, EOS = 0, 1, 2
VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=PAD, bos_id=BOS, eos_id=EOS, shared=True)


def transformer(seed: int = 0, **overrides) -> Transformer:
    """A 2-layer, width-16 Transformer in eval mode."""
    torch.manual_seed(seed)
    values = dict(layers=2, d_model=16, d_ff=32, heads=2, dropout=0.1)
    values.update(overrides)
    return Transformer(TransformerSettings(**values), VOCAB).eval()


def universal(seed: int = 0, **overrides) -> UniversalTransformer:
    """A width-16 Universal Transformer in eval mode."""
    torch.manual_seed(seed)
    values = dict(steps=3, act_max_steps=4, d_model=16, d_ff=32, heads=2, dropout=0.1)
    values.update(overrides)
    return UniversalTransformer(UniversalSettings(**values), VOCAB).eval()


def batch(seed: int = 1, length: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    """src (3, length) with row 0 padded after 5 tokens; tgt_in (3, length) from bos, row 2 padded after 6."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 20, (3, length), generator=g)
    src[0, 5:] = PAD
    tgt = torch.randint(3, 20, (3, length), generator=g)
    tgt[:, 0] = BOS
    tgt[2, 6:] = PAD
    return src, tgt


def masked_attention(mha: MultiHeadAttention, x: torch.Tensor, context: torch.Tensor,
                     allowed: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k) with -inf where not allowed) V, written out without SDPA."""
    batch_size, length, _ = x.shape
    query = mha.query(x).view(batch_size, length, mha.heads, mha.d_k).transpose(1, 2)  # (B, H, Lq, d_k)
    key, value = mha.project_kv(context)
    scores = query @ key.transpose(-1, -2) / math.sqrt(mha.d_k)  # (B, H, Lq, Lk)
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = scores.softmax(dim=-1) @ value  # (B, H, Lq, d_v)
    return mha.out(out.transpose(1, 2).reshape(batch_size, length, mha.heads * mha.d_v))


# ------------------------------------------------------------------ d_k and d_v


def test_heads_get_their_own_query_key_and_value_widths():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, heads=3, d_k=5, d_v=7).eval()
    assert mha.query.weight.shape == (15, 16)
    assert mha.key_value.weight.shape == (3 * (5 + 7), 16)
    assert mha.out.weight.shape == (16, 21)
    x, context = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    key, value = mha.project_kv(context)
    assert key.shape == (2, 3, 6, 5) and value.shape == (2, 3, 6, 7)
    everything = torch.ones(4, 6, dtype=torch.bool)
    torch.testing.assert_close(mha(x, context), masked_attention(mha, x, context, everything), rtol=0, atol=1e-5)


def test_default_head_widths_split_d_model():
    mha = MultiHeadAttention(d_model=16, heads=4)
    assert (mha.d_k, mha.d_v) == (4, 4)
    assert mha.key_value.weight.shape == (32, 16)  # the (2C, C) matrix of checkpoints from before d_k / d_v


def test_row_a_single_head_of_full_width_and_row_b_small_keys_build_and_count_parameters():
    one_head = transformer(heads=1, d_k=16, d_v=16)
    eight = transformer(heads=8, d_k=2, d_v=2)
    base = transformer(heads=2)
    assert sum(p.numel() for p in one_head.parameters()) == sum(p.numel() for p in base.parameters())
    assert sum(p.numel() for p in eight.parameters()) == sum(p.numel() for p in base.parameters())
    small_keys = transformer(heads=2, d_k=4)  # keys of width 4 instead of 8: H * d_k drops from 16 to 8
    per_attention = 2 * (8 * 16 + 8)  # the query and the key projections each lose 8 rows and 8 biases
    fewer = 6 * per_attention  # 2 encoder self-, 2 decoder self- and 2 cross-attentions
    assert sum(p.numel() for p in base.parameters()) - sum(p.numel() for p in small_keys.parameters()) == fewer


def test_heads_need_not_divide_d_model_when_d_k_and_d_v_are_set():
    with pytest.raises(UserError, match="heads = 3 does not divide d_model = 16.*set d_k and d_v"):
        transformer(heads=3)
    with pytest.raises(UserError, match="heads = 3 does not divide"):
        transformer(heads=3, d_k=4)
    model = transformer(heads=3, d_k=4, d_v=6)
    src, tgt = batch()
    assert model(src, tgt).logits.shape == (3, 9, 20)


@pytest.mark.parametrize("key", ["d_k", "d_v", "attention_window"])
def test_negative_widths_are_a_user_error_naming_the_key(key):
    data = {"task": {"name": "algorithmic"}, "tokenizer": {"name": "word"},
            "model": {"name": "transformer", "d_model": 16, "heads": 2, key: -1}}
    with pytest.raises(UserError, match=rf"\[model\] {key} = -1"):
        build_recipe(data, reg=registry())


# ------------------------------------------------------------------ restricted self-attention


def test_band_mask_is_the_window_around_each_query():
    for causal in (False, True):
        band = band_mask(6, 2, causal=causal)
        for i in range(6):
            for j in range(6):
                inside = (0 <= i - j <= 2) if causal else (abs(i - j) <= 2)
                assert bool(band[i, j]) == inside, (causal, i, j)


def test_restricted_encoder_attention_equals_a_masked_full_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, heads=2, d_k=6, d_v=5).eval()
    x = torch.randn(3, 8, 16)
    pad = torch.zeros(3, 8, dtype=torch.bool)
    pad[0, 5:] = True
    pad[1, 7:] = True
    allowed = torch.zeros(3, 1, 8, 8, dtype=torch.bool)
    for b in range(3):
        for i in range(8):
            for j in range(8):
                allowed[b, 0, i, j] = abs(i - j) <= 2 and not pad[b, j]
    real = ~pad  # padding queries are free to differ: nothing reads them
    fused = mha(x, x, mask=encoder_self_mask(pad, 2))
    torch.testing.assert_close(fused[real], masked_attention(mha, x, x, allowed)[real], rtol=0, atol=1e-5)


def test_a_padding_query_whose_window_is_all_padding_stays_finite():
    pad = torch.zeros(1, 9, dtype=torch.bool)
    pad[0, 3:] = True  # query 8 sees keys 7..9 with window 1: all padding
    model = transformer(attention_window=1)
    memory = model.encode(torch.tensor([[5, 6, 7, PAD, PAD, PAD, PAD, PAD, PAD]]))
    assert bool(encoder_self_mask(pad, 1).any(dim=-1).all())
    assert torch.isfinite(memory.states).all()


def test_restricted_decoder_self_attention_equals_a_masked_full_attention():
    model = transformer(attention_window=2)
    layer = model.decoder[0]
    x = torch.randn(2, 7, 16)
    allowed = torch.tensor([[0 <= i - j <= 2 for j in range(7)] for i in range(7)])
    expected = masked_attention(layer.self_attn, x, x, allowed)
    band = band_mask(7, 2, causal=True)
    torch.testing.assert_close(layer.self_attn(x, x, mask=band), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("build", [transformer, universal], ids=["transformer", "universal"])
def test_an_encoder_position_sees_only_window_times_depth_positions(build):
    depth = 2
    model = build(attention_window=1, **({"layers": depth} if build is transformer else {"steps": depth}))
    src, _ = batch()
    before = model.encode(src).states[1:, 0]  # position 0 of the unpadded rows
    far, near = src.clone(), src.clone()
    far[1:, 3] = far[1:, 3] % 17 + 3  # distance 3 > window * depth
    near[1:, 2] = near[1:, 2] % 17 + 3  # distance 2 = window * depth
    torch.testing.assert_close(model.encode(far).states[1:, 0], before, rtol=0, atol=0)
    assert not torch.allclose(model.encode(near).states[1:, 0], before)


@pytest.mark.parametrize("build", [transformer, universal], ids=["transformer", "universal"])
def test_a_decoder_position_sees_only_window_times_depth_earlier_positions(build):
    model = build(attention_window=1, **({"layers": 2} if build is transformer else {"steps": 2}))
    src, tgt = batch()
    tgt = tgt[:2]  # unpadded rows
    before = model(src[:2], tgt).logits
    changed = tgt.clone()
    changed[:, 2] = changed[:, 2] % 17 + 3
    after = model(src[:2], changed).logits
    torch.testing.assert_close(after[:, :2], before[:, :2], rtol=0, atol=0)  # earlier: causal
    assert not torch.allclose(after[:, 4], before[:, 4])  # 2 back: within reach
    torch.testing.assert_close(after[:, 5:], before[:, 5:], rtol=0, atol=0)  # 3 or more back: out of reach


# ------------------------------------------------------------------ incremental decoding


VARIANTS = [
    (transformer, dict(attention_window=2)),
    (transformer, dict(attention_window=1, norm="pre")),
    (transformer, dict(heads=3, d_k=5, d_v=7)),
    (transformer, dict(heads=1, d_k=16, d_v=16, positions="learned")),
    (transformer, dict(heads=4, d_k=2, d_v=6, attention_window=3, positions="learned")),
    (universal, dict(attention_window=2)),
    (universal, dict(attention_window=1, act=True, act_halting_bias_init=-0.5, transition="sepconv")),
    (universal, dict(heads=3, d_k=4, d_v=6, positions="learned", act=True, act_halting_bias_init=-0.5)),
]


@pytest.mark.parametrize("build,settings", VARIANTS,
                         ids=[f"{b.__name__}:" + ",".join(f"{k}={v}" for k, v in s.items()) for b, s in VARIANTS])
def test_incremental_step_equals_full_forward(build, settings):
    model = build(**settings)
    src, tgt = batch()
    expected = torch.log_softmax(model(src, tgt).logits, dim=-1)  # (B, T, V)
    memory = model.encode(src)
    cache = model.init_cache(memory)
    window = settings.get("attention_window", 0)
    for t in range(tgt.size(1)):
        logprobs, cache = model.step(tgt[:, t], memory, cache)
        real = tgt[:, t] != PAD
        torch.testing.assert_close(logprobs[real], expected[real, t], rtol=0, atol=1e-5)
        cached = cache.layers[0].keys(window)[0].size(2)  # what the next step attends to
        assert cached == (min(t + 1, window + 1) if window else t + 1)
        if window:  # a restricted cache stops growing
            assert cache.layers[0].key.size(2) <= max(16, 2 * (window + 1))


# ------------------------------------------------------------------ learned positions (row E)


def test_learned_positions_are_parameters_that_train():
    model = transformer(positions="learned", max_positions=12).train()
    assert model.state_dict()["positions.table.weight"].shape == (12, 16)
    src, tgt = batch()
    model(src, tgt).logits.sum().backward()
    grad = model.positions.table.weight.grad
    assert grad is not None and bool(grad[:9].abs().sum(dim=1).gt(0).all())
    assert bool(grad[9:].eq(0).all())  # positions no input reached


def test_sinusoids_are_not_parameters():
    assert not any("positions" in name for name, _ in transformer().named_parameters())


@pytest.mark.parametrize("build", [transformer, universal], ids=["transformer", "universal"])
def test_an_input_longer_than_the_learned_table_is_a_user_error_naming_the_setting(build):
    model = build(positions="learned", max_positions=8)
    src, tgt = batch(length=9)
    with pytest.raises(UserError, match=r"\[model\] max_positions = 8: an input reaches position 8"):
        model(src, tgt)
    assert model(src[:, :8], tgt[:, :8]).logits.shape == (3, 8, 20)  # exactly the table fits


def test_decoding_past_the_learned_table_is_a_user_error():
    model = transformer(positions="learned", max_positions=3)
    src, _ = batch()
    memory = model.encode(src[:, :3])
    cache = model.init_cache(memory)
    tokens = torch.full((3,), BOS)
    for _ in range(3):
        _, cache = model.step(tokens, memory, cache)
    with pytest.raises(UserError, match="max_positions = 3"):
        model.step(tokens, memory, cache)


def test_learned_positions_take_training_offsets_within_the_table():
    model = transformer(positions="learned", max_positions=12, position_offset_max=3).train()
    src, tgt = batch()
    torch.manual_seed(0)
    assert model(src, tgt).logits.shape == (3, 9, 20)  # offsets up to 3 + 9 positions fit in 12


# ------------------------------------------------------------------ decode-time keys


def test_decode_time_keys_are_those_that_keep_the_trained_function():
    assert TransformerSettings().decode_time_keys() == {"max_positions"}
    assert TransformerSettings(positions="learned").decode_time_keys() == set()
    assert UniversalSettings().decode_time_keys() == {"steps", "max_positions"}
    assert UniversalSettings(act=True).decode_time_keys() == {"act_max_steps", "act_epsilon", "max_positions"}
    assert UniversalSettings(timestep_signal="learned", positions="learned").decode_time_keys() == set()
