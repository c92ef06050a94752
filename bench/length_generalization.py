"""Length generalization on the algorithmic tasks (Dehghani et al. 2019, table 2): train on lengths up to 40,
test on length 400, for the Transformer, the Universal Transformer and the Universal Transformer with ACT.

    OMP_NUM_THREADS=1 python bench/length_generalization.py --size cpu --out runs/bench_lg
    python bench/length_generalization.py --size paper --device cuda --out runs/bench_lg_paper

Every model gets the same budget: the same data, optimizer steps, batch size (max_tokens), schedule and random
position offsets. Parameter counts differ on purpose: the Universal Transformer applies one shared layer in
depth, so at the same width and depth it has about 1/depth of the Transformer's layer parameters (the table
prints each model's count). Addition writes numbers least-significant digit first (recipes/ut_addition.toml,
as tensor2tensor's data); with the recipe's [task] operands = "paired" (one token per digit position holding
both operands' digits) the task is not the paper's 'a + b', and the table's addition column says so. Test
sources have test_min_len..test_max_len symbols (both 400 by default; addition sources 'a + b' count the '+',
paired sources count digit pairs); decoding is greedy with outputs up to len(source) + 10 tokens (max_len_a 1.0,
max_len_b 10). The table gives char-acc / seq-acc (the task plugin's char_accuracy and sequence_accuracy)
beside the paper's figures. Run settings start from recipes/ut_<task>.toml; the [model] table is replaced
per model (keeping the recipe's position handling, POSITION_KEYS, so all three models share it), the size's
overrides are applied on top, and then any --set section.key=value.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

import seqxduce
from seqxduce.recipe import Recipe, build_recipe, read_toml

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
TASKS = ("copy", "reverse", "addition")
MODELS = ("transformer", "ut", "ut_act")
LABELS = {"transformer": "Transformer", "ut": "Universal Transformer", "ut_act": "Universal Transformer + ACT"}

# char-acc, seq-acc on length-400 test sets (the paper's table 2); it gives no figures for UT + ACT alone
PAPER = {
    "transformer": {"copy": (0.53, 0.03), "reverse": (0.13, 0.06), "addition": (0.07, 0.00)},
    "ut": {"copy": (0.91, 0.35), "reverse": (0.96, 0.46), "addition": (0.34, 0.02)},
}

# the recipe's [model] keys every model keeps: how positions are handled is part of the protocol, not of a model
POSITION_KEYS = ("position_offsets", "source_positions", "source_bos")

# Sizes: widths, depth, and the training budget. "paper" is the paper's base width (for a GPU; the recipes
# recipes/ut_*.toml allow ACT up to 8 steps as this does, with a fixed depth of 8 for the UT without ACT);
# "cpu" fits one run in about four minutes on one CPU thread.
SIZES: dict[str, dict[str, Any]] = {
    "paper": dict(d_model=512, d_ff=2048, heads=8, depth=6, act_max_steps=8, steps=50000, max_tokens=8192,
                  warmup_steps=4000, lr_scale=1.0, train_size=100000, test_size=500, batch_size=50,
                  curriculum_steps=10000),
    "cpu": dict(d_model=64, d_ff=256, heads=4, depth=4, act_max_steps=4, steps=1000, max_tokens=1536,
                warmup_steps=400, lr_scale=1.0, train_size=30000, test_size=100, batch_size=50,
                curriculum_steps=1500),
}


def model_table(kind: str, size: dict[str, Any], offset_max: int, recipe_model: dict[str, Any]) -> dict[str, Any]:
    """The [model] table of one of the three models at a size, with the recipe's position handling."""
    common = dict(d_model=size["d_model"], d_ff=size["d_ff"], heads=size["heads"], dropout=0.1,
                  position_offset_max=offset_max, **{k: v for k, v in recipe_model.items() if k in POSITION_KEYS})
    if kind == "transformer":
        return dict(name="transformer", layers=size["depth"], **common)
    # each road's own depth key only: the other's would be refused as a setting that does nothing
    depth = dict(act=True, act_max_steps=size["act_max_steps"]) if kind == "ut_act" else dict(steps=size["depth"])
    return dict(name="universal_transformer", **depth, **common)


def recipe_for(task: str, kind: str, size: dict[str, Any], args: argparse.Namespace) -> Recipe:
    """recipes/ut_<task>.toml with this model, budget and test lengths."""
    path = RECIPES / f"ut_{task}.toml"
    data = read_toml(path)
    data["model"] = model_table(kind, size, args.offset_max, data["model"])
    data["task"].update(test_min_len=args.test_len, test_max_len=args.test_len, test_size=size["test_size"],
                        train_size=size["train_size"], valid_size=100)
    data["train"].update(device=args.device, max_steps=size["steps"], max_tokens=size["max_tokens"],
                         warmup_steps=size["warmup_steps"], lr_scale=size["lr_scale"], validate_every=0,
                         valid_decode_examples=50, checkpoint_every=size["steps"], keep_checkpoints=1,
                         log_every=100, max_source_len=args.test_len + 2, max_target_len=args.test_len + 2,
                         seed=args.seed, curriculum_steps=size["curriculum_steps"])
    data["decode"].update(name="greedy", max_len_a=1.0, max_len_b=10, batch_size=size["batch_size"])
    return build_recipe(data, source=str(path), base_dir=RECIPES, overrides=args.set)


def run_one(task: str, kind: str, size: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Train and test one model on one task; returns accuracies, parameter count and wall times."""
    out = Path(args.out) / f"{task}_{kind}"
    start = time.perf_counter()
    recipe = recipe_for(task, kind, size, args)
    seqxduce.train(recipe, out)
    trained = time.perf_counter()
    _, report = seqxduce.decode_split(out, "test")
    decoded = time.perf_counter()
    checkpoint = max((out / "checkpoints").glob("*.pt"))
    weights = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    params = sum({t.data_ptr(): t.numel() for t in weights.values()}.values())  # tied embeddings count once
    result = dict(task=task, model=kind, operands=recipe.resolved()["task"].get("operands", "separate"),
                  char_acc=report.metrics["char_accuracy"],
                  seq_acc=report.metrics["sequence_accuracy"], params=params,
                  train_s=trained - start, decode_s=decoded - trained)
    result.update(last_logged(out))
    return result


def last_logged(run_dir: Path) -> dict[str, float]:
    """From the training log: the last ponder statistics (UT + ACT) and the last validation's accuracies
    (held-out lengths up to 40), which tell whether a model learned the task at the training lengths."""
    found: dict[str, float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        found.update({k: v for k, v in record.items() if "ponder_" in k})
        if record.get("kind") == "valid":
            found.update(valid_char_acc=record.get("valid_char_accuracy", float("nan")),
                         valid_seq_acc=record.get("valid_sequence_accuracy", float("nan")))
    return found


def table(results: list[dict[str, Any]], tasks: list[str], models: list[str]) -> str:
    """The paper's table: one row per model, char-acc / seq-acc per task, with the paper's rows beside."""
    cell = {(r["model"], r["task"]): f"{r['char_acc']:.2f} / {r['seq_acc']:.2f}" for r in results}
    lines = ["| model | " + " | ".join(column(t, results) for t in tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for kind in models:
        lines.append(f"| {LABELS[kind]} (ours) | " + " | ".join(cell.get((kind, t), "-") for t in tasks) + " |")
    for kind, figures in PAPER.items():
        lines.append(f"| {LABELS[kind]} (paper) | "
                     + " | ".join(f"{figures[t][0]:.2f} / {figures[t][1]:.2f}" for t in tasks) + " |")
    return "\n".join(lines)


def column(task: str, results: list[dict[str, Any]]) -> str:
    """A task's column name; paired addition is marked, since the paper's figures are for 'a + b'."""
    paired = task == "addition" and any(r["task"] == task and r.get("operands") == "paired" for r in results)
    return f"{task} (ours: paired operands, not the paper's 'a + b')" if paired else task


def details(results: list[dict[str, Any]]) -> str:
    """Per run: parameters, wall times, ponder statistics (source / target positions), valid accuracies."""
    lines = ["| task | model | params | train s | decode s | ponder mean / max: source, target | "
             "valid (len <= 40) char / seq |", "|---|---|---|---|---|---|---|"]
    for r in results:
        ponder = "-"
        if "src_ponder_mean" in r:
            ponder = (f"{r['src_ponder_mean']:.2f} / {r['src_ponder_max']:.0f}, "
                      f"{r['tgt_ponder_mean']:.2f} / {r['tgt_ponder_max']:.0f}")
        valid = f"{r['valid_char_acc']:.2f} / {r['valid_seq_acc']:.2f}" if "valid_char_acc" in r else "-"
        lines.append(f"| {r['task']} | {LABELS[r['model']]} | {r['params']:,} | {r['train_s']:.0f} | "
                     f"{r['decode_s']:.0f} | {ponder} | {valid} |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu", help="model widths and training budget")
    parser.add_argument("--steps", type=int, help="optimizer steps per run (default: the size's)")
    parser.add_argument("--test-len", type=int, default=400, help="test source length (paper: 400)")
    parser.add_argument("--test-size", type=int, help="test examples per task (default: the size's)")
    parser.add_argument("--lr-scale", type=float, help="factor on the inverse-sqrt schedule (default: the size's)")
    parser.add_argument("--offset-max", type=int, default=400,
                        help="training positions start at a random offset in [0, this] (0 = off)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a run setting for every run, last (e.g. --set train.lr=0.001); repeatable")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="runs/bench_length_generalization", help="parent of the run directories")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    size = dict(SIZES[args.size])
    chosen = (("steps", args.steps), ("test_size", args.test_size), ("lr_scale", args.lr_scale))
    size.update({k: v for k, v in chosen if v is not None})
    print(f"size {args.size}: {json.dumps(size)}; test length {args.test_len}; offsets up to {args.offset_max}; "
          f"overrides {args.set}", flush=True)
    results = []
    for task in args.tasks:
        for kind in args.models:
            result = run_one(task, kind, size, args)
            results.append(result)
            print(json.dumps(result), flush=True)
    Path(args.out, "results.json").write_text(json.dumps(results, indent=1))
    print(f"\nchar-acc / seq-acc on length-{args.test_len} test sets\n")
    print(table(results, args.tasks, args.models))
    print()
    print(details(results))


if __name__ == "__main__":
    main()
