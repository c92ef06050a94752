"""[decode] quantize and compile (seqxduce.decoding.options) on a small trained model: what they change and what not."""

import pytest
import torch
from torch import nn

import seqxduce
from seqxduce.api import DecodeRequest, UserError
from seqxduce.data import encode_source, pad_sources
from seqxduce.decoding.decode import load_run
from seqxduce.decoding.options import compile_step, quantize_for_decoding
from seqxduce.decoding.packed_linear import PackedLinear
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings


@pytest.fixture(scope="module")
def run_dir(trained_copy_run):
    return trained_copy_run


def request_for(run, sources):
    tgt = run.tokenizers.tgt
    src = pad_sources([encode_source(run.tokenizers.src, s) for s in sources], tgt.pad_id)
    return DecodeRequest(src=src, sources=list(sources), bos_id=tgt.bos_id, eos_id=tgt.eos_id, pad_id=tgt.pad_id)


def test_int8_quantization_decodes_and_mostly_agrees_with_fp32(run_dir):
    plain = load_run(run_dir)
    quantized = load_run(run_dir, ["decode.quantize=int8"])
    kinds = {type(m).__module__ for m in quantized.model.modules()}
    assert any("quantized" in k for k in kinds), kinds  # its Linear layers were replaced
    assert not any(type(m) is nn.Linear for m in quantized.model.modules())
    linears = [m for m in plain.model.modules() if isinstance(m, (nn.Linear, PackedLinear))]
    assert linears and all(m.weight.dtype == torch.float32 for m in linears)  # fp32 decoding quantizes nothing
    examples = plain.task.examples("test", seqxduce.components.data_dir(plain.recipe))
    req = request_for(plain, [ex.source for ex in examples])
    settings = BeamSettings(beam=4, max_len_a=1.0, max_len_b=2)
    fp32 = beam_search(plain.model, req, settings)
    int8 = beam_search(quantized.model, req, settings)
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(fp32, int8))
    assert same >= 0.9 * len(examples), f"{same} of {len(examples)} outputs agree"
    right = sum(" ".join(plain.tokenizers.tgt.decode(h[0].tokens).split()) == ex.target
                for h, ex in zip(int8, examples))
    assert right >= 0.5 * len(examples)  # it still copies: a trained model, not noise
    assert not all(abs(a[0].score - b[0].score) < 1e-7 for a, b in zip(fp32, int8))  # it did compute in int8


def test_decode_takes_quantize_as_a_decode_override(run_dir):
    outputs = seqxduce.decode(run_dir, ["3 1 4 1 5"], overrides=["decode.quantize=int8"])
    assert len(outputs) == 1 and outputs[0].text


def test_an_unknown_quantization_is_refused_naming_the_key(run_dir):
    with pytest.raises(UserError, match="quantize"):
        load_run(run_dir, ["decode.quantize=int4"])


def test_quantization_off_the_cpu_is_a_user_error():
    model = nn.Sequential(nn.Linear(4, 4)).to("meta")
    with pytest.raises(UserError, match="CPU only"):
        quantize_for_decoding(model, "int8")


def _counted(step, calls: list[int]):
    def counted(*args, **kwargs):
        calls[0] += 1
        return step(*args, **kwargs)
    return counted


def test_a_compiled_step_decodes_exactly_as_the_plain_one_and_every_step_runs_compiled(run_dir):
    """Dynamo traces the model's step (eager backend here: the tracing is what can fail; inductor only turns
    the same graph into kernels) and the searches give the same outputs and scores. Every step runs one compiled
    graph: none is dropped back to eager (an op dynamo cannot trace, such as the packed Linear's MKL packing, or
    the recompile limit reached by a step that recompiles at every length), and none is cut in two."""
    plain = load_run(run_dir)
    examples = plain.task.examples("test", seqxduce.components.data_dir(plain.recipe))[:8]
    req = request_for(plain, [ex.source for ex in examples])
    settings = BeamSettings(beam=3, max_len_a=1.0, max_len_b=2)
    steps = [0]
    plain.model.step = _counted(plain.model.step, steps)
    expected_beam = beam_search(plain.model, req, settings)
    expected_greedy = greedy_search(plain.model, req, SearchSettings(max_len_a=1.0, max_len_b=2))
    assert any(isinstance(m, PackedLinear) for m in plain.model.modules())  # the CPU's fp32 decoding, as loaded
    torch._dynamo.reset()
    graphs = [0]

    def counting_backend(graph, inputs):
        return _counted(graph.forward, graphs)

    compiled = compile_step(load_run(run_dir).model, backend=counting_backend)
    assert compiled.step is not type(compiled).step
    got_beam = beam_search(compiled, req, settings)
    got_greedy = greedy_search(compiled, req, SearchSettings(max_len_a=1.0, max_len_b=2))
    for want, got in zip(expected_beam + expected_greedy, got_beam + got_greedy):
        assert [h.tokens for h in want] == [h.tokens for h in got]
        assert [h.score for h in want] == pytest.approx([h.score for h in got], abs=1e-5)
    assert graphs[0] == steps[0] > 20


def test_decode_precision_int8_quantizes_through_the_flag_road(run_dir):
    from seqxduce.decoding.changes import flag_changes

    loaded = load_run(run_dir, changes=flag_changes(precision="int8"))
    assert not any(type(m) is nn.Linear or isinstance(m, PackedLinear) for m in loaded.model.modules())
    fp32 = load_run(run_dir, ["decode.quantize=int8"], changes=flag_changes(precision="fp32"))
    # the flag wins over the recipe's quantize: float Linear layers (packed for the CPU's GEMM)
    assert any(isinstance(m, (nn.Linear, PackedLinear)) for m in fp32.model.modules())


def test_decode_precision_the_device_cannot_run_is_one_line(run_dir):
    from click.testing import CliRunner

    from seqxduce.cli import cli

    result = CliRunner().invoke(cli, ["decode", str(run_dir), "--input", "-", "--precision", "fp16",
                                      "--device", "cpu"], input="3 1 4\n")
    assert result.exit_code != 0 and "fp16 needs a CUDA device" in result.output, result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["decode", str(run_dir), "--input", "-", "--precision", "bf16"], input="3 1 4\n")
    assert result.exit_code == 0, result.output


def test_int8_packing_leaves_the_global_engine_and_stays_close_to_float():
    """The weights are packed for options.int8_engine()'s kernels (oneDNN on an AMX CPU); the process's quantized
    engine is what it was, and the int8 layer computes what the float one does within int8's error."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 300), nn.ReLU(), nn.Linear(300, 64))
    before = torch.backends.quantized.engine
    quantized = quantize_for_decoding(model, "int8")
    assert torch.backends.quantized.engine == before
    assert isinstance(model[0], nn.Linear) and not isinstance(quantized[0], nn.Linear)  # a copy was quantized
    x = torch.randn(32, 64)
    expected, got = model(x), quantized(x)
    assert not torch.equal(expected, got)
    assert ((expected - got).norm() / expected.norm()).item() < 0.05
