"""bench/train_speed.py runs end to end on the CPU for a few tiny steps and reports every figure; its plain-torch
baseline is the same model (same parameters, same counted FLOPs). No timing is checked, only that it is there."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--set", "model.d_model=16", "--set", "model.d_ff=32", "--set", "model.heads=2", "--set", "model.layers=1",
        "--steps", "2", "--warmup", "0", "--repeats", "1", "--batches", "2", "--gemm-size", "128"]
FIGURES = ["tok_s", "tok_s_min", "tok_s_max", "step_ms", "flops_per_step", "flops_per_token", "achieved_flops",
           "fraction_of_peak", "peak_memory_mb", "params"]


def bench_module():
    return load_bench("train_speed.py")


def positive(record: dict, model: str) -> None:
    figures = record["results"][model]
    for key in FIGURES:
        value = figures[key]
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (model, key, value)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_synthetic_run_prints_and_writes_every_figure(tmp_path, capsys, norm):
    out = tmp_path / "figures.json"
    returned = bench_module().main(["--synthetic", "--length", "5", "--target-tokens", "40", "--vocab", "50",
                                    "--models", "seqxduce,torch", "--set", f'model.norm="{norm}"',
                                    "--json", str(out), *TINY])
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["results"].keys() == returned["results"].keys() == {"seqxduce", "nn.Transformer"}
    for model in ("seqxduce", "nn.Transformer"):
        positive(record, model)
        assert len(record["results"][model]["windows"]) == 1
        assert record["results"][model]["vs_torch"] > 0
    # 8 pairs of 4 words + eos per step, every step
    assert record["target_tokens_per_step"] == [40, 40]
    assert record["results"]["seqxduce"]["windows"][0]["tokens"] == 80
    assert record["peak_flops"] > 0 and "fp32 128^3" in record["peak_how"]
    for key in ("date", "device", "torch", "threads", "commit"):
        assert record["environment"][key], key
    # the baseline is the same model: as many parameters, as many counted FLOPs per step
    ours, theirs = record["results"]["seqxduce"], record["results"]["nn.Transformer"]
    assert ours["params"] == theirs["params"]
    assert ours["flops_per_step"] == theirs["flops_per_step"]
    assert record["results"]["nn.Transformer"]["vs_torch"] == 1.0
    for text in ("target tok/s", "of GEMM peak", "| seqxduce ", "| nn.Transformer ", "torch " + record["environment"]
                 ["torch"], f"{record['environment']['threads']} threads", f"{norm}-norm"):
        assert text in printed, text


def test_recipe_data_times_the_recipes_own_batches(tmp_path, capsys):
    record = bench_module().main([str(ROOT / "recipes" / "quickstart.toml"), "--models", "seqxduce", *TINY,
                                  "--set", "train.max_tokens=64"])
    positive(record, "seqxduce")
    tokens = record["target_tokens_per_step"]
    assert len(tokens) == 2 and all(0 < t <= 64 for t in tokens)
    assert "recipe's train split, max_tokens 64" in record["data"]
    assert "vs_torch" not in record["results"]["seqxduce"]


def test_marian_is_skipped_with_one_line_without_transformers(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    record = bench_module().main(["--synthetic", "--length", "5", "--target-tokens", "20", "--vocab", "50",
                                  "--models", "torch,marian", *TINY])
    assert set(record["results"]) == {"nn.Transformer"}
    assert record["skipped"] == ["HF Marian: skipped, `transformers` is not installed (pip install -e '.[bench]')"]
    assert record["skipped"][0] in capsys.readouterr().out


def test_marian_runs_when_installed(capsys):
    pytest.importorskip("transformers")
    record = bench_module().main(["--synthetic", "--length", "5", "--target-tokens", "20", "--vocab", "50",
                                  "--models", "torch,marian", *TINY])
    positive(record, "HF Marian")
    assert record["results"]["HF Marian"]["params"] == record["results"]["nn.Transformer"]["params"]
    assert record["results"]["HF Marian"]["vs_marian"] == 1.0


def test_unknown_model_name_is_one_clear_error():
    with pytest.raises(SystemExit, match="unknown fairseq"):
        bench_module().main(["--synthetic", "--models", "seqxduce,fairseq", *TINY])


def test_peak_rss_window_resets_and_reads_positive():
    bench_module()  # puts bench/ on sys.path
    import bench_common
    import torch

    bench_common.reset_peak_rss()
    assert bench_common.peak_rss_mb() > 0 and bench_common.rss_mb() > 0
    timer = bench_common.StepTimer(torch.device("cpu"))
    timer.start()
    timer.step()
    timer.step()
    times = timer.times()
    assert len(times) == 2 and all(t >= 0 for t in times)
    assert bench_common.table(["a", "bb"], [["1", "2"]]).splitlines()[1] == "|---|----|"


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_run_reports_mfu_and_gpu_memory(capsys):
    record = bench_module().main(["--synthetic", "--length", "5", "--target-tokens", "40", "--vocab", "50",
                                  "--models", "seqxduce,torch", "--set", 'train.device="cuda"',
                                  "--set", 'train.precision="bf16"', *TINY])
    for model in ("seqxduce", "nn.Transformer"):
        positive(record, model)
    assert "8192^3 bf16 matmul" in record["peak_how"]
    assert record["memory"] == "torch.cuda.max_memory_allocated"
    assert "MFU" in capsys.readouterr().out


def test_a_step_without_visible_flops_borrows_the_same_models_count():
    bench = bench_module()
    seen = bench.Contender("seqxduce", lambda k: None, 100, "Trainer.train_step",
                           {"flops_per_step": 0, "flops_per_token": 0.0})
    twin = bench.Contender("nn.Transformer", lambda k: None, 100, "", {"flops_per_step": 800, "flops_per_token": 8.0})
    other = bench.Contender("bigger", lambda k: None, 200, "", {"flops_per_step": 0, "flops_per_token": 0.0})
    bench.borrow_flops([seen, twin, other])
    assert seen.figures["flops_per_step"] == 800 and seen.figures["flops_per_token"] == 8.0
    assert "counted on nn.Transformer" in seen.note
    assert other.figures["flops_per_step"] == 0  # no model of its size to borrow from
