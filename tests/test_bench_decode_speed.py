"""bench/decode_speed.py runs end to end on a tiny model and reports every figure (no timing thresholds), and its
torch.nn baseline search keeps the forced output length."""

import json

import torch

from tests.bench_scripts import load_bench


def bench_module():
    return load_bench("decode_speed.py")


def test_smoke_two_tiny_sources_give_every_figure(tmp_path, capsys):
    bench = bench_module()
    out = tmp_path / "figures.json"
    threads = torch.get_num_threads()
    try:
        results = bench.main(["--sizes", "tiny", "--sources", "2", "--src-len", "5", "--out-len", "4",
                              "--repeats", "1", "--threads", "1", "--no-ct2", "--quantize", "int8",
                              "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    written = json.loads(out.read_text())
    assert written["results"] == results
    assert written["meta"]["out_len"] == 4
    for beam in (4, 1):
        for system in ("seqxduce", "seqxduce-int8", "torch"):
            figures = results[f"tiny/beam{beam}/{system}"]
            assert figures["tokens"] == 2 * 4  # two sources, forced to 4 tokens each
            assert figures["tok_s"] > 0 and figures["sec_median"] > 0 and figures["peak_rss_mb"] > 0
    printed = capsys.readouterr().out
    assert "tiny/beam4/seqxduce " in printed and "x torch" in printed


def test_the_torch_baseline_forces_its_length_and_never_picks_a_banned_id():
    bench = bench_module()
    torch.manual_seed(0)
    model = bench.torch_baseline.TorchSeq2Seq(50, 0, 16, 2, 32, 1, 1).eval()
    src = torch.randint(4, 50, (3, 6))
    for beam in (1, 3):
        out = bench.torch_baseline.generate(model, src, beam, 7, 1, [0, 1, 2])
        assert out.shape == (3, 7)
        assert not torch.isin(out, torch.tensor([0, 1, 2])).any()
