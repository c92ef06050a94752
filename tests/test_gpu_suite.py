"""bench/gpu_suite.py runs every section end to end at its tiny CPU sizes (what a lent GPU runs at full size), so
that it cannot rot between GPU sessions. Figures are not checked against thresholds: only that each is there."""

import json

import torch

from tests.bench_scripts import load_bench


def test_tiny_suite_prints_one_table_with_every_section(tmp_path, capsys):
    suite = load_bench("gpu_suite.py")
    out = tmp_path / "suite.json"
    threads = torch.get_num_threads()
    try:
        record = suite.main(["--device", "cpu", "--tokens", "256", "--ut-steps", "2", "--json", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert record["tiny"] and json.loads(out.read_text())["rows"] == record["rows"]
    failed = [row for row in record["rows"] if row[-1].startswith("failed")]
    assert not failed, failed
    measured = {row[0]: row for row in record["rows"] if row[4] != "-"}
    assert set(measured) == {"train bf16", "decode greedy", "decode beam 4", "UT copy, 2 steps", "UT reverse, 2 steps"}
    for row in measured.values():
        assert float(row[4].replace(",", "")) > 0  # target tokens/s
    assert record["figures"]["train/tiny/256/off"]["flops_per_token"] > 0
    assert len(record["figures"]["ut/copy"]["loss_per_token"]) == 2
    printed = capsys.readouterr().out
    assert printed.count("| train bf16 ") == 1 and "| measurement " in printed
    assert "torch " + torch.__version__ in printed


def test_a_failing_row_is_reported_in_the_table_and_the_suite_goes_on():
    suite = load_bench("gpu_suite.py")
    rows, figures = [], {}

    def broken():
        raise RuntimeError("CUDA out of memory\nmore")

    suite.guarded(rows, figures, "train/big/65536/on", ["train bf16", "big", "65,536 tok", "on"], broken)
    suite.guarded(rows, figures, "ok", ["x"], lambda: rows.append(["after"]))
    assert rows[0][-1] == "failed: RuntimeError: CUDA out of memory" and rows[1] == ["after"]
    assert "Traceback" in figures["train/big/65536/on"]["error"]
