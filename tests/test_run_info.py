"""`seqxduce info` and the README.md training leaves in a run directory."""

import json
from pathlib import Path

from click.testing import CliRunner

from seqxduce import components
from seqxduce.cli import add_plugin_commands
from seqxduce.inspection.run_info import run_info
from seqxduce.rundir import RunDir


def invoke(*args):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def train_target_tokens(run: Path) -> int:
    """Target tokens of one epoch of the run's training data, eos included, counted from the task's examples."""
    recipe = RunDir(run).load_recipe()
    examples = components.build_task(recipe).examples("train", components.data_dir(recipe))
    return sum(len(ex.target.split()) + 1 for ex in examples)


def test_info_json_reports_the_run(tiny_run):
    result = invoke("info", tiny_run, "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert facts["step"] == 6
    assert facts["checkpoint"].endswith("average.pt") and "prefers" in facts["checkpoint_reason"]
    # the tiny model: built here and counted with torch, tied embeddings counted once
    recipe = RunDir(tiny_run).load_recipe()
    model = components.build_model(recipe, RunDir(tiny_run).tokenizers.load(recipe).vocab())
    assert facts["parameters"] == sum(p.numel() for p in model.parameters())
    # every batch holds the whole training set (max_tokens = 100000), so 6 steps are 6 epochs
    assert facts["target_tokens"] == 6 * train_target_tokens(tiny_run)
    assert facts["logged_to_step"] == 6
    assert facts["vocabulary"] == {"source": 14, "target": 14, "shared": True}
    steps, average, best = facts["checkpoints"][:-2], facts["checkpoints"][-2], facts["checkpoints"][-1]
    assert [c["step"] for c in steps] == [2, 4, 6] and average["step"] == 6
    assert average["averaged_from"] == ["step_00000004.pt", "step_00000006.pt"]
    # best.pt: the first validation with the best sequence accuracy (validations at steps 3 and 6)
    valid = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    scores = [(r["valid_sequence_accuracy"], -r["step"]) for r in valid if r["kind"] == "valid"]
    top = max(scores)
    assert best["file"] == "best.pt" and best["step"] == -top[1] and best["best"]["value"] == top[0]
    assert facts["recipe"]["model"]["name"] == "transformer"
    assert facts["recipe"]["model"]["changed"]["d_model"] == 16
    assert facts["recipe"]["train"]["changed"]["average_last"] == 2
    assert facts["best_metric"]["name"] == "valid_sequence_accuracy"
    valid = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()
             if '"valid"' in line]
    best = max(valid, key=lambda r: r["valid_sequence_accuracy"])
    assert facts["best_metric"]["value"] == best["valid_sequence_accuracy"]
    assert facts["best_metric"]["step"] == best["step"]
    assert facts["best_valid_loss"]["value"] == min(r["loss"] for r in valid)
    assert {"python", "torch", "seqxduce"} <= set(facts["versions"])


def test_info_text_names_the_file_decode_uses_and_why(tiny_run):
    result = invoke("info", tiny_run)
    assert result.exit_code == 0, result.output
    decode = next(line for line in result.stdout.splitlines() if line.startswith("decode uses"))
    assert "average.pt" in decode and "prefers" in decode
    assert "steps 2, 4, 6 in checkpoints/" in result.stdout
    assert "best valid_sequence_accuracy" in result.stdout and "best valid loss" in result.stdout


def test_info_on_a_named_checkpoint_counts_tokens_to_its_step(tiny_run):
    checkpoint = tiny_run / "checkpoints" / "step_00000004.pt"
    facts = run_info(checkpoint)
    assert facts.checkpoint == str(checkpoint) and facts.checkpoint_reason == "named on the command line"
    assert facts.step == 4
    assert facts.target_tokens == 4 * train_target_tokens(tiny_run)


def test_info_without_average_uses_the_latest_step(tiny_run, tmp_path):
    copy = tmp_path / "run"
    copy.mkdir()
    for item in tiny_run.iterdir():
        if item.name != "average.pt":
            target = copy / item.name
            if item.is_dir():
                target.mkdir()
                for f in item.iterdir():
                    (target / f.name).write_bytes(f.read_bytes())
            else:
                target.write_bytes(item.read_bytes())
    facts = run_info(copy)
    assert facts.checkpoint.endswith("step_00000006.pt")
    assert "newest readable step checkpoint" in facts.checkpoint_reason


def test_info_on_a_folder_that_is_no_run_is_one_line(tmp_path):
    result = invoke("info", tmp_path)
    assert result.exit_code != 0
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_training_leaves_a_readme_whose_commands_work(tiny_run, tmp_path):
    readme = (tiny_run / "README.md").read_text()
    assert "model **transformer**" in readme and "task **algorithmic**" in readme
    assert "trained for 6 steps" in readme
    assert f"seqxduce decode {tiny_run} --split test" in readme
    resume = next(line for line in readme.splitlines() if "--resume" in line)
    assert resume.startswith(f"seqxduce train {tiny_run / 'recipe.toml'} --out {tiny_run} --resume")
    # the resume command, run on a copy of the run, trains on from step 6
    copy = tmp_path / "copy"
    copy.mkdir()
    for item in tiny_run.rglob("*"):
        target = copy / item.relative_to(tiny_run)
        if item.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(item.read_bytes())
    args = resume.split("#")[0].replace(str(tiny_run), str(copy)).split()[1:]
    assert args[-1] == "train.max_steps=12"
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "trained to step 12" in result.output
    assert "trained for 12 steps" in (copy / "README.md").read_text()
