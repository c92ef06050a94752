"""[train] tensorboard = true mirrors metrics.jsonl into TensorBoard event files."""

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seqxduce.cli import add_plugin_commands
from tests.tiny import TINY_RECIPE as RECIPE


def train(out: Path, *overrides: str):
    args = ["train", str(RECIPE), "--out", str(out)]
    for value in overrides:
        args += ["--set", value]
    return CliRunner().invoke(add_plugin_commands(), args)


def test_tensorboard_gets_the_figures_of_metrics_jsonl(tmp_path):
    run = tmp_path / "run"
    result = train(run, "train.tensorboard=true", "train.max_steps=4")
    assert result.exit_code == 0, result.output
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["kind"] == "train"]
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [r["step"] for r in train_records] == [2, 4]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in train_records], rel=1e-6)  # float32
    valid = [r for r in records if r["kind"] == "valid"]
    accuracy = events.Scalars("valid/valid_sequence_accuracy")
    assert [e.step for e in accuracy] == [r["step"] for r in valid]
    assert "train/lr" in events.Tags()["scalars"] and "valid/ppl" in events.Tags()["scalars"]


def test_tensorboard_missing_is_one_line_before_training(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # importing it now fails
    result = train(tmp_path / "run", "train.tensorboard=true")
    assert result.exit_code != 0
    assert "pip install -e '.[tensorboard]'" in result.output and "tensorboard = false" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_tensorboard_is_off_by_default(tiny_run):
    assert not (tiny_run / "tensorboard").exists()
