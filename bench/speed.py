"""Training throughput and decoding speed of a recipe's model on this machine.

    python bench/speed.py recipes/quickstart.toml [--set model.d_model=512 ...] [--steps 20] [--run CKPT]

Prints: training tokens/s (forward+backward+step), greedy and beam decoding sentences/s and target tokens/s
(the model of --run, else the untrained one), beam search with its exact stop rule against fairseq's early stop,
and with the incremental cache against re-running the decoder on the whole prefix at every step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from seqxduce import components
from seqxduce.api import DecodeRequest
from seqxduce.corpus.arrays import collate_indices, token_batches
from seqxduce.data import encode_source, pad_sources
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.device import autocast_context
from seqxduce.recipe import load_recipe
from seqxduce.training.in_memory import in_memory_run
from seqxduce.training.trainer import Trainer


class NoCache:
    """Wraps a model so that every step re-runs the full decoder over the prefix (what the cache avoids)."""

    def __init__(self, model):
        self.model = model

    def encode(self, src):
        return src

    def init_cache(self, memory):
        return None  # the cache is the prefix itself

    def reorder(self, memory, cache, index):
        return memory[index], None if cache is None else cache[index]

    def step(self, tokens, memory, cache):
        prefix = tokens.view(-1, 1) if cache is None else torch.cat([cache, tokens.view(-1, 1)], dim=1)
        logits = self.model(memory, prefix).logits[:, -1]
        return logits.float().log_softmax(-1), prefix


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--run", help="a checkpoint to decode with (default: the untrained model)")
    parser.add_argument("--repeats", type=int, default=3, help="decoding runs per search; the median is printed")
    parser.add_argument("--skip-no-cache", action="store_true", help="leave out the slow beam without the cache")
    args = parser.parse_args()
    recipe = load_recipe(args.recipe, args.overrides)
    torch.manual_seed(0)
    # the step is timed without a run directory
    trainer = Trainer(in_memory_run(recipe))
    device = trainer.parts.device
    pairs = trainer.parts.plan.train_pairs
    batches = [collate_indices(pairs, b, trainer.parts.tokenizers.vocab())
               for b in token_batches(pairs, recipe.train.max_tokens, 1, 1)]
    times, tokens = [], 0
    for i in range(args.steps):
        started = time.perf_counter()
        figures = trainer.train_step([batches[i % len(batches)]])
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 3:  # warm-up steps excluded
            times.append(time.perf_counter() - started)
            tokens += figures["tokens"]
    print(f"device {device} | precision {recipe.train.precision} | threads {torch.get_num_threads()}")
    print(f"train: {tokens / sum(times):.0f} target tokens/s (median step {statistics.median(times)*1000:.1f} ms, "
          f"{len(times)} steps of ~{recipe.train.max_tokens} tokens)")

    model = trainer.parts.model.eval()
    tok = trainer.parts.tokenizers
    valid = trainer.parts.task.examples("valid", components.data_dir(recipe))
    sources = [ex.source for ex in valid[: args.sentences]]
    src = pad_sources([encode_source(tok.src, s) for s in sources], tok.tgt.pad_id).to(device)
    req = DecodeRequest(src, sources, tok.tgt.bos_id, tok.tgt.eos_id, tok.tgt.pad_id)
    if args.run:
        model.load_state_dict(torch.load(args.run, map_location=device, weights_only=True)["model"])
    greedy = SearchSettings(max_len_a=1.2, max_len_b=10)
    beam4 = BeamSettings(beam=4, alpha=0.6, max_len_a=1.2, max_len_b=10)
    early = BeamSettings(beam=4, alpha=0.6, max_len_a=1.2, max_len_b=10, early_stop=True)
    searches = [("greedy", lambda m: greedy_search(m, req, greedy)),
                ("beam4", lambda m: beam_search(m, req, beam4)),
                ("beam4 early stop", lambda m: beam_search(m, req, early))]
    if not args.skip_no_cache:
        searches.append(("beam4 no cache", lambda m: beam_search(NoCache(m), req, beam4)))
    for name, fn in searches:
        times, out_tokens = [], 0
        for _ in range(args.repeats):
            started = time.perf_counter()
            with torch.no_grad(), autocast_context(device, recipe.train.precision):
                hyps = fn(model)
            times.append(time.perf_counter() - started)
        out_tokens = sum(len(h[0].tokens) + 1 for h in hyps)  # eos included
        elapsed = statistics.median(times)
        print(f"decode {name}: {len(sources) / elapsed:.1f} sentences/s, {out_tokens / elapsed:.0f} target "
              f"tokens/s ({len(sources)} sentences, {out_tokens} tokens, median of {len(times)}: {elapsed:.2f} s)")


if __name__ == "__main__":
    main()
