"""Table 3 of "Attention Is All You Need" at a CPU scale: each row's change trained on Multi30k en-de with one
budget, dev perplexity and BLEU beside the paper's (newstest2013), and whether the paper's orderings hold.

    OMP_NUM_THREADS=1 nice -n 19 python bench/table3.py --budget 800 --out runs/bench_table3
    python bench/table3.py --budget 20000 --warmup 4000 --lr-scale 1 --d-model 256 --max-tokens 4096 --device cuda

A row's change is read from its recipe in recipes/wmt14_en_de_table3/: the [model] and [train] values it sets
differently from base.toml. The change is applied to a small base model, itself the paper's base scaled down:
widths (d_model, d_ff, d_k, d_v) times d_model / 512, depth N times layers / 6 (rounded, at least 1); heads,
dropout, label smoothing and the position signal are taken as they are. Every row gets the same budget: the
same number of optimizer steps on batches of the same max_tokens, the same warm-up and the same lr_scale on
the paper's schedule (eq. 3, so a row with another d_model gets the paper's d_model^-0.5 peak; the big row,
trained 3x longer in the paper, gets the same budget here). Data, tokenizer and decoding come from
recipes/multi30k_en_de.toml: joint BPE, beam 4 with length penalty 0.6 (as the paper's Table 3). Dev
perplexity is exp(per-token NLL without smoothing) on the whole val split, as the trainer logs it; dev BLEU is
sacreBLEU of a beam decode of the whole val split. An ordering holds when our dev perplexities order the
rows as the paper's claim says (lower is better); BLEU's agreement is shown beside it. A row already run in
--out with the same budget and scale (its result.json) is read back, not trained again, so an interrupted run
continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import seqxduce
from seqxduce.inspection.cost import training_cost
from seqxduce.recipe import Recipe, build_recipe, load_recipe, read_toml

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
TABLE3 = RECIPES / "wmt14_en_de_table3"
DATA_RECIPE = RECIPES / "multi30k_en_de.toml"
PAPER_D_MODEL, PAPER_LAYERS = 512, 6
WIDTH_KEYS = ("d_model", "d_ff", "d_k", "d_v")
IGNORED = ("preset", "max_steps")  # a preset's values are in the resolved keys; steps are the budget
# what a finished row's result depends on besides its recipe: a row run with other values is run again
BUDGET_KEYS = ("budget", "d_model", "layers", "max_tokens", "warmup", "lr_scale", "vocab", "seed", "device")

# The paper's Table 3 (newstest2013): dev perplexity per wordpiece, dev BLEU, parameters in millions (None: not
# given). Rows in the table's order; the names are the recipes' file names.
PAPER: dict[str, tuple[float, float, int | None]] = {
    "base": (4.92, 25.8, 65),
    "a_heads1": (5.29, 24.9, None),
    "a_heads4": (5.00, 25.5, None),
    "a_heads16": (4.91, 25.8, None),
    "a_heads32": (5.01, 25.4, None),
    "b_dk16": (5.16, 25.1, 58),
    "b_dk32": (5.01, 25.4, 60),
    "c_layers2": (6.11, 23.7, 36),
    "c_layers4": (5.19, 25.3, 50),
    "c_layers8": (4.88, 25.5, 80),
    "c_dmodel256": (5.75, 24.5, 28),
    "c_dmodel1024": (4.66, 26.0, 168),
    "c_dff1024": (5.12, 25.4, 53),
    "c_dff4096": (4.75, 26.2, 90),
    "d_dropout_0.0": (5.77, 24.6, None),
    "d_dropout_0.2": (4.95, 25.5, None),
    "d_label_smoothing_0.0": (4.67, 25.3, None),
    "d_label_smoothing_0.2": (5.47, 25.7, None),
    "e_learned_positions": (4.92, 25.7, None),
    "big": (4.33, 26.4, 213),
}


@dataclass
class Check:
    """A claim of the paper's section 6.2 as comparisons of a lower-is-better figure (dev perplexity, or BLEU
    negated): each (worse, better) pair must have the worse row's figure higher; with `equal`, the rows of
    each pair within `tolerance` (relative) of each other."""

    claim: str
    pairs: tuple[tuple[str, str], ...]
    equal: bool = False
    tolerance: float = 0.03  # relative difference still "about equal" (3% of PPL 4.92 = 0.15; of BLEU 25.8 = 0.8)

    def holds(self, ppl: dict[str, float]) -> bool | None:
        """Whether the claim holds on these perplexities (None when a pair's rows were not run)."""
        pairs = [(a, b) for a, b in self.pairs if a in ppl and b in ppl]
        if not pairs:
            return None
        if self.equal:
            return all(abs(ppl[a] - ppl[b]) <= self.tolerance * max(abs(ppl[a]), abs(ppl[b])) for a, b in pairs)
        return all(ppl[a] > ppl[b] for a, b in pairs)


CHECKS = (
    Check("(A) single head worse than 8 heads", (("a_heads1", "base"),)),
    Check("(A) too many heads worse again: 32 heads worse than 8", (("a_heads32", "base"),)),
    Check("(B) smaller d_k hurts: d_k 16 and 32 worse than 64", (("b_dk16", "base"), ("b_dk32", "base"))),
    Check("(B) d_k 16 worse than d_k 32", (("b_dk16", "b_dk32"),)),
    Check("(C) fewer layers worse: N = 2 and 4 worse than 6", (("c_layers2", "base"), ("c_layers4", "base"))),
    Check("(C) more layers better: N = 8 better than 6", (("base", "c_layers8"),)),
    Check("(C) narrower worse, wider better (d_model 256 < 512 < 1024)",
          (("c_dmodel256", "base"), ("base", "c_dmodel1024"))),
    Check("(C) smaller d_ff worse, bigger better (1024 < 2048 < 4096)", (("c_dff1024", "base"), ("base", "c_dff4096"))),
    Check("(C) big better than base", (("base", "big"),)),
    Check("(D) no dropout worse (overfits)", (("d_dropout_0.0", "base"),)),
    Check("(D) no label smoothing: lower perplexity (5.4: smoothing hurts perplexity)",
          (("base", "d_label_smoothing_0.0"), ("d_label_smoothing_0.2", "base"))),
    Check("(E) learned positions about equal to sinusoids (within 3%)", (("e_learned_positions", "base"),),
          equal=True),
)


def row_change(name: str) -> dict[str, dict[str, Any]]:
    """The [model] and [train] values recipes/wmt14_en_de_table3/<name>.toml sets differently from base.toml."""
    base = load_recipe(TABLE3 / "base.toml").resolved()
    row = load_recipe(TABLE3 / f"{name}.toml").resolved()
    return {section: {key: value for key, value in row[section].items()
                      if base[section].get(key) != value and key not in IGNORED}
            for section in ("model", "train")}


def scaled(values: dict[str, Any], d_model: int, layers: int) -> dict[str, Any]:
    """Model values of the paper's scale at the small scale (see the module docstring)."""
    out = {}
    for key, value in values.items():
        if key in WIDTH_KEYS and value:
            value = max(1, round(value * d_model / PAPER_D_MODEL))
        elif key == "layers":
            value = max(1, round(value * layers / PAPER_LAYERS))
        out[key] = value
    return out


def small_base(d_model: int, layers: int) -> dict[str, Any]:
    """The base row's [model] values (base.toml) at the small scale."""
    model = load_recipe(TABLE3 / "base.toml").resolved()["model"]
    keys = ("layers", "d_model", "d_ff", "heads", "d_k", "d_v", "dropout", "positions", "share_embeddings")
    return scaled({key: model[key] for key in keys}, d_model, layers)


def recipe_for(name: str, args: argparse.Namespace) -> tuple[Recipe, dict[str, Any]]:
    """The Multi30k recipe training row `name`'s change at the small scale; and that change, scaled."""
    change = row_change(name)
    model_change = scaled(change["model"], args.d_model, args.layers)
    data = read_toml(DATA_RECIPE)
    data["model"] = {"name": "transformer", **small_base(args.d_model, args.layers), **model_change}
    if args.data:
        data["task"]["data_dir"] = str(Path(args.data).resolve())
    data["tokenizer"]["vocab_size"] = args.vocab
    data["train"].update(device=args.device, max_steps=args.budget, max_tokens=args.max_tokens,
                         warmup_steps=args.warmup or max(1, args.budget // 5), lr_scale=args.lr_scale,
                         validate_every=0, valid_decode_examples=0, checkpoint_every=args.budget,
                         keep_checkpoints=1, average_last=0, log_every=max(1, args.budget // 10), seed=args.seed,
                         **change["train"])
    data["decode"].update(batch_size=args.decode_batch)
    return build_recipe(data, source=f"{DATA_RECIPE} + Table 3 {name}", base_dir=RECIPES), \
        {**model_change, **change["train"]}


def dev_perplexity(run_dir: Path) -> float:
    """The last validation perplexity in a run's metrics.jsonl."""
    ppl = [json.loads(line)["ppl"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
           if json.loads(line).get("kind") == "valid"]
    return ppl[-1]


def run_row(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one row and score it on the dev split; a finished row's result.json is read back instead."""
    out = Path(args.out) / name
    done = out / "result.json"
    budget = {key: getattr(args, key) for key in BUDGET_KEYS}
    if done.is_file() and json.loads(done.read_text()).get("budget") == budget:
        return json.loads(done.read_text())
    recipe, change = recipe_for(name, args)
    if out.exists():  # an interrupted row: start it again
        import shutil

        shutil.rmtree(out)
    wall, cpu = time.perf_counter(), time.process_time()
    seqxduce.train(recipe, out)
    _, report = seqxduce.decode_split(out, "valid")
    cost = training_cost(recipe, out)
    result = dict(row=name, change=change, ppl=dev_perplexity(out), bleu=report.metrics["bleu"],
                  params=cost.parameters if cost else None, flops_per_step=cost.flops_per_step if cost else None,
                  budget=budget, cpu_s=time.process_time() - cpu, wall_s=time.perf_counter() - wall)
    done.write_text(json.dumps(result, indent=1))
    return result


def change_text(change: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in change.items()) or "-"


def results_table(results: list[dict[str, Any]]) -> str:
    """One line per row: its scaled change, our dev PPL and BLEU, the paper's, parameters and CPU time."""
    lines = ["| row | change (small scale) | params | dev PPL | dev BLEU | paper PPL | paper BLEU | paper params | "
             "CPU s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ppl, bleu, params = PAPER[r["row"]]
        ours_params = f"{r['params'] / 1e6:.2f}M" if r["params"] else "-"
        lines.append(f"| {r['row']} | {change_text(r['change'])} | {ours_params} | {r['ppl']:.2f} | "
                     f"{r['bleu']:.1f} | {ppl:.2f} | {bleu:.1f} | {f'{params}M' if params else '-'} | "
                     f"{r['cpu_s']:.0f} |")
    return "\n".join(lines)


def checks_table(results: list[dict[str, Any]]) -> str:
    """Each claim: whether it holds on our dev PPL (and on our BLEU, higher better), and on the paper's."""
    ours_ppl = {r["row"]: r["ppl"] for r in results}
    ours_bleu = {r["row"]: -r["bleu"] for r in results}  # negated: a worse row has the higher value
    paper_ppl = {name: figures[0] for name, figures in PAPER.items()}
    paper_bleu = {name: -figures[1] for name, figures in PAPER.items()}
    words = {True: "yes", False: "**no**", None: "not run"}
    lines = ["| claim (paper sec. 6.2) | rows | holds here (PPL) | BLEU agrees | paper PPL | paper BLEU |",
             "|---|---|---|---|---|---|"]
    for check in CHECKS:
        rows = "; ".join(f"{a} vs {b}" for a, b in check.pairs)
        figures = (check.holds(ours_ppl), check.holds(ours_bleu), check.holds(paper_ppl), check.holds(paper_bleu))
        run = sum(a in ours_ppl and b in ours_ppl for a, b in check.pairs)
        partly = f" ({run} of {len(check.pairs)} pairs run)" if 0 < run < len(check.pairs) else ""
        lines.append(f"| {check.claim} | {rows} | {words[figures[0]]}{partly} | "
                     + " | ".join(words[f] for f in figures[1:]) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=800, help="optimizer steps per row, the same for every row")
    parser.add_argument("--rows", nargs="+", choices=sorted(PAPER), default=list(PAPER),
                        help="rows to run (default: all of Table 3)")
    parser.add_argument("--d-model", type=int, default=128, help="width of the small base model (paper: 512)")
    parser.add_argument("--layers", type=int, default=3, help="encoder and decoder layers of the small base (paper 6)")
    parser.add_argument("--max-tokens", type=int, default=1536, help="source + target tokens per batch")
    parser.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: budget / 5)")
    parser.add_argument("--lr-scale", type=float, default=0.25, help="factor on the paper's schedule (eq. 3)")
    parser.add_argument("--vocab", type=int, default=8000, help="joint BPE vocabulary size")
    parser.add_argument("--data", help="Multi30k directory (default: the data_dir of recipes/multi30k_en_de.toml)")
    parser.add_argument("--decode-batch", type=int, default=128, help="sentences decoded together")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="runs/bench_table3", help="parent of the run directories")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    print(f"budget {args.budget} steps x {args.max_tokens} tokens per row; small base d_model {args.d_model}, "
          f"N = {args.layers}; rows: {', '.join(args.rows)}", flush=True)
    results = []
    for name in args.rows:
        result = run_row(name, args)
        results.append(result)
        print(json.dumps(result), flush=True)
    Path(args.out, "results.json").write_text(json.dumps(results, indent=1))
    total = sum(r["cpu_s"] for r in results)
    print(f"\nTable 3 rows on Multi30k val, {args.budget} steps each ({total / 60:.0f} CPU minutes in all)\n")
    print(results_table(results))
    print()
    print(checks_table(results))


if __name__ == "__main__":
    main()
