"""The Universal Transformer: weight-shared recurrence, ACT halting and ponder cost, incremental decoding."""

from __future__ import annotations

import math

import pytest
import seqxduce_transformer
import torch
from seqxduce_transformer.act import Halting
from seqxduce_transformer.attention import key_padding_mask
from seqxduce_transformer.beam_cache import BeamLayerState
from seqxduce_transformer.settings import TransformerSettings, UniversalSettings
from seqxduce_transformer.transformer import Transformer
from seqxduce_transformer.universal import UniversalTransformer

from seqxduce.api import DecodeRequest, VocabInfo
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.registry import Registry, new_manager
from seqxduce.settings_check import make_settings

PAD, BOS, EOS = 0, 1, 2
VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=PAD, bos_id=BOS, eos_id=EOS, shared=True)
WIDTH = dict(d_model=16, d_ff=32, heads=2)


def tiny(seed: int = 0, **overrides) -> UniversalTransformer:
    """A width-16 UT in eval mode (dropout off)."""
    torch.manual_seed(seed)
    values = dict(steps=3, act_max_steps=5, dropout=0.1, **WIDTH)
    values.update(overrides)
    return UniversalTransformer(UniversalSettings(**values), VOCAB).eval()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """src (3, 7) with row 0 padded after 5 tokens; tgt_in (3, 6) starting with bos, row 2 padded after 4."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 20, (3, 7), generator=g)
    src[0, 5:] = PAD
    tgt = torch.randint(3, 20, (3, 6), generator=g)
    tgt[:, 0] = BOS
    tgt[2, 4:] = PAD
    return src, tgt


def set_halting(model: UniversalTransformer, encoder_p: float, decoder_p: float) -> None:
    """Make every halting probability a constant: zero weights, bias = logit(p)."""
    with torch.no_grad():
        for unit, p in ((model.encoder_halting, encoder_p), (model.decoder_halting, decoder_p)):
            unit.weight.zero_()
            unit.bias.fill_(math.log(p / (1 - p)))


def test_without_act_equals_a_transformer_whose_layers_share_weights():
    ut = tiny(steps=3)
    reference = Transformer(TransformerSettings(layers=3, **WIDTH), VOCAB).eval()
    reference.embeddings.load_state_dict(ut.embeddings.state_dict())
    for layer in reference.encoder:
        layer.load_state_dict(ut.encoder_layer.state_dict())
    for layer in reference.decoder:
        layer.load_state_dict(ut.decoder_layer.state_dict())
    # Transformer.forward adds positions once, before layer 1, while the UT adds P^t = positions + timestep
    # signal t before every step: the two cannot agree exactly. So the reference runs the Transformer's own
    # (now weight-tied) layers and adds the same P^t before each of them; everything else is the Transformer.
    src, tgt = batch()
    pad = src == PAD
    mask = key_padding_mask(pad)
    h = reference.embeddings.embed_source(src)
    for t, layer in enumerate(reference.encoder, start=1):
        h = layer(h + ut.coordinates(src.size(1), t), mask, pad)
    x = reference.embeddings.embed_target(tgt)
    for t, layer in enumerate(reference.decoder, start=1):
        x = layer(x + ut.coordinates(tgt.size(1), t), layer.cross_attn.project_kv(h), mask)
    expected = reference.embeddings.logits(x)
    torch.testing.assert_close(ut(src, tgt).logits, expected, rtol=0, atol=1e-6)


def test_the_recurrence_shares_one_layer():
    ut = tiny(steps=4)
    fewer = tiny(steps=2)
    assert sum(p.numel() for p in ut.parameters()) == sum(p.numel() for p in fewer.parameters())


def all_ponder_stats(value: float) -> dict[str, float]:
    """Every ponder stat (mean, max; all positions, source, target) equal to value."""
    return {f"{side}ponder_{figure}": value for side in ("", "src_", "tgt_") for figure in ("mean", "max")}


def test_act_with_very_high_halting_bias_halts_every_position_after_one_step():
    model = tiny(act=True, act_halting_bias_init=30.0)
    src, tgt = batch()
    output = model(src, tgt)
    assert model.annotate(src, tgt)["source_ponder"].tolist() == (src != PAD).float().tolist()
    assert output.stats == all_ponder_stats(1.0)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in output.stats.values())  # read at log time
    # halting at step 1 with remainder 1 gives weight 1 to the first state: a one-step UT
    one_step = tiny(steps=1)
    missing, unexpected = one_step.load_state_dict(model.state_dict(), strict=False)
    assert unexpected == [f"{side}_halting.{p}" for side in ("encoder", "decoder") for p in ("weight", "bias")]
    assert missing == []
    real = tgt != PAD
    torch.testing.assert_close(output.logits[real], one_step(src, tgt).logits[real], rtol=0, atol=1e-5)


def test_act_with_very_low_halting_bias_runs_every_position_to_the_maximum():
    model = tiny(act=True, act_max_steps=4, act_halting_bias_init=-30.0)
    src, tgt = batch()
    output = model(src, tgt)
    assert model.annotate(src, tgt)["source_ponder"].tolist() == (4.0 * (src != PAD).float()).tolist()
    assert output.stats == all_ponder_stats(4.0)


def test_ponder_cost_matches_a_hand_computation():
    model = tiny(act=True, act_max_steps=8, act_loss_weight=0.01)
    # encoder p = 0.3: sums 0.3, 0.6, 0.9, then 1.2 > 0.99 halts at N = 4 with R = 1 - 0.9 = 0.1
    # decoder p = 0.45: sums 0.45, 0.9, then 1.35 > 0.99 halts at N = 3 with R = 1 - 0.9 = 0.1
    set_halting(model, 0.3, 0.45)
    src, tgt = batch()
    output = model(src, tgt)
    assert float(output.aux_loss.detach()) == pytest.approx(0.01 * (4.1 + 3.1), abs=1e-5)
    n_src, n_tgt = int((src != PAD).sum()), int((tgt != PAD).sum())
    assert output.stats["ponder_mean"] == pytest.approx((4 * n_src + 3 * n_tgt) / (n_src + n_tgt))
    assert output.stats["ponder_max"] == 4.0
    assert (output.stats["src_ponder_mean"], output.stats["src_ponder_max"]) == (4.0, 4.0)
    assert (output.stats["tgt_ponder_mean"], output.stats["tgt_ponder_max"]) == (3.0, 3.0)


def test_ponder_cost_at_the_step_limit_takes_the_rest_as_remainder():
    model = tiny(act=True, act_max_steps=3, act_loss_weight=0.5)
    set_halting(model, 0.3, 0.3)  # forced halt at N = 3 with R = 1 - 0.6 = 0.4
    output = model(*batch())
    assert float(output.aux_loss.detach()) == pytest.approx(0.5 * (3.4 + 3.4), abs=1e-5)


def test_ponder_cost_reaches_the_halting_unit():
    model = tiny(act=True, act_halting_bias_init=0.0).train()
    output = model(*batch())
    output.aux_loss.backward()
    assert model.encoder_halting.bias.grad is not None and float(model.encoder_halting.bias.grad) != 0.0
    assert model.decoder_halting.bias.grad is not None and float(model.decoder_halting.bias.grad) != 0.0


def test_halting_weights_states_by_hand():
    # one position, one channel; p = 0.5, 0.3, 0.4 and new states 1, 2, 4
    halting = Halting(torch.zeros(1, 1, dtype=torch.bool), torch.zeros(1, 1, 1), epsilon=0.01, max_steps=8)
    outputs = []
    for step, (p, h) in enumerate([(0.5, 1.0), (0.3, 2.0), (0.4, 4.0), (0.9, 8.0)], start=1):
        ran = halting.update(torch.tensor([[p]]), torch.tensor([[[h]]]), step)
        outputs.append(float(halting.output))
        assert bool(ran) == (step <= 3)
    # w = 0.5: 0.5; w = 0.3: 0.3*2 + 0.7*0.5 = 0.95; halts with R = 0.2: 0.2*4 + 0.8*0.95 = 1.56; then frozen
    assert outputs == pytest.approx([0.5, 0.95, 1.56, 1.56])
    assert float(halting.ponder()) == pytest.approx(3.2)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@torch.no_grad()
def test_halted_positions_keep_their_state(side):
    model = tiny(seed=3, act=True, act_max_steps=5, act_halting_bias_init=-0.5)
    src, tgt = batch()
    inputs: list[torch.Tensor] = []
    layer = model.encoder_layer if side == "encoder" else model.decoder_layer
    hook = layer.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach()))
    try:
        memory, halting = model._encode(src)
        if side == "decoder":
            inputs.clear()
            _, halting = model._decode(tgt, memory)
    finally:
        hook.remove()
    steps = halting.updates.long()  # (B, L)
    real = (src if side == "encoder" else tgt) != PAD
    assert len(set(steps[real].tolist())) > 1, "the test needs positions that halt at different steps"
    assert len(inputs) == int(steps.max())
    length = real.size(1)
    carried = [x - model.coordinates(length, t) for t, x in enumerate(inputs, start=1)]  # H^{t-1}
    checked = 0
    for b, s in real.nonzero().tolist():
        n = int(steps[b, s])
        for t in range(n + 1, len(inputs)):  # the state after halting at step n enters steps n+1, n+2, ...
            torch.testing.assert_close(carried[t][b, s], carried[n][b, s], rtol=0, atol=1e-6)
            checked += 1
    assert checked > 0


VARIANTS = [
    dict(),
    dict(transition="sepconv"),
    dict(act=True, act_halting_bias_init=-0.5),
    dict(act=True, act_halting_bias_init=-0.5, transition="sepconv"),
    dict(act=True, act_halting_bias_init=-0.5, transition="sepconv", conv_kernel=2, norm="pre",
         timestep_signal="learned"),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={v[k]}" for k in v) or "plain")
def test_incremental_step_equals_full_forward(variant):
    model = tiny(**variant)
    src, tgt = batch()
    expected = torch.log_softmax(model(src, tgt).logits, dim=-1)
    memory = model.encode(src)
    cache = model.init_cache(memory)
    assert len(cache.layers) == model.depth and len(cache.cross) == 1
    for t in range(tgt.size(1)):
        logprobs, cache = model.step(tgt[:, t], memory, cache)
        real = tgt[:, t] != PAD
        torch.testing.assert_close(logprobs[real], expected[real, t], rtol=0, atol=1e-5)
    if variant.get("transition") == "sepconv":
        assert cache.layers[0].conv.shape == (3, model.settings.conv_kernel - 1, 16)


@pytest.mark.parametrize("variant", VARIANTS[1:4:2], ids=["sepconv", "act-sepconv"])
def test_beam_reorders_read_the_ancestors_keys_exactly(variant):
    """Beam-shaped reorders (each row continues a row of its own source) leave every depth step's keys where
    they are, read through back-pointers (beam_cache.py), and select the transition histories per row: each
    step still equals a full forward over the prefix its row now holds."""
    model = tiny(**variant)
    src, _ = batch()
    beam = 2
    memory, _ = model.reorder(model.encode(src), None, torch.arange(3).repeat_interleave(beam))
    cache = model.init_cache(memory)
    sources = torch.arange(3).repeat_interleave(beam)
    g = torch.Generator().manual_seed(3)
    history = torch.full((6, 1), BOS)
    for _ in range(6):
        logprobs, cache = model.step(history[:, -1], memory, cache)
        expected = torch.log_softmax(model(src[sources], history).logits[:, -1], dim=-1)
        torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5)
        index = (torch.arange(3).unsqueeze(1) * beam + torch.randint(0, beam, (3, beam), generator=g)).view(-1)
        memory, cache = model.reorder(memory, cache, index)
        history = torch.cat([history[index], torch.randint(3, 20, (6, 1), generator=g)], dim=1)
        sources = sources[index]
    assert all(isinstance(layer, BeamLayerState) for layer in cache.layers)


@pytest.mark.parametrize("variant", VARIANTS[1:4:2], ids=["sepconv", "act-sepconv"])
def test_appending_source_padding_keeps_outputs(variant):
    model = tiny(**variant)
    src, tgt = batch()
    alone = model(src[:1, :5], tgt[:1]).logits
    more = model(torch.cat([src, torch.full((3, 3), PAD)], dim=1), tgt).logits[:1]
    torch.testing.assert_close(more, alone, rtol=0, atol=1e-5)


def test_encode_records_ponder_counts():
    model = tiny(act=True, act_halting_bias_init=-0.5)
    src, tgt = batch()
    memory = model.encode(src)
    assert memory.ponder.shape == src.shape
    assert (memory.ponder[src == PAD] == 0).all() and (memory.ponder[src != PAD] >= 1).all()
    assert model.annotate(src, tgt)["source_ponder"].tolist() == memory.ponder.tolist()
    assert tiny().annotate(src, tgt)["source_ponder"].tolist() == (3.0 * (src != PAD).float()).tolist()


def _request(src: torch.Tensor) -> DecodeRequest:
    return DecodeRequest(src=src, sources=[""] * src.size(0), bos_id=BOS, eos_id=EOS, pad_id=PAD)


@pytest.mark.parametrize("variant", [dict(), dict(act=True, act_halting_bias_init=-0.5, transition="sepconv")],
                         ids=["plain", "act-sepconv"])
def test_beam_of_one_finds_the_greedy_tokens(variant):
    model = tiny(seed=5, **variant)
    src, _ = batch(seed=7)
    greedy = greedy_search(model, _request(src), SearchSettings(max_len_b=6))
    beam = beam_search(model, _request(src), BeamSettings(beam=1, max_len_b=6))
    assert [h[0].tokens for h in beam] == [h[0].tokens for h in greedy]
    wide = beam_search(model, _request(src), BeamSettings(beam=3, max_len_b=6))
    assert len(wide) == 3 and all(len(h) == 1 for h in wide)


def test_presets_mirror_the_transformer():
    pm = new_manager(entry_points=False)
    pm.register(seqxduce_transformer, name="transformer")
    component = Registry(pm).get("model", "universal_transformer")
    big = make_settings(component.settings, component.presets["big"], "model", "<test>")
    assert (big.steps, big.d_model, big.d_ff, big.heads, big.dropout) == (6, 1024, 4096, 16, 0.3)
    base = make_settings(component.settings, component.presets["base"], "model", "<test>")
    assert (base.steps, base.d_model, base.act, base.act_max_steps, base.conv_kernel) == (6, 512, False, 8, 3)


def test_bf16_autocast_forward_runs_on_cpu():
    model = tiny(act=True, transition="sepconv")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = model(*batch())
    assert torch.isfinite(output.logits.float()).all() and torch.isfinite(output.aux_loss)
