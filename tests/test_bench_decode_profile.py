"""bench/decode_profile.py profiles a tiny search end to end and prints each operator's share (no timing
thresholds)."""

import torch

from tests.bench_scripts import load_bench


def test_a_tiny_search_is_profiled_operator_by_operator(capsys):
    bench = load_bench("decode_profile.py")
    threads = torch.get_num_threads()
    try:
        ops = bench.main(["--size", "tiny", "--sources", "2", "--src-len", "5", "--out-len", "4", "--searches", "1"])
    finally:
        torch.set_num_threads(threads)
    assert any(name in ops for name in bench.GEMMS) and all(o["calls"] > 0 for o in ops.values())
    printed = capsys.readouterr().out
    assert "self CPU in all" in printed and "GEMMs (" in printed


def test_the_int8_path_is_profiled_with_its_quantized_linear_layers(capsys):
    bench = load_bench("decode_profile.py")
    threads = torch.get_num_threads()
    try:
        ops = bench.main(["--size", "tiny", "--sources", "2", "--src-len", "5", "--out-len", "4", "--searches", "1",
                          "--quantize", "int8"])
    finally:
        torch.set_num_threads(threads)
    assert "quantized::linear_dynamic" in ops and "aten::addmm" not in ops  # every Linear quantized
    assert "tiny int8, beam 4" in capsys.readouterr().out
