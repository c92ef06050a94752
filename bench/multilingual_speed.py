"""Training speed of one model on the one-pair road against the same model on several corpora (issue #77's target:
tokens/s within 5%, the sampler costing nothing measurable).

    python bench/multilingual_speed.py [--data ../shared/data/multi30k] [--steps 200] [--window 50] [--repeats 3]
                                       [--set KEY=VALUE ...] [--threads 2] [--work DIR] [--json FILE]
    python bench/multilingual_speed.py --tiny ...      # generated word-for-word data (also when --data is absent)

The two roads are recipes/multi30k_en_defrcs.toml as it is (en→de, en→fr and en→cs as three [[task.corpus]]
tables, the target's tag on the source, batches drawn by temperature: corpus/mixture.py) and the same recipe made
one pair (`task.corpus=[]`, `task.lang_tag="none"`, en→de): the same model, vocabulary size, batching and
schedule; `--set`s apply to both. Each road's training data are prepared first (untimed, `seqxduce prepare`, in a
cache folder of the benchmark's own), then each run is a real `seqxduce train` process of --window + --steps
steps, validation and checkpoints off, the roads taking turns within each repeat so that a change in the machine's
load hits both. A run's figure is the median of the target tokens/s its log windows report (metrics.jsonl, one
window every --window steps), the first window (start-up, warm-up) left out; printed per road: the median over
repeats and its spread, and the multi-corpus road's ratio to the one-pair road (median of the per-repeat ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package: reach bench_common beside us

import bench_common as bc  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "multi30k_en_defrcs.toml"
ROADS = {
    "one pair (en-de)": ["task.corpus=[]", 'task.lang_tag="none"', 'task.src_lang="en"', 'task.tgt_lang="de"'],
    "3 corpora, tagged": [],
}
# the runs time the steps alone: no validation, no checkpoint but the one at the end, one member
QUIET = ["train.validate_every=0", "train.valid_decode_examples=0", "train.checkpoint_every=1000000",
         "train.average_last=0", "train.members=1", "train.patience=0"]
# generated data when Multi30k is absent (or --tiny): every language word for word
WORDS = {"cat": ("Katze", "chat", "kocka"), "dog": ("Hund", "chien", "pes"), "red": ("rot", "rouge", "cerveny"),
         "big": ("gross", "grand", "velky"), "house": ("Haus", "maison", "dum"), "tree": ("Baum", "arbre", "strom"),
         "sees": ("sieht", "voit", "vidi"), "a": ("ein", "un", "jeden"), "small": ("klein", "petit", "maly"),
         "the": ("der", "le", "ten"), "man": ("Mann", "homme", "muz"), "runs": ("rennt", "court", "bezi")}


def tiny_data(folder: Path, pairs: int) -> Path:
    """Word-for-word en/de/fr/cs text in the files dataset's layout (train, valid, test)."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", pairs), ("valid", 20), ("test", 20)):
        lines: dict[str, list[str]] = {lang: [] for lang in ("en", "de", "fr", "cs")}
        for _ in range(n):
            sentence = [rng.choice(list(WORDS)) for _ in range(rng.randint(3, 12))]
            lines["en"].append(" ".join(sentence))
            for k, lang in enumerate(("de", "fr", "cs")):
                lines[lang].append(" ".join(WORDS[w][k] for w in sentence))
        for lang, text in lines.items():
            (folder / f"{split}.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
    return folder


def data_settings(args: argparse.Namespace, work: Path) -> tuple[list[str], str]:
    """The --sets that point both roads at their data, and what the data are."""
    data = Path(args.data)
    if not args.tiny and (data / "train.en").is_file():
        return [f'task.data_dir="{data.resolve()}"'], f"Multi30k ({data})"
    folder = tiny_data(work / "data", args.tiny_pairs)
    return [f'task.data_dir="{folder}"', 'task.dataset="files"'], f"generated ({args.tiny_pairs} pairs a language)"


def seqxduce(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "seqxduce", *args], capture_output=True, text=True, env=env,
                          cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"seqxduce {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def as_sets(settings: list[str]) -> list[str]:
    return [part for setting in settings for part in ("--set", setting)]


def window_speeds(run: Path) -> list[float]:
    """The target tokens/s of a run's log windows after its first."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    speeds = [r["tokens_per_s"] for r in records if r.get("kind") == "train" and "tokens_per_s" in r]
    return speeds[1:]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--tiny", action="store_true", help="generated data even when --data holds Multi30k")
    parser.add_argument("--tiny-pairs", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=200, help="timed steps a run (after its first window)")
    parser.add_argument("--window", type=int, default=50, help="steps a log window")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the runs (default: as set)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="KEY=VALUE for both roads")
    parser.add_argument("--work", default=None, help="a folder for the data, cache and runs (default: temporary)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import tempfile

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="multilingual-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SEQXDUCE_CACHE": str(work / "cache")}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    data, described = data_settings(args, work)
    windows = 1 + -(-args.steps // args.window)
    common = [*data, *QUIET, f"train.log_every={args.window}", f"train.max_steps={windows * args.window}", *args.sets]

    for road in ROADS.values():  # untimed: each road's prepared data, found by every run after
        seqxduce(["prepare", str(RECIPE), *as_sets([*common, *road])], env)

    speeds: dict[str, list[float]] = {name: [] for name in ROADS}
    for repeat in range(args.repeats):
        for k, (name, road) in enumerate(ROADS.items()):
            out = work / "runs" / f"{repeat}-{k}"
            started = time.perf_counter()
            seqxduce(["train", str(RECIPE), "--out", str(out), "--overwrite", *as_sets([*common, *road])], env)
            figure = statistics.median(window_speeds(out))
            speeds[name].append(figure)
            print(f"repeat {repeat + 1}, {name}: {figure:,.0f} tokens/s ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr)

    names = list(ROADS)
    ratios = [multi / one for one, multi in zip(speeds[names[0]], speeds[names[1]])]
    command = "python bench/multilingual_speed.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    rows = []
    for name in names:
        rows.append({"road": name, "tok_s": statistics.median(speeds[name]), "tok_s_min": min(speeds[name]),
                     "tok_s_max": max(speeds[name]), "runs": speeds[name]})
    rows[1]["ratio"] = statistics.median(ratios)
    print(f"{described}; {args.steps} timed steps a run in windows of {args.window}, {args.repeats} repeats; "
          f"commit {bc.git_commit()}, {bc.cpu_name()}, OMP_NUM_THREADS={env.get('OMP_NUM_THREADS', 'unset')}, "
          f"load {bc.load_average()}")
    print(bc.table(["road", "tokens/s (median)", "min", "max", "ratio to one pair"],
                   [[r["road"], f"{r['tok_s']:,.0f}", f"{r['tok_s_min']:,.0f}", f"{r['tok_s_max']:,.0f}",
                     f"{r['ratio']:.3f}" if "ratio" in r else "1"] for r in rows]))
    if args.json:
        bc.write_json(args.json, {"command": command, "data": described, "rows": rows, "ratios": ratios,
                                  "commit": bc.git_commit(), "cpu": bc.cpu_name()})
    for row in rows:
        row["command"] = command
    return rows


if __name__ == "__main__":
    main()
