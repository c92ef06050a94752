"""Linear layers packed for MKL's GEMM when decoding in fp32 on the CPU (seqxduce.decoding.packed_linear)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqxduce import components
from seqxduce.decoding import packed_linear
from seqxduce.decoding.decode import decode_sources, load_run
from seqxduce.decoding.options import prepare_for_decoding
from seqxduce.decoding.packed_linear import PackedLinear, mkl_packing, pack_linear_layers
from tests.near_ties import TIE, assert_same_texts

needs_mkl = pytest.mark.skipif(not mkl_packing(), reason="torch here has no MKL packed GEMM (not an x86 MKL build)")


@needs_mkl
@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_layer_gives_linears_outputs_for_every_row_count(bias):
    torch.manual_seed(0)
    linear = nn.Linear(48, 40, bias=bias)
    packed = PackedLinear(linear)
    with torch.no_grad():
        for shape in [(6, 1, 48), (6, 1, 48), (6, 1, 48), (4, 48), (4, 48), (3, 2, 48), (6, 1, 48)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)


@needs_mkl
def test_it_packs_for_a_row_count_that_comes_twice_in_a_row_and_repacks_after_an_in_place_change():
    linear = nn.Linear(16, 24)
    packed = PackedLinear(linear)
    with torch.no_grad():
        packed(torch.randn(5, 16))
        assert packed._packed is None  # once: not yet a steady batch
        packed(torch.randn(5, 16))
        assert packed._packed[0] == 5
        packed(torch.randn(3, 16))
        assert packed._packed[0] == 5  # one call of 3 rows runs unpacked
        linear.weight.mul_(-1)  # the packed copy is now stale
        x = torch.randn(5, 16)
        torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)


def test_with_autograd_or_another_dtype_it_is_the_plain_linear():
    linear = nn.Linear(8, 8)
    packed = PackedLinear(linear)
    x = torch.randn(3, 8, requires_grad=True)
    packed(x).sum().backward()
    torch.testing.assert_close(x.grad, linear.weight.sum(0).expand(3, 8))
    with torch.no_grad():
        half = torch.randn(3, 8, dtype=torch.bfloat16)
        torch.testing.assert_close(packed.to(torch.bfloat16)(half), F.linear(half, linear.weight.bfloat16(),
                                                                              linear.bias.bfloat16()))
    assert packed._packed is None


@needs_mkl
def test_packing_keeps_tied_weights_tied_and_the_state_dict():
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 10, bias=False))
    model[1].weight = model[0].weight
    keys = list(model.state_dict())
    assert pack_linear_layers(model) == 1
    assert isinstance(model[1], PackedLinear) and model[1].weight is model[0].weight
    assert list(model.state_dict()) == keys


@needs_mkl
def test_fp32_decoding_on_the_cpu_packs_and_decodes_as_the_plain_model(trained_copy_run, monkeypatch):
    loaded = load_run(trained_copy_run)
    assert any(isinstance(m, PackedLinear) for m in loaded.model.modules())
    assert not any(type(m) is nn.Linear for m in loaded.model.modules())
    sources = loaded.task.examples("valid", components.data_dir(loaded.recipe))[:24]
    packed = decode_sources(loaded, [ex.source for ex in sources])
    monkeypatch.setattr(packed_linear, "mkl_packing", lambda: False)
    unpacked_run = load_run(trained_copy_run)
    assert not any(isinstance(m, PackedLinear) for m in unpacked_run.model.modules())
    unpacked = decode_sources(unpacked_run, [ex.source for ex in sources])
    # another GEMM kernel sums in another order: the same outputs but for a near-tie (tests/near_ties.py)
    assert_same_texts(trained_copy_run, [ex.source for ex in sources], [o.text for o in unpacked],
                      [o.text for o in packed])
    for a, b in zip(packed, unpacked):
        if a.nbest[0][1].tokens == b.nbest[0][1].tokens:
            assert abs(a.nbest[0][1].score - b.nbest[0][1].score) < TIE
    plain = load_run(trained_copy_run, ["decode.precision=bf16"]).model  # autocast: nothing packed
    assert not any(isinstance(m, PackedLinear) for m in plain.modules())
    int8 = prepare_for_decoding(nn.Sequential(nn.Linear(4, 4)), "int8", torch.device("cpu"))
    assert not any(isinstance(m, PackedLinear) for m in int8.modules())
