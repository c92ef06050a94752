"""From the launch of a training command to its first step, at WMT scale (issue #57, part 8): the time and each
rank's peak resident memory when the prepared dataset holds 1M, 4.5M or 36M pairs (WMT14 en-fr's size), with one
process or two torchrun ranks of one thread each.

What grows with the corpus at the start is what a rank does over every pair before it has its first batches:
checking the dataset's digests, reading the lengths, the epoch's plan of batches (a shuffle, a sort by length and
the greedy batching over all pairs) and its share of them. The text and its encoding are not in it, so this
benchmark does not tokenize 36M pairs (22 minutes here): a small corpus (bench/data_scale.py's WMT-like text) is
prepared once for the tokenizer (shared BPE) and its pairs' lengths, then the dataset of each size is written
directly with the project's own writer (corpus.binarized.DatasetWriter) into the folder `seqxduce prepare` would
have made for its recipe: each pair's (source, target) lengths drawn from the prepared pairs' lengths, its ids
random. `seqxduce train` then finds it prepared, as it would after `prepare`.

    python bench/train_start.py --sizes 1000000 4500000 36000000 --ranks 1 2 --work /tmp/train-start

The time is from the command's launch (this script starts it: the interpreter's start and torch's import are in
it) to the first step's start (Trainer.train_step entered, its batches collated); the worker then exits without
training. The peak RSS is the rank's VmHWM at that moment (pages of the mapped dataset it touched included),
the anonymous memory its /proc/self/smaps_rollup figure (its own heap: what it would keep while training), the
CPU seconds its own (user + system: on a loaded machine the wall time is an upper bound, the CPU time is not).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package: reach the scripts beside us

import bench_common as bc  # noqa: E402
import data_scale  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LAUNCH_ENV = "TRAIN_START_LAUNCH"  # the launch's wall-clock time, which the worker measures from
CHUNK = 1_000_000  # pairs written at a time
MODELS = {
    # the paper's base Transformer (recipes/wmt14_en_de_base.toml), as the issue measured it
    "base": "layers = 6\nd_model = 512\nd_ff = 2048\nheads = 8\nshare_embeddings = true\n",
    # a tiny one (the tests): the start's data part is the same
    "tiny": "layers = 1\nd_model = 16\nd_ff = 32\nheads = 2\n",
}
RECIPE = """[task]
name = "translation"
dataset = "files"
data_dir = "{data}"
src_lang = "en"
tgt_lang = "de"

[tokenizer]
name = "sentencepiece"
shared = true
model_type = "bpe"
vocab_size = {vocab}
input_sentence_size = {sample}

[model]
name = "transformer"
{model}
[train]
device = "cpu"
max_tokens = {max_tokens}
update_freq = {update_freq}
max_steps = 100000
warmup_steps = 4000
log_every = 100
validate_every = 0
valid_decode_examples = 0
checkpoint_every = 100000
"""


def recipe_text(data: Path, args: argparse.Namespace) -> str:
    return RECIPE.format(data=data, vocab=args.vocab, sample=args.sample, model=MODELS[args.model],
                         max_tokens=args.max_tokens, update_freq=args.update_freq)


# ------------------------------------------------------------------ the datasets

def base_corpus(work: Path, args: argparse.Namespace, env: dict[str, str]) -> Path:
    """The small corpus, prepared with `seqxduce prepare` (its tokenizer and its pairs' lengths): its folder."""
    root = work / "base"
    recipe = root / "recipe.toml"
    if not (root / "data" / "train.de").is_file():
        data_scale.write_corpus(root / "data", args.base_pairs)
    recipe.write_text(recipe_text(root / "data", args))
    subprocess.run([sys.executable, "-m", "seqxduce", "prepare", str(recipe)], env=env, cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    (folder,) = [p for p in Path(env["SEQXDUCE_CACHE"]).glob("prepared-*") if p.is_dir()]
    return folder


def size_recipe(work: Path, pairs: int, args: argparse.Namespace) -> Path:
    """The recipe of one size: its own data folder (a copy of the small corpus's files, which training does not
    read once the data are prepared), so that its prepared folder has its own key."""
    root = work / str(pairs)
    data = root / "data"
    if not (data / "train.de").is_file():
        shutil.copytree(work / "base" / "data", data)
    recipe = root / "recipe.toml"
    recipe.write_text(recipe_text(data, args))
    return recipe


def write_dataset(recipe_file: Path, pairs: int, base: Path, env: dict[str, str], seed: int = 57) -> Path:
    """The prepared dataset of `pairs` pairs for recipe_file, where `seqxduce train` looks for it: the lengths
    drawn (jointly, seeded) from the base dataset's pairs, the ids random below the vocabulary size, each source
    ending in eos. Kept when it is there with that many pairs."""
    from seqxduce import components
    from seqxduce.corpus import binarized, prepare
    from seqxduce.recipe import load_recipe
    from seqxduce.tokenizer_files import TokenizerFiles

    recipe = load_recipe(recipe_file)
    task = components.build_task(recipe)
    data_dir = components.data_dir(recipe)
    fingerprint = prepare.data_fingerprint(task, data_dir, prepare.Examples(task, data_dir))
    folder = prepare.prepared_folder(recipe, fingerprint, root=Path(env["SEQXDUCE_CACHE"]))
    if binarized.exists(folder) and binarized.read_meta(folder)["pairs"] == pairs:
        return folder
    source, meta = binarized.open_dataset(base, verify=False)
    src_lengths, tgt_lengths = np.asarray(source.src_lengths), np.asarray(source.tgt_lengths)
    eos = TokenizerFiles(base / prepare.TOKENIZERS).load(recipe).src.eos_id
    rng = np.random.default_rng(seed)
    with binarized.DatasetWriter(folder, meta["vocab_size"], replace=True) as writer:
        for start in range(0, pairs, CHUNK):
            drawn = rng.integers(0, len(src_lengths), size=min(CHUNK, pairs - start))
            src, tgt = src_lengths[drawn].astype(np.int64), tgt_lengths[drawn].astype(np.int64)
            src_ids = rng.integers(4, meta["vocab_size"], size=int(src.sum()), dtype=writer.dtype)
            src_ids[np.cumsum(src) - 1] = eos
            tgt_ids = rng.integers(4, meta["vocab_size"], size=int(tgt.sum()), dtype=writer.dtype)
            writer.add(src_ids, src, tgt_ids, tgt)
        shutil.copytree(base / prepare.TOKENIZERS, writer.work / prepare.TOKENIZERS)
        writer.extra.update({"read": pairs, "dropped": {"over max_source_len/max_target_len": 0}})
        writer.close()
    return folder


# ------------------------------------------------------------------ the runs

def peak_rss() -> int:
    """This process's peak resident set (bytes): VmHWM, its own address space's high-water mark. Not ru_maxrss,
    which after an exec keeps the high-water mark of the process it replaced (a forked copy of its parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(recipe: Path, out: Path, report: Path) -> None:
    """One training process (or rank): at its first step, the time since the launch and its memory go to
    report.RANK.json, and it exits."""
    launched = float(os.environ[LAUNCH_ENV])
    from seqxduce import engine
    from seqxduce.training.trainer import Trainer

    def first_step(self: Trainer, batches: Any, global_tokens: Any = None) -> None:
        seconds = time.time() - launched
        usage = resource.getrusage(resource.RUSAGE_SELF)
        figures = {"first_step_s": seconds, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss": peak_rss(),
                   **data_scale.memory()}
        Path(f"{report}.{os.environ.get('RANK', '0')}.json").write_text(json.dumps(figures))
        sys.stdout.flush()
        os._exit(0)  # the start is measured: no step is trained

    Trainer.train_step = first_step  # type: ignore[method-assign]
    engine.train(recipe, out, start=engine.RunStart(overwrite=True))


def command(recipe: Path, out: Path, report: Path, ranks: int) -> list[str]:
    script = [str(Path(__file__).resolve()), "--worker", str(recipe), str(out), str(report)]
    if ranks == 1:
        return [sys.executable, *script]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), *script]


def run_start(recipe: Path, ranks: int, env: dict[str, str]) -> dict[str, Any]:
    """Launch one training command; its ranks' figures."""
    root = recipe.parent
    out, report = root / f"run-{ranks}", root / f"report-{ranks}"
    for old in root.glob(f"{report.name}.*.json"):
        old.unlink()
    args = command(recipe, out, report, ranks)
    log = root / f"train-{ranks}.log"
    with log.open("w") as output:
        result = subprocess.run(args, env={**env, LAUNCH_ENV: repr(time.time())}, cwd=REPO, stdout=output,
                                stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{log.read_text()[-3000:]}")
    figures = [json.loads(Path(f"{report}.{rank}.json").read_text()) for rank in range(ranks)]
    shown = [a if a != str(Path(__file__).resolve()) else "bench/train_start.py" for a in args]
    return {"ranks": ranks, "first_step_s": max(f["first_step_s"] for f in figures),
            "cpu_s": [f["cpu_s"] for f in figures],
            "peak_rss": [f["peak_rss"] for f in figures], "anonymous": [f["anonymous"] for f in figures],
            "command": " ".join(["python" if a == sys.executable else a for a in shown])}


def table(rows: list[dict[str, Any]]) -> str:
    mb = lambda values: " / ".join(f"{v / 1e6:,.0f}" for v in values)  # noqa: E731
    seconds = lambda values: " / ".join(f"{v:.1f}" for v in values)  # noqa: E731
    lines = ["| pairs | ranks | launch -> first step (s) | CPU s per rank | peak RSS per rank (MB) | "
             "anonymous per rank (MB) |", "|---:|---:|---:|---|---|---|"]
    lines += [f"| {r['pairs']:,} | {r['ranks']} | {r['first_step_s']:.1f} | {seconds(r['cpu_s'])} | "
              f"{mb(r['peak_rss'])} | {mb(r['anonymous'])} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 4_500_000, 36_000_000])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="processes of each run (torchrun)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/train-start"))
    parser.add_argument("--model", choices=sorted(MODELS), default="base")
    parser.add_argument("--vocab", type=int, default=37_000, help="the shared BPE's size")
    parser.add_argument("--base-pairs", type=int, default=100_000, help="pairs of the corpus prepared for real")
    parser.add_argument("--sample", type=int, default=200_000, help="sentences the tokenizer trains on")
    parser.add_argument("--max-tokens", type=int, default=6250)
    parser.add_argument("--update-freq", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep each size's dataset (default: removed after)")
    parser.add_argument("--worker", nargs=3, metavar=("RECIPE", "OUT", "REPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*map(Path, args.worker))
        return []
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SEQXDUCE_CACHE": str(args.work / "base" / "cache"), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    base = base_corpus(args.work, args, env)
    rows = []
    for pairs in args.sizes:
        env_size = {**env, "SEQXDUCE_CACHE": str(args.work / str(pairs) / "cache")}
        recipe = size_recipe(args.work, pairs, args)
        started = time.perf_counter()
        folder = write_dataset(recipe, pairs, base, env_size)
        written = time.perf_counter() - started
        for ranks in args.ranks:
            row = {"pairs": pairs, **run_start(recipe, ranks, env_size), "dataset_write_s": round(written, 1),
                   "commit": bc.git_commit(), "machine": bc.cpu_name(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": bc.load_average()}
            rows.append(row)
            print(json.dumps(row), flush=True)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
