"""Lexically constrained beam search on a trained translation run: coverage, BLEU and speed, as Post & Vilar (2018)
and Hu et al. (2019) measure it.

    python bench/constrained_search.py runs/multi30k_en_de --split test_2016_flickr
    python bench/constrained_search.py RUN --limit 200 --threads 1      # a quick look

The protocol: each test sentence gets one or two phrases (one or two words) drawn from its reference that the
unconstrained output lacks (seeded); sentences whose output already holds every word of the reference get none.
Reported:
- coverage: the share of constrained outputs holding every phrase, as written, in the detokenized text;
- sacreBLEU of the unconstrained and the constrained outputs against the references;
- speed: sentences/s of the unconstrained search and of the search with exactly two phrases per sentence (where
  the reference has two such words), one after the other in this process;
- negative phrases: the most frequent word of the unconstrained outputs forbidden in every sentence, and how many
  outputs still hold it as a word.
The run's recipe decides the search (beam, length penalty); --set overrides it as `seqxduce decode --set` does.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import sacrebleu
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402

from seqxduce.decoding.decode import decode_lines, load_run  # noqa: E402
from seqxduce.decoding.phrases import PhraseText  # noqa: E402

WORD = re.compile(r"\w[\w'-]*")


def words(text: str) -> list[str]:
    return WORD.findall(text)


def pick_phrases(reference: str, output: str, count: int, rng: random.Random) -> list[str]:
    """Up to `count` phrases of one or two reference words that the output lacks, in reference order."""
    ref, have = words(reference), set(words(output))
    starts = [i for i, w in enumerate(ref) if w not in have]
    rng.shuffle(starts)
    chosen: list[tuple[int, str]] = []
    used: set[int] = set()
    for i in starts:
        if len(chosen) == count:
            break
        span = 2 if rng.random() < 0.5 and i + 1 < len(ref) and i + 1 not in used else 1
        if used & set(range(i, i + span)):
            continue
        phrase = " ".join(ref[i:i + span])
        if phrase in output:
            continue
        used.update(range(i, i + span))
        chosen.append((i, phrase))
    return [p for _, p in sorted(chosen)]


def timed_decode(run, sources: list[str], constraints: list[PhraseText] | None) -> tuple[list[str], float]:
    start = time.perf_counter()
    outputs = decode_lines(run, sources, constraints=constraints)
    return [o.text for o in outputs], time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--data", type=Path, default=bench_common.REPO.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--limit", type=int, default=0, help="the first N sentences only (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    sources = (args.data / f"{args.split}.{args.src}").read_text(encoding="utf-8").splitlines()
    references = (args.data / f"{args.split}.{args.tgt}").read_text(encoding="utf-8").splitlines()
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    run = load_run(args.run, args.overrides)
    decode_lines(run, sources[:8])  # warm-up

    free, free_s = timed_decode(run, sources, None)
    rng = random.Random(args.seed)
    mixed = [pick_phrases(r, o, rng.choice((1, 2)), rng) for r, o in zip(references, free)]
    given = [PhraseText.from_list(p, "bench") for p in mixed]
    held, held_s = timed_decode(run, sources, given)
    covered = [all(p in out for p in phrases) for phrases, out in zip(mixed, held) if phrases]

    pairs = [pick_phrases(r, o, 2, random.Random(args.seed + i)) for i, (r, o) in enumerate(zip(references, free))]
    two = [i for i, p in enumerate(pairs) if len(p) == 2] or [0]  # (a sentence of one phrase where none has two)
    _, free_two_s = timed_decode(run, [sources[i] for i in two], None)
    _, two_s = timed_decode(run, [sources[i] for i in two], [PhraseText.from_list(pairs[i], "bench") for i in two])

    common = Counter(w for out in free for w in words(out)).most_common(1)[0][0]
    banned, _ = timed_decode(run, sources, [PhraseText(exclude=(common,))] * len(sources))
    still = sum(common in words(out) for out in banned)

    figures = {
        "run": str(args.run), "split": args.split, "sentences": len(sources), "commit": bench_common.git_commit(),
        "machine": bench_common.cpu_name(), "threads": args.threads,
        "constrained_sentences": len(covered), "phrases": sum(map(len, mixed)),
        "coverage": sum(covered) / max(len(covered), 1),
        "bleu_free": sacrebleu.corpus_bleu(free, [references]).score,
        "bleu_constrained": sacrebleu.corpus_bleu(held, [references]).score,
        "free_sentences_per_s": len(sources) / free_s, "constrained_sentences_per_s": len(sources) / held_s,
        "two_phrase_sentences": len(two), "free_on_those_per_s": len(two) / free_two_s,
        "two_phrases_per_s": len(two) / two_s, "two_phrase_speed_ratio": free_two_s / two_s,
        "forbidden_word": common, "outputs_with_forbidden_word": still,
        "outputs_with_it_unconstrained": sum(common in words(out) for out in free),
    }
    for key, value in figures.items():
        print(f"{key:32} {value:.4g}" if isinstance(value, float) else f"{key:32} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
