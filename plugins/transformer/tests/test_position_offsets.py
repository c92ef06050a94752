"""Random training position offsets (length generalization): each row's positions start at its own draw in
training mode only, source and target apart when asked, and decoding is unaffected."""

from __future__ import annotations

import pytest
import torch
from seqxduce_transformer.embedding import SinusoidalPositions, sinusoid_table, training_offset_pair, training_offsets
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import UserError, VocabInfo

PAD, BOS, EOS = 0, 1, 2
VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=PAD, bos_id=BOS, eos_id=EOS, shared=True)
WIDTH = dict(d_model=16, d_ff=32, heads=2, dropout=0.0)


def build(kind: str, offset_max: int, seed: int = 0, **extra):
    """A tiny Transformer or UT (+ACT) without dropout, so train and eval mode differ only in positions."""
    torch.manual_seed(seed)
    if kind == "transformer":
        return Transformer(TransformerSettings(layers=2, position_offset_max=offset_max, **WIDTH, **extra), VOCAB)
    settings = UniversalSettings(steps=2, act=kind == "ut_act", act_max_steps=3, position_offset_max=offset_max,
                                 **WIDTH, **extra)
    return UniversalTransformer(settings, VOCAB)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """src (2, 5), tgt_in (2, 4); row 1 of src padded after 3 tokens."""
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, PAD, PAD]])
    tgt = torch.tensor([[BOS, 3, 4, 5], [BOS, 8, 9, 10]])
    return src, tgt


KINDS = ("transformer", "ut", "ut_act")


def test_rows_start_each_row_at_its_offset():
    positions = SinusoidalPositions(8, 16)
    rows = positions.rows(5, torch.tensor([0, 3, 14]))  # 14 + 5 > 16: the table grows
    table = sinusoid_table(32, 8)
    assert rows.shape == (3, 5, 8)
    assert torch.allclose(rows[0], table[0:5])
    assert torch.allclose(rows[1], table[3:8])
    assert torch.allclose(rows[2], table[14:19])


def test_training_offsets_only_in_training_mode_and_within_range():
    module = torch.nn.Linear(1, 1)
    assert training_offsets(module.eval(), 7, 4, torch.device("cpu")) is None
    assert training_offsets(module.train(), 0, 4, torch.device("cpu")) is None
    torch.manual_seed(0)
    offsets = training_offsets(module.train(), 7, 1000, torch.device("cpu"))
    assert offsets.shape == (1000,)
    assert int(offsets.min()) == 0 and int(offsets.max()) == 7  # both ends of [0, 7] are drawn


@pytest.mark.parametrize("kind", KINDS)
def test_eval_outputs_do_not_depend_on_position_offset_max(kind):
    src, tgt = batch()
    off, on = build(kind, 0).eval(), build(kind, 50).eval()
    on.load_state_dict(off.state_dict())
    assert torch.equal(off(src, tgt).logits, on(src, tgt).logits)


@pytest.mark.parametrize("kind", KINDS)
def test_training_mode_shifts_positions_only_when_offsets_are_on(kind):
    src, tgt = batch()
    for offset_max, shifted in ((0, False), (50, True)):
        model = build(kind, offset_max)
        evaluated = model.eval()(src, tgt).logits
        torch.manual_seed(3)
        trained = model.train()(src, tgt).logits
        assert torch.allclose(trained, evaluated, atol=1e-6) is not shifted


def test_transformer_training_forward_equals_eval_with_the_drawn_offsets():
    src, tgt = batch()
    model = build("transformer", 50)
    torch.manual_seed(3)
    trained = model.train()(src, tgt).logits
    torch.manual_seed(3)
    offsets = torch.randint(0, 51, (2,))  # the same draw training_offsets makes
    assert offsets[0] != offsets[1]
    model.eval()
    expected = model.embeddings.logits(model.decode(tgt, model.encode(src, offsets), offsets))
    assert torch.allclose(trained, expected, atol=1e-6)


def test_offset_pair_is_one_draw_when_shared_and_two_when_independent():
    module = torch.nn.Linear(1, 1)
    assert training_offset_pair(module.eval(), 7, "independent", 4, torch.device("cpu")) == (None, None)
    source, target = training_offset_pair(module.train(), 7, "shared", 4, torch.device("cpu"))
    assert source is target
    torch.manual_seed(0)
    source, target = training_offset_pair(module.train(), 400, "independent", 1000, torch.device("cpu"))
    assert not torch.equal(source, target)
    assert int(target.min()) >= 0 and int(target.max()) <= 400


@pytest.mark.parametrize("kind", ("transformer", "ut"))
def test_independent_offsets_start_source_and_target_at_their_own_draws(kind):
    src, tgt = batch()
    model = build(kind, 50)
    model.settings.position_offsets = "independent"
    torch.manual_seed(3)
    trained = model.train()(src, tgt).logits
    torch.manual_seed(3)
    source, target = torch.randint(0, 51, (2,)), torch.randint(0, 51, (2,))  # the draws training makes
    assert not torch.equal(source, target)
    model.eval()
    if kind == "transformer":
        states = model.decode(tgt, model.encode(src, source), target)
    else:
        states, _ = model._decode(tgt, model._encode(src, source)[0], target)
    assert torch.allclose(trained, model.embeddings.logits(states), atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_offsets_differ_per_sequence(kind):
    src = torch.tensor([[3, 4, 5, 6]] * 4)  # four identical rows
    tgt = torch.tensor([[BOS, 3, 4, 5]] * 4)
    model = build(kind, 1000).train()
    torch.manual_seed(5)
    logits = model(src, tgt).logits  # (4, 4, V)
    for i in range(1, 4):
        assert not torch.allclose(logits[0], logits[i], atol=1e-4)
    assert torch.allclose(*model.eval()(src, tgt).logits[:2])  # in eval they are the same again


@pytest.mark.parametrize("extra", ({}, {"source_positions": "backward", "source_bos": True}))
@pytest.mark.parametrize("kind", KINDS)
def test_incremental_decoding_is_unaffected_by_offsets(kind, extra):
    src, tgt = batch()
    model = build(kind, 50, **extra).eval()
    full = torch.log_softmax(model(src, tgt).logits, dim=-1)  # (B, T, V)
    memory = model.encode(src)
    cache = model.init_cache(memory)
    for t in range(tgt.size(1)):
        logprobs, cache = model.step(tgt[:, t], memory, cache)
        assert torch.allclose(logprobs, full[:, t], atol=1e-5)


def test_backward_rows_count_down_to_each_rows_last_real_token():
    positions = SinusoidalPositions(8, 4)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    table = sinusoid_table(64, 8)
    rows = positions.backward_rows(pad)
    assert torch.allclose(rows[0], table[[4, 3, 2, 1, 0]])
    assert torch.allclose(rows[1], table[[2, 1, 0, 0, 0]])  # padding clamped to the last real position
    shifted = positions.backward_rows(pad, torch.tensor([10, 40]))
    assert torch.allclose(shifted[1, :3], table[[42, 41, 40]])


@pytest.mark.parametrize("kind", KINDS)
def test_source_bos_equals_the_bos_written_into_the_source(kind):
    src, tgt = batch()
    marked, plain = build(kind, 0, source_bos=True).eval(), build(kind, 0).eval()
    plain.load_state_dict(marked.state_dict())
    with_bos = torch.cat([torch.full((2, 1), BOS), src], dim=1)
    assert marked.encode(src).states.shape[1] == src.size(1) + 1
    assert torch.allclose(marked(src, tgt).logits, plain(with_bos, tgt).logits, atol=1e-6)
    if kind != "transformer":  # ponder counts stay one per source position
        assert marked.annotate(src, tgt)["source_ponder"].shape == src.shape


@pytest.mark.parametrize("kind", KINDS)
def test_backward_source_positions_change_the_encoder_only(kind):
    src, tgt = batch()
    backward, forward = build(kind, 0, source_positions="backward").eval(), build(kind, 0).eval()
    forward.load_state_dict(backward.state_dict())
    assert not torch.allclose(backward(src, tgt).logits, forward(src, tgt).logits, atol=1e-4)
    # right padding does not move a row's positions: they count from its own last real token
    one = src[1:, :3]
    assert torch.allclose(backward.encode(one).states, backward.encode(src[1:]).states[:, :3], atol=1e-5)


def test_negative_offset_max_is_a_user_error():
    with pytest.raises(UserError, match="position_offset_max"):
        Transformer(TransformerSettings(position_offset_max=-1, **WIDTH), VOCAB)
