"""The Transformer model plugin: masking, padding, incremental decoding, sharing, presets, search."""

from __future__ import annotations

import subprocess
import sys

import pytest
import seqxduce_transformer
import torch
from seqxduce_transformer.beam_cache import BeamLayerState
from seqxduce_transformer.settings import TransformerSettings
from seqxduce_transformer.state import LayerState
from seqxduce_transformer.transformer import Transformer

from seqxduce.api import DecodeRequest, UserError, VocabInfo
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.hookspecs import hookimpl
from seqxduce.recipe import build_recipe
from seqxduce.registry import Registry, new_manager
from seqxduce.settings_check import make_settings

PAD, BOS, EOS = 0, 1, 2
VOCAB = VocabInfo(src_size=20, tgt_size=20, pad_id=PAD, bos_id=BOS, eos_id=EOS, shared=True)


def tiny(seed: int = 0, vocab: VocabInfo = VOCAB, **overrides) -> Transformer:
    """A 2-layer, width-16 model in eval mode (dropout off)."""
    torch.manual_seed(seed)
    values = dict(layers=2, d_model=16, d_ff=32, heads=2, dropout=0.1)
    values.update(overrides)
    return Transformer(TransformerSettings(**values), vocab).eval()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """src (3, 7) with row 0 padded after 5 tokens; tgt_in (3, 6) starting with bos."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 20, (3, 7), generator=g)
    src[0, 5:] = PAD
    tgt = torch.randint(3, 20, (3, 6), generator=g)
    tgt[:, 0] = BOS
    return src, tgt


def test_changing_a_later_target_token_never_changes_earlier_logits():
    model = tiny()
    src, tgt = batch()
    before = model(src, tgt).logits
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1 - 3) % 17 + 3
    after = model(src, changed).logits
    torch.testing.assert_close(after[:, :3], before[:, :3], rtol=0, atol=0)
    assert not torch.allclose(after[:, 3:], before[:, 3:])


def test_appending_source_padding_keeps_outputs():
    model = tiny()
    src, tgt = batch()
    alone = model(src[:1, :5], tgt[:1]).logits  # row 0 without its padding
    padded = model(src, tgt).logits[:1]
    more = model(torch.cat([src, torch.full((3, 4), PAD)], dim=1), tgt).logits[:1]
    torch.testing.assert_close(padded, alone, rtol=0, atol=1e-5)
    torch.testing.assert_close(more, alone, rtol=0, atol=1e-5)


def test_appending_target_padding_keeps_outputs_at_real_positions():
    model = tiny()
    src, tgt = batch()
    plain = model(src, tgt).logits
    padded = model(src, torch.cat([tgt, torch.full((3, 3), PAD)], dim=1)).logits
    torch.testing.assert_close(padded[:, :6], plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_incremental_step_equals_full_forward(norm):
    model = tiny(norm=norm)
    src, tgt = batch()
    expected = torch.log_softmax(model(src, tgt).logits, dim=-1)  # (B, T, V)
    memory = model.encode(src)
    cache = model.init_cache(memory)
    for t in range(tgt.size(1)):
        logprobs, cache = model.step(tgt[:, t], memory, cache)
        assert logprobs.dtype == torch.float32
        torch.testing.assert_close(logprobs, expected[:, t], rtol=0, atol=1e-5)
    assert cache.position == tgt.size(1)


def test_step_after_reorder_follows_the_selected_rows():
    model = tiny()
    src, tgt = batch()
    expected = torch.log_softmax(model(src, tgt).logits, dim=-1)
    memory = model.encode(src)
    cache = model.init_cache(memory)
    _, cache = model.step(tgt[:, 0], memory, cache)
    index = torch.tensor([2, 2, 0])
    memory, cache = model.reorder(memory, cache, index)
    logprobs, _ = model.step(tgt[index, 1], memory, cache)
    torch.testing.assert_close(logprobs, expected[index, 1], rtol=0, atol=1e-5)


def test_cross_attention_keys_are_projected_once_in_init_cache():
    model = tiny()
    src, tgt = batch()
    memory = model.encode(src)
    cache = model.init_cache(memory)
    calls = []
    hooks = [layer.cross_attn.key_value.register_forward_hook(lambda *a: calls.append(1)) for layer in model.decoder]
    try:
        for t in range(3):
            _, cache = model.step(tgt[:, t], memory, cache)
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == []
    assert cache.layers[0].length == 3
    assert cache.layers[0].keys()[0].shape == (3, 2, 3, 8)  # (B, H, t, C/H): three positions cached


@pytest.mark.parametrize("window", [0, 2])
def test_beam_shaped_reorders_keep_memory_per_source_and_equal_the_full_forward(window):
    """Expanding to beams, reordering inside each source's beams, and a source leaving: each step's log-probs
    equal a full forward over the prefix each row now holds, and the encoder memory and cross-attention keys
    stay one row per source (not copied) until a source leaves. The cache holds exactly the positions the next
    step sees plus room for its own: with a restricted window it stays bounded (its old positions are dropped)
    and decoding stays exact."""
    model = tiny(attention_window=window)
    src, _ = batch()
    beam, steps = 3, 36  # long enough for the spare buffers to grow several times, or a window to drop positions
    memory = model.encode(src)
    memory, _ = model.reorder(memory, None, torch.arange(3).repeat_interleave(beam))
    assert memory.group == beam and memory.states.size(0) == 3
    cache = model.init_cache(memory)
    cross_before = cache.cross[0][0].data_ptr()
    sources = torch.arange(3).repeat_interleave(beam)  # source of each search row
    g = torch.Generator().manual_seed(5)
    history = torch.full((9, 1), BOS)
    for t in range(steps):
        logprobs, cache = model.step(history[:, -1], memory, cache)
        expected = torch.log_softmax(model(src[sources], history).logits[:, -1], dim=-1)
        torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5)
        n = sources.numel() // beam
        if t == 10:  # source 1 leaves the search
            keep = torch.tensor([0, 2])
            index = (keep.unsqueeze(1) * beam + torch.arange(beam)).view(-1)
        else:  # each row continues one of its own source's beams
            index = (torch.arange(n).unsqueeze(1) * beam + torch.randint(0, beam, (n, beam), generator=g)).view(-1)
        keys_before = cache.layers[0].key.data_ptr()
        memory, cache = model.reorder(memory, cache, index)
        history = torch.cat([history[index], torch.randint(3, 20, (index.numel(), 1), generator=g)], dim=1)
        sources = sources[index]
        if t < 10:
            assert cache.cross[0][0].data_ptr() == cross_before
        if not window and 0 < t != 10:  # beam rows read their ancestors' keys where they are: nothing is copied
            assert isinstance(cache.layers[0], BeamLayerState) and cache.layers[0].key.data_ptr() == keys_before
        assert memory.group == beam and memory.states.size(0) == sources.numel() // beam
    assert memory.states.size(0) == 2
    if window:
        assert cache.layers[0].key.size(2) == window + 1
        assert cache.layers[0].key.is_contiguous()
    else:
        assert cache.layers[0].length == steps
    # an index mixing the sources' rows: back to one copy per row, and still exact
    index = torch.tensor([5, 0, 3, 3, 1, 4])
    memory, cache = model.reorder(memory, cache, index)
    assert memory.group == 1 and isinstance(cache.layers[0], LayerState)
    history = history[index]
    logprobs, _ = model.step(history[:, -1], memory, cache)
    expected = torch.log_softmax(model(src[sources[index]], history).logits[:, -1], dim=-1)
    torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5)


def test_any_reorder_index_still_decodes_each_row_as_its_source():
    """An index that breaks the source-major pattern (rows of different sources interleaved) falls back to
    one memory row per search row, and decoding stays exact."""
    model = tiny()
    src, _ = batch()
    memory = model.encode(src)
    memory, _ = model.reorder(memory, None, torch.tensor([0, 0, 1, 1, 2, 2]))
    cache = model.init_cache(memory)
    tgt = torch.tensor([[BOS, 5, 7], [BOS, 6, 8], [BOS, 9, 4], [BOS, 3, 3], [BOS, 11, 12], [BOS, 13, 5]])
    sources = torch.tensor([0, 0, 1, 1, 2, 2])
    _, cache = model.step(tgt[:, 0], memory, cache)
    index = torch.tensor([5, 0, 3, 3, 1, 4])
    memory, cache = model.reorder(memory, cache, index)
    assert memory.group == 1
    tgt, sources = tgt[index], sources[index]
    logprobs, _ = model.step(tgt[:, 1], memory, cache)
    expected = torch.log_softmax(model(src[sources], tgt[:, :2]).logits[:, -1], dim=-1)
    torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5)


def test_shared_vocabulary_shares_one_embedding_parameter():
    model = tiny()
    emb = model.embeddings
    assert emb.source.weight is emb.target.weight
    assert emb.output.weight is emb.target.weight
    assert sum(p.numel() for p in model.parameters() if p.dim() == 2 and p.size(0) == 20) == 20 * 16


def test_separate_vocabularies_still_tie_target_input_and_output():
    vocab = VocabInfo(src_size=23, tgt_size=20, pad_id=PAD, bos_id=BOS, eos_id=EOS, shared=False)
    model = tiny(vocab=vocab)
    emb = model.embeddings
    assert emb.source.weight is not emb.target.weight
    assert emb.source.weight.shape == (23, 16)
    assert emb.output.weight is emb.target.weight
    untied = tiny(vocab=vocab, tie_output=False).embeddings
    assert untied.output.weight is not untied.target.weight


def test_pad_embedding_starts_at_zero():
    model = tiny()
    assert torch.count_nonzero(model.embeddings.target.weight[PAD]) == 0


class _Stubs:
    """A task, tokenizer and decoder so that a recipe naming only the model can be validated."""

    @hookimpl
    def register_tasks(self, register):
        register("stub", lambda settings: None)

    @hookimpl
    def register_tokenizers(self, register):
        register("stub", lambda settings: None)

    @hookimpl
    def register_decoders(self, register):
        register("beam", lambda settings, tokenizer: None)


def registry() -> Registry:
    pm = new_manager(entry_points=False)
    pm.register(seqxduce_transformer, name="transformer")
    pm.register(_Stubs(), name="stubs")
    return Registry(pm)


def recipe_data(**model) -> dict:
    return {"task": {"name": "stub"}, "tokenizer": {"name": "stub"}, "model": {"name": "transformer", **model}}


def test_preset_big_through_build_recipe():
    recipe = build_recipe(recipe_data(preset="big"), reg=registry())
    s = recipe.model.settings
    assert isinstance(s, TransformerSettings)
    assert (s.layers, s.d_model, s.d_ff, s.heads, s.dropout) == (6, 1024, 4096, 16, 0.3)


def test_recipe_keys_override_the_preset():
    recipe = build_recipe(recipe_data(preset="big", d_model=256), overrides=["model.dropout=0.2"], reg=registry())
    s = recipe.model.settings
    assert (s.d_model, s.heads, s.dropout) == (256, 16, 0.2)


def test_preset_base_is_the_paper_base_model():
    component = registry().get("model", "transformer")
    s = make_settings(component.settings, component.presets["base"], "model", "<test>")
    assert (s.layers, s.d_model, s.d_ff, s.heads, s.dropout) == (6, 512, 2048, 8, 0.1)
    assert (s.norm, s.share_embeddings, s.max_positions, s.init) == ("post", True, 1024, "xavier")


def test_unknown_model_key_is_a_user_error():
    with pytest.raises(UserError, match="d_modle"):
        build_recipe(recipe_data(d_modle=8), reg=registry())


def test_heads_not_dividing_width_is_a_user_error():
    with pytest.raises(UserError, match=r"\[model\] heads"):
        tiny(heads=3)


def test_factory_builds_through_the_registry():
    component = registry().get("model", "transformer")
    settings = make_settings(component.settings, {"layers": 1, "d_model": 8, "d_ff": 16, "heads": 2}, "model", "t")
    model = component.factory(settings, VOCAB)
    assert isinstance(model, Transformer)
    assert len(model.encoder) == 1 and len(model.decoder) == 1


def test_encoder_and_decoder_depths_can_differ():
    model = tiny(encoder_layers=3, decoder_layers=1)
    assert (len(model.encoder), len(model.decoder)) == (3, 1)


def test_positions_grow_beyond_max_positions():
    short = tiny(max_positions=4)
    long = tiny(max_positions=64)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(3, 20, (2, 9), generator=g)
    tgt = torch.randint(3, 20, (2, 11), generator=g)
    torch.testing.assert_close(short(src, tgt).logits, long(src, tgt).logits, rtol=0, atol=1e-5)
    assert short.positions.table.size(0) >= 11


def test_golden_logit():
    # recorded from this implementation (seed 0, tiny(), batch()); a change means the numbers moved
    with torch.no_grad():
        logits = tiny()(*batch()).logits
    assert logits.shape == (3, 6, 20)
    assert float(logits[1, 2, 5]) == pytest.approx(1.2290795, abs=1e-4)


def test_bf16_autocast_forward_and_step_run_on_cpu():
    model = tiny()
    src, tgt = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt).logits
        memory = model.encode(src)
        logprobs, _ = model.step(tgt[:, 0], memory, model.init_cache(memory))
    assert logits.shape == (3, 6, 20) and torch.isfinite(logits.float()).all()
    assert logprobs.dtype == torch.float32 and torch.isfinite(logprobs).all()


def test_training_forward_backpropagates_to_every_parameter():
    model = tiny().train()
    src, tgt = batch()
    model(src, tgt).logits.sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert missing == []


def test_importing_the_plugin_does_not_import_torch():
    code = "import sys, seqxduce_transformer; assert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _request(src: torch.Tensor) -> DecodeRequest:
    return DecodeRequest(src=src, sources=[""] * src.size(0), bos_id=BOS, eos_id=EOS, pad_id=PAD)


def test_beam_of_one_finds_the_greedy_tokens():
    model = tiny(seed=5)
    src, _ = batch(seed=7)
    greedy = greedy_search(model, _request(src), SearchSettings(max_len_b=6))
    beam = beam_search(model, _request(src), BeamSettings(beam=1, max_len_b=6))
    assert [h[0].tokens for h in beam] == [h[0].tokens for h in greedy]
    assert any(len(h[0].tokens) > 0 for h in greedy)


def test_beam_search_scores_are_the_models_logprobs():
    model = tiny(seed=5)
    src, _ = batch(seed=7)
    best = beam_search(model, _request(src), BeamSettings(beam=3, max_len_b=5))
    for row, hyps in enumerate(best):
        tokens = hyps[0].tokens
        tgt = torch.tensor([[BOS] + tokens])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(src[row:row + 1], tgt).logits, dim=-1)[0]
        targets = tokens + [EOS]
        total = sum(float(logprobs[i, t]) for i, t in enumerate(targets))
        # the search masks tokens but never renormalises, so its total is the model's own log-probability
        assert hyps[0].logprob == pytest.approx(total, abs=1e-4)


@pytest.mark.parametrize("group", [1, 3])
def test_decoding_cross_attention_equals_sdpa_over_the_padding_mask(group):
    """attend_step's matmul form (scores plus the padding bias) is SDPA with the boolean mask, for one query per
    memory row and for a source's group of beam rows."""
    from plugins.transformer.attention import MultiHeadAttention, key_padding_mask
    from plugins.transformer.state import Memory

    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 2).eval()
    states = torch.randn(4, 7, 16)
    pad = torch.zeros(4, 7, dtype=torch.bool)
    pad[0, 4:] = True
    pad[2, 1:] = True
    memory = Memory(states, pad, key_padding_mask(pad), group=group)
    key, value = attention.memory_kv(states)
    assert key.is_contiguous() and value.is_contiguous()
    x = torch.randn(4 * group, 1, 16)
    got = attention.attend_step(x, key, value, memory.mask, memory.step_bias(), group)
    query = attention.query(x).view(4, group, 2, 8).transpose(1, 2)
    expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=memory.mask)
    expected = attention.out(expected.transpose(1, 2).reshape(4 * group, 1, 16))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    kept = memory.take(memory.plan(torch.arange(group, 3 * group)))  # sources 1 and 2 stay
    torch.testing.assert_close(kept.step_bias(), memory.bias[1:3], rtol=0, atol=0)
    fresh = Memory(states, pad, key_padding_mask(pad), group=group)  # a training forward never makes the bias
    assert fresh.bias is None
    torch.testing.assert_close(fresh.take(fresh.plan(torch.arange(group, 3 * group))).step_bias(), kept.bias)
