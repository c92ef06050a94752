"""Training features beside the loop: the cosine and linear learning-rate schedules, early stopping with best.pt
(kept exactly across --resume), and fine-tuning from another run (--init-from, --keep-optimizer)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.settings import TrainSettings
from seqxduce.settings_check import check_settings
from seqxduce.training.early_stopping import improves
from seqxduce.training.optim import decayed_lr, learning_rate
from tests.tiny import TINY_RECIPE as RECIPE

# sequence accuracy on the tiny task stays at its first value for many steps: validations that do not improve
PATIENT = ["train.patience=2", "train.validate_every=1", "train.checkpoint_every=1", "train.max_steps=30",
           "train.log_every=1"]


@pytest.fixture(scope="module")
def cli():
    return add_plugin_commands()


def invoke(cli, *args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def settings(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


# ------------------------------------------------------------ schedules

@pytest.mark.parametrize("shape", ["cosine", "linear"])
def test_decayed_schedules_warm_up_linearly_then_decay_to_the_floor(shape):
    peak, floor, warmup, total = 1e-3, 1e-5, 10, 110
    values = [decayed_lr(step, peak, floor, warmup, total, shape) for step in range(1, 131)]
    assert values[:10] == pytest.approx([peak * k / 10 for k in range(1, 11)])  # warm-up, peak at step 10
    assert max(values) == pytest.approx(peak)
    assert all(a >= b for a, b in zip(values[9:], values[10:]))  # then never rises
    assert values[59] == pytest.approx((peak + floor) / 2)  # half-way through the decay, both shapes
    quarter = decayed_lr(35, peak, floor, warmup, total, shape)
    expected = 0.5 * (1 + math.cos(math.pi / 4)) if shape == "cosine" else 0.75
    assert quarter == pytest.approx(floor + (peak - floor) * expected)
    assert values[109:] == pytest.approx([floor] * 21)  # the floor at max_steps and after


def test_learning_rate_reads_the_schedule_from_the_settings():
    s = TrainSettings(schedule="cosine", lr=2e-3, lr_floor=1e-4, warmup_steps=5, max_steps=25)
    assert learning_rate(s, 5, None) == pytest.approx(2e-3)  # needs no d_model, unlike inverse_sqrt
    assert learning_rate(s, 25, None) == pytest.approx(1e-4)
    linear = TrainSettings(schedule="linear", lr=2e-3, warmup_steps=5, max_steps=25)
    assert learning_rate(linear, 15, None) == pytest.approx(1e-3)


def test_the_new_keys_are_checked():
    with pytest.raises(UserError, match="lr_floor = 0.01 must be below lr"):
        check_settings(TrainSettings(schedule="cosine", lr=1e-3, lr_floor=1e-2))
    with pytest.raises(UserError, match="patience = 3 counts validations, but validate_every = 0"):
        check_settings(TrainSettings(patience=3, validate_every=0))
    check_settings(TrainSettings(schedule="inverse_sqrt", lr=1e-3, lr_floor=1e-2))  # the floor is cosine/linear's
    assert improves(0.5, None, True) and improves(0.4, 0.5, False) and not improves(0.5, 0.5, True)
    assert not improves(float("nan"), None, True)


def test_the_new_keys_show_in_recipe_show_and_bad_values_are_one_line(cli):
    shown = invoke(cli, "recipe", "show", RECIPE, *settings('train.schedule="cosine"', "train.lr_floor=1e-05"))
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    for key in ("schedule = \"cosine\"", "lr_floor = 1e-05", "patience = 0"):
        line = next(line for line in lines if line.startswith(key))
        assert "#" in line or key.startswith("schedule"), line  # each key with its help
    assert any("decay" in line for line in lines)
    for bad, said in (('train.schedule="step"', "schedule"), ("train.patience=-1", "patience"),
                      ("train.lr_floor=-1", "lr_floor")):
        result = invoke(cli, "recipe", "show", RECIPE, "--set", bad)
        assert result.exit_code != 0 and said in result.output and "Traceback" not in result.output, result.output
    result = invoke(cli, "train", RECIPE, "--out", "unused", *settings('train.schedule="linear"', "train.lr=1e-3",
                                                                      "train.lr_floor=1e-2"))
    assert result.exit_code != 0 and "lr_floor = 0.01 must be below lr = 0.001" in result.output


# ------------------------------------------------------------ early stopping and best.pt

def _records(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def _expected_stop(valid: list[dict], patience: int) -> tuple[int, int, float]:
    """(stop step, best step, best value) that the rule gives on the logged validations."""
    best = best_step = None
    bad = 0
    for record in valid:
        value = record["valid_sequence_accuracy"]
        if best is None or value > best:
            best, best_step, bad = value, record["step"], 0
        else:
            bad += 1
            if bad == patience:
                return record["step"], best_step, best
    raise AssertionError("the validations never ran out of patience")


@pytest.fixture(scope="module")
def patient_run(tmp_path_factory, cli) -> Path:
    out = tmp_path_factory.mktemp("early") / "run"
    result = invoke(cli, "train", RECIPE, "--out", out, *settings(*PATIENT))
    assert result.exit_code == 0, result.output
    return out


def test_patience_stops_training_and_best_pt_holds_the_best_validation(patient_run, cli):
    valid = _records(patient_run, "valid")
    stop, best_step, best_value = _expected_stop(valid, 2)
    assert stop < 30 and valid[-1]["step"] == stop  # no validation after the stop
    assert _records(patient_run, "stopped")[-1] == {**_records(patient_run, "stopped")[-1], "reason": "patience",
                                                    "step": stop, "best_step": best_step}
    best = torch.load(patient_run / "best.pt", weights_only=True)
    assert (best["step"], best["metric"], best["value"]) == (best_step, "valid_sequence_accuracy", best_value)
    saved = torch.load(patient_run / "checkpoints" / f"step_{best_step:08d}.pt", weights_only=True)
    assert all(torch.equal(best["model"][k], saved["model"][k]) for k in saved["model"])
    last = torch.load(sorted((patient_run / "checkpoints").glob("step_*.pt"))[-1], weights_only=True)
    assert last["step"] == stop and last["best"] == {"value": best_value, "step": best_step, "bad_validations": 2}
    info = invoke(cli, "info", patient_run)
    assert info.exit_code == 0 and f"best.pt (step {best_step}, the best validation" in info.output, info.output
    again = invoke(cli, "train", RECIPE, "--out", patient_run, "--resume")  # nothing left: patience was spent
    assert again.exit_code == 0 and "early stopping ended the run" in again.output, again.output


def test_resume_keeps_the_patience_record_exactly(patient_run, tmp_path, cli):
    stop = _records(patient_run, "valid")[-1]["step"]
    first = invoke(cli, "train", RECIPE, "--out", tmp_path / "split", *settings(*PATIENT, "train.max_steps=2"))
    assert first.exit_code == 0, first.output
    if stop <= 2:
        pytest.skip("the whole run stopped within the first part")
    resumed = invoke(cli, "train", RECIPE, "--out", tmp_path / "split", "--resume", *settings("train.max_steps=30"))
    assert resumed.exit_code == 0, resumed.output
    whole, split = (torch.load(sorted((run / "checkpoints").glob("step_*.pt"))[-1], weights_only=True)
                    for run in (patient_run, tmp_path / "split"))
    assert (split["step"], split["best"]) == (whole["step"], whole["best"])
    a, b = (torch.load(run / "best.pt", weights_only=True) for run in (patient_run, tmp_path / "split"))
    assert a["step"] == b["step"] and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


# ------------------------------------------------------------ fine-tuning

def test_init_from_starts_from_the_runs_weights_with_its_tokenizers(tiny_run, tmp_path, cli):
    out = tmp_path / "tuned"
    result = invoke(cli, "train", RECIPE, "--out", out, "--init-from", tiny_run,
                    *settings("train.max_steps=0", "train.lr_scale=0.5"))
    assert result.exit_code == 0, result.output
    source = torch.load(tiny_run / "average.pt", weights_only=True)["model"]  # what decode uses: the average
    start = torch.load(out / "checkpoints" / "step_00000000.pt", weights_only=True)
    assert all(torch.equal(source[k], start["model"][k]) for k in source)
    assert all(not s["exp_avg"].any() for s in start["optimizer"]["state"].values()) or not start["optimizer"]["state"]
    names = [p.name for p in tiny_run.iterdir() if p.name.startswith("tokenizer")]
    assert names and all((tiny_run / n).read_bytes() == (out / n).read_bytes() for n in names)


def test_keep_optimizer_takes_the_checkpoints_optimizer_state(tiny_run, tmp_path, cli):
    step = sorted((tiny_run / "checkpoints").glob("step_*.pt"))[-1]
    out = tmp_path / "tuned"
    result = invoke(cli, "train", RECIPE, "--out", out, "--init-from", step, "--keep-optimizer",
                    *settings("train.max_steps=0"))
    assert result.exit_code == 0, result.output
    before = torch.load(step, weights_only=True)["optimizer"]["state"]
    after = torch.load(out / "checkpoints" / "step_00000000.pt", weights_only=True)["optimizer"]["state"]
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k]["exp_avg"], after[k]["exp_avg"]) for k in before)
    refused = invoke(cli, "train", RECIPE, "--out", tmp_path / "other", "--init-from", tiny_run / "average.pt",
                     "--keep-optimizer")
    assert refused.exit_code != 0 and "holds no optimizer state" in refused.output, refused.output


@pytest.mark.parametrize("change, said", [("model.d_model=32", "[model] d_model = 16 there but 32 in this recipe"),
                                          ("tokenizer.shared=false", "[tokenizer] shared = True there but False")])
def test_init_from_refuses_another_architecture_or_vocabulary_in_one_line(tiny_run, tmp_path, cli, change, said):
    result = invoke(cli, "train", RECIPE, "--out", tmp_path / "tuned", "--init-from", tiny_run, "--set", change)
    assert result.exit_code != 0 and said in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "tuned").exists()  # refused before any work


def test_validation_decodes_in_the_batches_decode_would_use(tmp_path, monkeypatch):
    """[decode] batch_tokens sizes validation's decoding batches as it sizes `seqxduce decode`'s."""
    import seqxduce.decoding.decode as decoding
    from seqxduce import engine

    seen = []
    real = decoding.decode_sources

    def spy(run, *args, **kwargs):
        seen.append(run.recipe.decode.core.batch_tokens)  # what decode_sources batches by
        return real(run, *args, **kwargs)

    monkeypatch.setattr(decoding, "decode_sources", spy)
    engine.train(RECIPE, tmp_path / "run", overrides=["train.max_steps=2", "train.validate_every=2",
                                                       "train.valid_decode_examples=3", "decode.batch_tokens=40"])
    assert seen and all(given == 40 for given in seen), seen


def test_init_from_refuses_a_run_of_several_members_and_a_recipe_of_several(tiny_run, tmp_path, cli):
    """Fine-tuning starts one model from one: a multi-member run's directory is member 1 alone, so naming it would
    silently drop the others; a recipe with members = N would train N models from one."""
    import shutil

    whole = tmp_path / "ensemble"
    shutil.copytree(tiny_run, whole)
    (whole / "members" / "2").mkdir(parents=True)
    (whole / "members" / "members.toml").write_text("", encoding="utf-8")
    refused = invoke(cli, "train", RECIPE, "--out", tmp_path / "tuned", "--init-from", whole)
    assert refused.exit_code != 0 and "a run of 2 members" in refused.output, refused.output
    assert "Traceback" not in refused.output and not (tmp_path / "tuned").exists()
    members = invoke(cli, "train", RECIPE, "--out", tmp_path / "tuned", "--init-from", tiny_run,
                     "--set", "train.members=2")
    assert members.exit_code != 0 and "add --set train.members=1" in members.output, members.output
    one = invoke(cli, "train", RECIPE, "--out", tmp_path / "tuned", "--init-from", whole / "average.pt",
                 *settings("train.max_steps=0"))  # one member named: taken
    assert one.exit_code == 0, one.output


def test_the_end_of_a_run_names_the_checkpoints_it_really_averaged(tmp_path, cli):
    """An early-stopped or short run has fewer checkpoints than average_last: the message counts the real ones."""
    result = invoke(cli, "train", RECIPE, "--out", tmp_path / "run",
                    *settings("train.max_steps=4", "train.checkpoint_every=2", "train.average_last=5"))
    assert result.exit_code == 0, result.output
    assert "averaged the last 2 checkpoints (steps 2, 4; average_last = 5, but the run has 2)" in result.output
    averaged = torch.load(tmp_path / "run" / "average.pt", weights_only=True)
    assert averaged["averaged_steps"] == [2, 4]
