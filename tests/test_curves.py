"""`seqxduce plot`: training curves of one or more runs from their metrics.jsonl, as a PNG."""

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from seqxduce.cli import add_plugin_commands
from seqxduce.inspection.curves import figure_size, panels_for, read_run_log, series
from seqxduce.inspection.plotting import pixel_size


def invoke(*args):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def write_log(path: Path, records: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def check_png(path: Path, size: tuple[int, int]) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == size
        image.verify()


def test_plot_draws_the_standard_panels_of_a_run(tiny_run, tmp_path):
    output = tmp_path / "curves.png"
    result = invoke("plot", tiny_run, "--output", output, "--dpi", "40")
    assert result.exit_code == 0, result.output
    log = read_run_log(tiny_run)
    assert log.primary() == "valid_sequence_accuracy"  # the trainer names the task's main metric
    panels = panels_for([log])
    assert [p[0] for p in panels] == ["loss (label-smoothed, per token)", "perplexity", "learning rate",
                                      "target tokens / s", "gradient norm", "task metric: valid_sequence_accuracy"]
    check_png(output, pixel_size(*figure_size(len(panels)), 40))


def test_plot_overlays_runs_against_wall_time_with_an_extra_figure(tiny_run, tmp_path):
    other = write_log(tmp_path / "other", [
        {"kind": "train", "time": 100.0, "step": 10, "loss": 3.0, "ppl": 20.0, "lr": 1e-3, "tokens_per_s": 900.0,
         "grad_norm": 1.0, "ponder_mean": 2.5},
        {"kind": "valid", "time": 160.0, "step": 10, "loss": 2.9, "ppl": 18.0, "valid_bleu": 3.5,
         "primary": "valid_bleu"},
    ])
    output = tmp_path / "both.png"
    result = invoke("plot", tiny_run, other, "--x", "time", "--figure", "ponder_mean", "--output", output)
    assert result.exit_code == 0, result.output
    assert "2 run(s)" in result.stdout
    logs = [read_run_log(tiny_run), read_run_log(other)]
    panels = panels_for(logs, ["ponder_mean"])
    # each run's own task metric gets a panel, and the extra figure one more
    assert [p[0] for p in panels][5:] == ["task metric: valid_bleu", "task metric: valid_sequence_accuracy",
                                          "ponder_mean"]
    check_png(output, pixel_size(*figure_size(len(panels)), 100))


def test_a_resumed_step_keeps_its_last_record_and_inf_is_skipped(tmp_path):
    run = write_log(tmp_path / "run", [
        {"kind": "train", "time": 1.0, "step": 2, "loss": 5.0, "ppl": "inf"},
        {"kind": "train", "time": 2.0, "step": 4, "loss": 4.0, "ppl": 50.0},
        {"kind": "train", "time": 9.0, "step": 4, "loss": 3.5, "ppl": 40.0},  # after a resume from step 2
        {"kind": "valid", "time": 9.5, "step": 4, "loss": 3.9, "ppl": 45.0},
    ])
    log = read_run_log(run)
    assert [r["step"] for r in log.train] == [2, 4]
    assert series(log.train, "loss", "step", 0.0) == ([2.0, 4.0], [5.0, 3.5])
    assert series(log.train, "ppl", "step", 0.0) == ([4.0], [40.0])
    assert series(log.train, "loss", "time", 1.0) == ([0.0, 8.0], [5.0, 3.5])


@pytest.mark.parametrize("args, message", [
    (["--figure", "nonsense"], "--figure nonsense: no run's metrics.jsonl has it"),
    (["--output", "curves.svg"], "ending in .png"),
])
def test_plot_errors_are_one_line(tiny_run, tmp_path, args, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("plot", tiny_run, *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_plot_of_a_folder_without_a_log_names_it(tmp_path):
    result = invoke("plot", tmp_path, "--output", tmp_path / "c.png")
    assert result.exit_code != 0
    assert f"{tmp_path}: no metrics.jsonl" in result.output


def test_plot_of_a_cut_off_log_names_the_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 2.0}\n{"kind": "tr')
    result = invoke("plot", run, "--output", tmp_path / "c.png")
    assert result.exit_code != 0
    assert "metrics.jsonl:2: not a JSON object" in result.output


def test_plot_without_matplotlib_says_how_to_install_it(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = invoke("plot", tiny_run, "--output", tmp_path / "c.png")
    assert result.exit_code != 0
    assert "pip install -e '.[plot]'" in result.output
    assert len(result.output.strip().splitlines()) == 1
