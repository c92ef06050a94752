"""Where a parser's tags go wrong: tagging accuracy on the dev words its source vocabulary knows and on those it
reads as an unknown-word class, from the trees `seqxduce decode` wrote.

    seqxduce decode RUN --split valid > dev.trees
    python bench/parse_words.py RUN dev.trees

The gold trees are the run's own task's valid split (recipe saved in RUN), preprocessed as the scorer sees them;
a decoded tree is compared leaf by leaf with its gold tree where both have the sentence's words (tree_beam's
trees always do). A word is "known" when the source tokenizer encodes it as itself, "unknown" when as a class
(<unk-...>) or <unk>. Punctuation counts like any word here (EVALB's tagging accuracy leaves it out). The last
column is the baseline of tagging each word with its most frequent tag in the training trees (an unseen word: wrong).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from nltk.tree import Tree

from seqxduce import components
from seqxduce.rundir import RunDir


def tagged(tree_text: str) -> list[tuple[str, str]]:
    """(word, tag) per leaf of a bracketed tree, empty elements (-NONE-, in the gold trees) left out."""
    return [(word, tag) for word, tag in Tree.fromstring(tree_text).pos() if tag != "-NONE-"]


def word_status(tokenizer, sentence: str) -> list[str]:
    """'known' or 'unknown' per whitespace word, by what the source tokenizer makes of it."""
    ids = tokenizer.encode(sentence)
    return ["known" if tokenizer.id_to_token(i) == word else "unknown" for word, i in zip(sentence.split(), ids)]


def most_frequent_tags(examples) -> dict[str, str]:
    """Each training word's most frequent tag (ties: the tag seen first)."""
    seen: dict[str, Counter] = {}
    for example in examples:
        for word, tag in tagged(example.ref):
            seen.setdefault(word, Counter())[tag] += 1
    return {word: tags.most_common(1)[0][0] for word, tags in seen.items()}


def count(run: Path, trees: Path) -> tuple[Counter, Counter, Counter, int]:
    """(right, total, right by the most-frequent-tag baseline) tag counts per word status over the dev sentences,
    and how many sentences were skipped."""
    rundir = RunDir(run)
    recipe = rundir.load_recipe()
    task = components.build_task(recipe)
    data = components.data_dir(recipe)
    examples = task.examples("valid", data)
    baseline = most_frequent_tags(task.examples("train", data))
    source_tokenizer = rundir.tokenizers.load(recipe).src
    hypotheses = trees.read_text(encoding="utf-8").splitlines()
    if len(hypotheses) != len(examples):
        raise SystemExit(f"{trees}: {len(hypotheses)} trees for {len(examples)} dev sentences")
    right, total, frequent, skipped = Counter(), Counter(), Counter(), 0
    for example, hypothesis in zip(examples, hypotheses):
        gold, guess = tagged(example.ref), tagged(hypothesis)
        if [w for w, _ in gold] != example.source.split() or [w for w, _ in guess] != example.source.split():
            skipped += 1
            continue
        for status, (word, gold_tag), (_, tag) in zip(word_status(source_tokenizer, example.source), gold, guess):
            total[status] += 1
            right[status] += gold_tag == tag
            frequent[status] += baseline.get(word) == gold_tag
    return right, total, frequent, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run directory (its recipe and source tokenizer)")
    parser.add_argument("trees", type=Path, help="decoded dev trees, one per line, in the split's order")
    args = parser.parse_args()
    right, total, frequent, skipped = count(args.run, args.trees)
    print("| words | count | share | tagging accuracy | most frequent training tag |")
    print("|---|---|---|---|---|")
    words = sum(total.values())
    for status in ("known", "unknown"):
        if total[status]:
            print(f"| {status} | {total[status]} | {100 * total[status] / words:.1f}% | "
                  f"{100 * right[status] / total[status]:.2f} | {100 * frequent[status] / total[status]:.2f} |")
    print(f"| all | {words} | 100% | {100 * sum(right.values()) / max(words, 1):.2f} | "
          f"{100 * sum(frequent.values()) / max(words, 1):.2f} |")
    if skipped:
        print(f"({skipped} sentences skipped: their leaves are not the sentence's words)")


if __name__ == "__main__":
    main()
