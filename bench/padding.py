"""The share of padding in a recipe's training batches, for several max_tokens and [train] bucket_width values.

    python bench/padding.py recipes/multi30k_en_de.toml [--max-tokens 4096 16384 65536] [--widths 0 2 4 8]

Trains the recipe's tokenizer on its training split (as `seqxduce train` does), encodes the pairs under the
recipe's length limits and prints, for each batch size and bucket width, the fraction of the padded
source + target positions of one epoch's batches that are padding (seqxduce.data.padding_fraction).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from seqxduce import components
from seqxduce.corpus.arrays import padding_fraction, token_batches
from seqxduce.data import encode_pairs
from seqxduce.recipe import load_recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="section.key=value")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--widths", type=int, nargs="+", default=[0, 2, 4, 8])
    args = parser.parse_args()

    recipe = load_recipe(args.recipe, args.overrides)
    task = components.build_task(recipe)
    examples = task.examples("train", components.data_dir(recipe))
    with tempfile.TemporaryDirectory() as work:
        tokenizers = components.train_tokenizers(recipe, examples, Path(work))
    train = recipe.train
    pairs, skipped = encode_pairs(examples, tokenizers.src, tokenizers.tgt, train.max_source_len,
                                  train.max_target_len)
    print(f"{args.recipe}: {len(pairs)} training pairs ({skipped} over the length limits left out)")
    print("| max_tokens | " + " | ".join(f"bucket_width {w}" for w in args.widths) + " |")
    print("|---" * (len(args.widths) + 1) + "|")
    for max_tokens in args.max_tokens:
        shares = [padding_fraction(pairs, token_batches(pairs, max_tokens, train.seed, 1, bucket_width=w))
                  for w in args.widths]
        print(f"| {max_tokens:,} | " + " | ".join(f"{100 * s:.2f}%" for s in shares) + " |")


if __name__ == "__main__":
    main()
