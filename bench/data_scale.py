"""Training data at WMT scale (issue #36): synthetic parallel corpora of WMT-like lengths, prepared once and
trained from memory-mapped ids. Per size it reports the preparation's wall time and pairs/s (the whole
`seqxduce prepare` on every core; the encoding alone on one and on two processes, beside sentencepiece's own
multi-threaded batch encoding of the same text), the dataset's size on disk, the time from prepared data to the
first step, the preparing process's peak memory (it streams the corpus: what it holds is the tokenizer's
sample and the shards in flight), and a training process's private memory at step 10 split into
model+optimizer and data, with the PSS summed over the two ranks of a torchrun run.

The corpus (seeded, numpy's default_rng): a source and a target vocabulary of 60,000 words each (random
lowercase strings of 2-12 letters), words drawn by Zipf's law (p(rank r) ~ 1/r); source lengths gamma(4, 6.5)
(mean 26 words, clipped to 1-150), the target's length the source's times uniform(0.8, 1.25). The recipe is the
README's "your own parallel text" with the WMT14 tokenizer (shared BPE, 37,000; the tokenizer trained on a sample
of --sample sentences) and a small model (2 layers, d_model 256) whose share of memory is measured apart: a run
on 1,000 pairs with the same tokenizer and model gives the model+optimizer figure, the data's is the difference.

    python bench/data_scale.py --sizes 100000 1000000 --work /tmp/data-scale

The encoding's side-by-side figures (ours on 1 and 2 processes, sentencepiece's threads) hold the texts in the
benchmark's own memory, so they are taken on the first --encode-pairs pairs of a larger corpus (a rate).

The start of a run at 36M pairs (WMT14 en-fr) with the base model is bench/train_start.py's, which writes each
size's dataset directly (this corpus's lengths) instead of encoding it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SEED = 36
WORDS = 60_000
VALID = 200
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
vocab_size = 37000
input_sentence_size = {sample}

[model]
name = "transformer"
layers = 2
d_model = 256
d_ff = 1024
heads = 4

[train]
device = "cpu"
max_tokens = 1024
max_steps = 10
warmup_steps = 100
log_every = 5
validate_every = 0
valid_decode_examples = 0
checkpoint_every = 1000
"""


# ------------------------------------------------------------------ the corpus

def vocabulary(rng: np.random.Generator) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(2, 13, size=WORDS)
    return np.array(["".join(rng.choice(letters, size=n)) for n in lengths], dtype=object)


def write_corpus(folder: Path, pairs: int, seed: int = SEED) -> None:
    """train.en/.de (pairs lines), valid and test (VALID lines each), streamed in chunks."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    src_words, tgt_words = vocabulary(rng), vocabulary(rng)
    zipf = 1.0 / np.arange(1, WORDS + 1)
    cdf = np.cumsum(zipf / zipf.sum())
    for split, n in (("train", pairs), ("valid", VALID), ("test", VALID)):
        with (folder / f"{split}.en").open("w") as en, (folder / f"{split}.de").open("w") as de:
            for start in range(0, n, 50_000):
                count = min(50_000, n - start)
                src_len = np.clip(rng.gamma(4.0, 6.5, size=count).round().astype(int), 1, 150)
                tgt_len = np.clip((src_len * rng.uniform(0.8, 1.25, size=count)).round().astype(int), 1, 150)
                for lengths, words, out in ((src_len, src_words, en), (tgt_len, tgt_words, de)):
                    ranks = np.searchsorted(cdf, rng.random(int(lengths.sum())))
                    ranks = np.minimum(ranks, WORDS - 1)
                    bounds = np.concatenate([[0], np.cumsum(lengths)])
                    drawn = words[ranks]
                    out.write("".join(" ".join(drawn[a:b]) + "\n" for a, b in zip(bounds[:-1], bounds[1:])))


# ------------------------------------------------------------------ memory

def memory(pid: int | str = "self") -> dict[str, int]:
    """Private (clean + dirty), PSS and RSS bytes of a process, from /proc/PID/smaps_rollup."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return {"private": fields["Private_Clean"] + fields["Private_Dirty"], "pss": fields["Pss"], "rss": fields["Rss"],
            "anonymous": fields["Anonymous"]}


def worker(recipe: Path, out: Path, report: Path, tokenizers_from: str | None) -> None:
    """One training process (or rank): time to the first step, memory at step 10, written to report.RANK.json."""
    started = time.perf_counter()
    from seqxduce import engine
    from seqxduce.training.trainer import Trainer

    figures: dict[str, float] = {}
    original = Trainer.train_step

    def train_step(self, batches, global_tokens=None):
        step = self.state.step + 1
        if step == 1:
            figures["first_step_s"] = time.perf_counter() - started
        result = original(self, batches, global_tokens)
        if step == 10:
            figures.update(memory())
        return result

    Trainer.train_step = train_step
    engine.train(recipe, out, start=engine.RunStart(overwrite=True, tokenizers_from=tokenizers_from))
    rank = os.environ.get("RANK", "0")
    Path(f"{report}.{rank}.json").write_text(json.dumps(figures))


def _run(*args: object, env: dict[str, str]) -> float:
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as output:
        result = subprocess.run([str(a) for a in args], env=env, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
        if result.returncode != 0:
            output.seek(0)
            raise SystemExit(output.read()[-3000:])
    return time.perf_counter() - started


# Runs a command and writes its peak resident set: through this small process, because a child forked from a
# large one (this benchmark, after generating a corpus) inherits the parent's size in its ru_maxrss
PEAK_WRAPPER = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
                "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
                "sys.exit(code)")


def _run_measured(*args: object, env: dict[str, str]) -> tuple[float, int]:
    """Run a command to its end: its wall seconds and its peak resident set (bytes: the largest of the process
    and the children it waited for)."""
    with tempfile.TemporaryDirectory() as work:
        peak = Path(work) / "peak"
        seconds = _run(sys.executable, "-c", PEAK_WRAPPER, peak, *args, env=env)
        return seconds, int(peak.read_text()) * 1024


def _train(recipe: Path, out: Path, env: dict[str, str], ranks: int = 1, tokenizers_from: Path | None = None
           ) -> list[dict]:
    report = out.parent / f"{out.name}-report"
    args = [str(recipe), str(out), str(report), str(tokenizers_from or "")]
    if ranks == 1:
        _run(sys.executable, __file__, "--worker", *args, env=env)
    else:
        _run(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", ranks, __file__,
             "--worker", *args, env=env)
    return [json.loads(Path(f"{report}.{rank}.json").read_text()) for rank in range(ranks)]


# ------------------------------------------------------------------ one size

def encode_figures(recipe_file: Path, folder: Path, limit: int) -> dict[str, float]:
    """The encoding of the prepared corpus's first `limit` pairs alone, on one and two processes, and
    sentencepiece's own threaded batch encoding of the same texts (the tokenizer's training is not in these)."""
    from itertools import islice

    import sentencepiece as spm

    from seqxduce import components
    from seqxduce.corpus import binarized, prepare
    from seqxduce.recipe import load_recipe
    from seqxduce.tokenizer_files import TokenizerFiles

    recipe = load_recipe(recipe_file)
    task = components.build_task(recipe)
    examples = list(islice(task.stream("train", components.data_dir(recipe)), limit))
    tokenizers = TokenizerFiles(folder / prepare.TOKENIZERS).load(recipe)
    figures: dict[str, float] = {"pairs_read": len(examples)}
    for workers in (1, 2):
        started = time.perf_counter()
        with binarized.DatasetWriter(folder.parent / f"scratch-{workers}", tokenizers.src.vocab_size,
                                     replace=True) as writer:
            prepare.encode_into(writer, examples, tokenizers, *prepare.limits(recipe), workers=workers, show=False)
            writer.close()
        figures[f"encode_{workers}_s"] = time.perf_counter() - started
    processor = spm.SentencePieceProcessor(model_file=str(folder / prepare.TOKENIZERS / "tokenizer.model"))
    texts = [ex.source for ex in examples] + [ex.target for ex in examples]
    started = time.perf_counter()
    processor.encode(texts, out_type=int, num_threads=2)
    figures["spm_threads_2_s"] = time.perf_counter() - started
    return figures


def one_size(pairs: int, work: Path, sample: int, encode_pairs: int, memory_only: bool = False) -> dict:
    root = work / f"{pairs}"
    data, cache = root / "data", root / "cache"
    env = {**os.environ, "SEQXDUCE_CACHE": str(cache)}
    row: dict = {"pairs": pairs}
    if not (data / "train.de").is_file():
        started = time.perf_counter()
        write_corpus(data, pairs)
        row["generate_s"] = time.perf_counter() - started
    recipe = root / "recipe.toml"
    recipe.write_text(RECIPE.format(data=data, sample=sample))
    if memory_only:  # the dataset prepared by an earlier run of this script: only the training figures
        _run(sys.executable, "-m", "seqxduce", "prepare", recipe, env=env)
    else:
        row["prepare_s"], row["prepare_peak_rss"] = _run_measured(sys.executable, "-m", "seqxduce", "prepare",
                                                                  recipe, "--again", env=env)
    (folder,) = [p for p in cache.glob("prepared-*") if p.is_dir()]
    from seqxduce.corpus import binarized

    meta = binarized.read_meta(folder)
    row.update(kept=meta["pairs"], disk_bytes=binarized.size_on_disk(folder))
    if not memory_only:
        row.update(encode_figures(recipe, folder, encode_pairs))
    # the model's share: the same tokenizer and model on 1,000 pairs
    small = root / "small"
    write_corpus(small, 1000, seed=SEED + 1)
    small_recipe = root / "small.toml"
    small_recipe.write_text(RECIPE.format(data=small, sample=sample))
    (one,) = _train(recipe, root / "run", env)
    (base,) = _train(small_recipe, root / "run-small", env, tokenizers_from=root / "run")
    two = _train(recipe, root / "run-2", env, ranks=2)
    row.update(first_step_s=one["first_step_s"], private=one["private"], model_private=base["private"],
               data_private=one["private"] - base["private"],
               # of it, the heap and anonymous maps (the rest: pages of the mapped dataset, clean, shared by ranks)
               data_anonymous=one["anonymous"] - base["anonymous"], pss_two_ranks=sum(r["pss"] for r in two),
               first_step_two_ranks_s=max(r["first_step_s"] for r in two))
    row.update(two_rank_baseline(root, env))
    return row


def two_rank_baseline(root: Path, env: dict[str, str]) -> dict[str, int]:
    """The PSS of two ranks training the small corpus with the same tokenizer and model: what the two ranks' PSS
    holds besides the data (the libraries' shared pages count half in each rank's PSS, as the data's do)."""
    two = _train(root / "small.toml", root / "run-2-small", env, ranks=2, tokenizers_from=root / "run")
    return {"pss_two_ranks_model": sum(r["pss"] for r in two)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000])
    parser.add_argument("--work", type=Path, default=Path("/tmp/data-scale"))
    parser.add_argument("--sample", type=int, default=200_000, help="sentences the tokenizer trains on")
    parser.add_argument("--encode-pairs", type=int, default=1_000_000,
                        help="pairs the side-by-side encoding figures are taken on (the first of the corpus)")
    parser.add_argument("--memory-only", action="store_true",
                        help="sizes prepared by an earlier run in --work: only the training processes' figures")
    parser.add_argument("--pss-baseline", action="store_true",
                        help="only the two-rank baseline of sizes already run in --work")
    parser.add_argument("--worker", nargs=4, metavar=("RECIPE", "OUT", "REPORT", "TOKENIZERS_FROM"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        recipe, out, report, tokenizers_from = args.worker
        worker(Path(recipe), Path(out), Path(report), tokenizers_from or None)
        return
    for pairs in args.sizes:
        if args.pss_baseline:
            root = args.work / f"{pairs}"
            print(json.dumps({"pairs": pairs, **two_rank_baseline(root, {**os.environ,
                                                                          "SEQXDUCE_CACHE": str(root / "cache")})}))
            continue
        row = one_size(pairs, args.work, args.sample, args.encode_pairs, args.memory_only)
        row["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                       cwd=REPO).stdout.strip()
        row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        row["load"] = Path("/proc/loadavg").read_text().split()[:3]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
