"""Parity of `seqxduce export --to huggingface` with seqxduce's own decoding, fp32 on the CPU, and of its round
trip back through `seqxduce import --from marian`.

    python bench/hf_parity.py RUN [--split test] [--limit 500] [--member K]
    python bench/hf_parity.py --tiny [--steps 150] [--limit 300]
    python bench/hf_parity.py RUN --generated [--limit 300]   (a run of --tiny's task trained before)

Exports the run into a temporary folder, loads it with transformers' MarianMTModel and MarianTokenizer (no
seqxduce code), and prints one markdown row per comparison over the split's sources (--tiny: a run trained here
on the Marian tests' generated reversing task, seqxduce_marian.testing, and 300 generated sources):

1. tokenization: the MarianTokenizer's input ids against the run's tokenizer's (+ eos);
2. greedy: generate(num_beams=1) against `decode.name=greedy`; generate() is given each source's length limit
   as the run's search has it (max_len_a x source + max_len_b: max_new_tokens per call, as the export's note
   says), else an output that loops runs on to the position table where seqxduce's stops (the Multi30k en-de
   baseline at 1,500 steps: 11 of 500 greedy outputs, all at the limit);
3. beam: generate() with the exported generation_config.json (beam, length penalty, limit, stopping rule)
   against seqxduce with the same search where generate() has it (decode.length_penalty = "power",
   decode.limit_eos = "free"), and against the run's own [decode] (a GNMT penalty or a scored eos at the
   limit, which generate() cannot say, as the model card notes);
4. round trip: the export imported back (`seqxduce import --from marian`) decoded with the run's [decode] and
   greedily, against the run: equal outputs (tokens) and equal texts.

A differing output is a "tie" when both outputs' scores under the search's own ranking (teacher-forced by
transformers in float64; greedy: the two tokens at the first position where they part) agree within 1e-4.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

TIE = 1e-4


def cli(*args: object) -> str:
    from click.testing import CliRunner

    from seqxduce.cli import add_plugin_commands

    result = CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])
    if result.exit_code != 0:
        raise SystemExit(f"seqxduce {' '.join(map(str, args))} failed:\n{result.output}")
    return result.output


def sources_of(run: Path, split: str, limit: int) -> list[str]:
    from seqxduce import components
    from seqxduce.decoding import decode as decoding

    loaded = decoding.load_run(run, [])
    return [e.source for e in loaded.task.examples(split, components.data_dir(loaded.recipe))[:limit]]


class HF:
    """The exported folder in transformers: generate() and teacher-forced log-probabilities."""

    def __init__(self, folder: Path):
        from transformers import MarianMTModel, MarianTokenizer

        self.tokenizer = MarianTokenizer.from_pretrained(folder)
        self.model = MarianMTModel.from_pretrained(folder).eval()
        self.generation = json.loads((folder / "generation_config.json").read_text())
        self.start = self.generation["decoder_start_token_id"]
        self.eos, self.pad = self.model.config.eos_token_id, self.model.config.pad_token_id

    def generate(self, sources: list[str], limits: list[int], batch: int = 32, **overrides) -> list[list[int]]:
        """generate() over the sources, each bounded by its run's length limit: max_new_tokens = limit + 1 (the
        exported forced_eos_token_id makes the last one eos), sources of one limit batched together, since
        generate() takes one number per call and the run's limit grows with the source (the export's note)."""
        import torch

        out: list[list[int]] = [[] for _ in sources]
        for limit in sorted(set(limits)):
            same = [i for i, n in enumerate(limits) if n == limit]
            for at in range(0, len(same), batch):
                part = same[at:at + batch]
                inputs = self.tokenizer([sources[i] for i in part], return_tensors="pt", padding=True)
                with torch.no_grad():
                    rows = self.model.generate(**inputs, max_new_tokens=limit + 1, **overrides).tolist()
                for i, row in zip(part, rows):
                    out[i] = [t for t in row[1:] if t not in (self.eos, self.pad)]
        return out

    def steps(self, source: str, tokens: list[int]):
        """(T + 1, V) float64 log-probabilities of each next token of tokens + eos."""
        import torch

        inputs = self.tokenizer([source], return_tensors="pt")
        with torch.no_grad():
            logits = self.model(**inputs, decoder_input_ids=torch.tensor([[self.start] + tokens])).logits[0]
        return torch.log_softmax(logits.double(), dim=-1)

    def logprob(self, source: str, tokens: list[int]) -> float:
        import torch

        steps = self.steps(source, tokens)
        return float(steps.gather(1, torch.tensor(tokens + [self.eos]).unsqueeze(1)).sum())


def is_tie(hf: HF, source: str, a: list[int], b: list[int], beam: bool, penalty: float) -> bool:
    """Whether two outputs score within TIE under the search that chose between them."""
    if not beam:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        steps = hf.steps(source, a[:at])
        pick = [seq[at] if at < len(seq) else hf.eos for seq in (a, b)]
        return abs(float(steps[at, pick[0]] - steps[at, pick[1]])) <= TIE
    scores = [hf.logprob(source, seq) / (len(seq) + 1) ** penalty for seq in (a, b)]
    return abs(scores[0] - scores[1]) <= TIE


def row(name: str, ours: list[list[int]], theirs: list[list[int]], hf: HF | None = None,
        sources: list[str] | None = None, beam: bool = False, penalty: float = 0.0) -> str:
    equal = sum(a == b for a, b in zip(ours, theirs))
    differ = [(s, a, b) for s, a, b in zip(sources or [None] * len(ours), ours, theirs) if a != b]
    ties = sum(is_tie(hf, s, a, b, beam, penalty) for s, a, b in differ) if hf is not None else 0
    share = 100.0 * equal / max(len(ours), 1)
    rest = f"{ties} of {len(differ)} a tie within {TIE:g}" if hf is not None and differ else "-"
    return f"| {name} | {len(ours)} | {equal} ({share:.1f}%) | {rest} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", nargs="?", type=Path)
    parser.add_argument("--tiny", action="store_true", help="train the tests' tiny run here and measure it")
    parser.add_argument("--steps", type=int, default=150, help="--tiny: training steps")
    parser.add_argument("--split", default="test")
    parser.add_argument("--generated", action="store_true",
                        help="the Marian tests' generated sentences as sources instead of the split (a run of --tiny's "
                             "task trained elsewhere)")
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--member", type=int)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_common import cpu_name, git_commit

    import seqxduce

    with tempfile.TemporaryDirectory(prefix="hf-parity-") as work:
        work = Path(work)
        if args.tiny:
            from seqxduce_marian.testing import sentences, train_tiny_seqxduce_run

            run = train_tiny_seqxduce_run(work / "tiny", steps=args.steps, layers=2)
            sources = sentences(args.limit, seed=5)
        elif args.run is None:
            raise SystemExit("give RUN, or --tiny")
        else:
            run = args.run
            if args.generated:
                from seqxduce_marian.testing import sentences

                sources = sentences(args.limit, seed=5)
            else:
                sources = sources_of(run, args.split, args.limit)
        folder = work / "hf"
        cli("export", run, "--to", "huggingface", "-o", folder, *(["--member", args.member] if args.member else []))
        hf = HF(folder)
        if args.member:  # member K decoded alone, as it was exported
            from seqxduce.members import member_dir

            run = member_dir(run, args.member)
        overrides = ["train.members=1"] if args.member else []
        from seqxduce.rundir import RunDir

        rundir = RunDir(run)
        src = rundir.tokenizers.load(rundir.load_recipe()).src
        penalty = float(hf.generation.get("length_penalty", 1.0))
        print(f"seqxduce {git_commit()}, {cpu_name()}, fp32; run {run}; {len(sources)} sources; exported "
              f"generation_config: beam {hf.generation.get('num_beams')}, length_penalty {penalty:g}, "
              f"max_new_tokens {hf.generation.get('max_new_tokens')}, early_stopping "
              f"{hf.generation.get('early_stopping')}\n")
        print("| comparison | sources | identical outputs | differences |")
        print("| --- | --- | --- | --- |")
        ours_ids = [src.encode(s) + [src.eos_id] for s in sources]
        print(row("tokenization: MarianTokenizer vs the run's", ours_ids,
                  [hf.tokenizer(s)["input_ids"] for s in sources]))

        def native(extra: list[str]) -> list[list[int]]:
            return [o.nbest[0][1].tokens for o in seqxduce.decode(run, sources, overrides=overrides + extra)]

        # the run's limit per source, as its search counts it (search.max_lengths: the source without eos)
        settings = rundir.load_recipe(overrides).decode.settings
        limits = [max(1, math.floor(settings.max_len_a * (len(ids) - 1) + settings.max_len_b)) for ids in ours_ids]
        greedy = hf.generate(sources, limits, num_beams=1)
        print(row("greedy: generate vs decode.name=greedy", native(["decode.name=greedy"]), greedy, hf, sources))
        beam = hf.generate(sources, limits)
        print(row("beam: generate (generation_config) vs decode with length_penalty = power, limit_eos = free",
                  native(["decode.length_penalty=power", "decode.limit_eos=free"]), beam, hf, sources, True, penalty))
        print(row("beam: generate (generation_config) vs the run's own [decode]", native([]), beam))
        back = work / "back"
        cli("import", folder, "--from", "marian", "-o", back)
        for name, extra in (("the run's [decode]", []), ("greedy", ["decode.name=greedy"])):
            first = seqxduce.decode(run, sources, overrides=overrides + extra)
            again = seqxduce.decode(back, sources, overrides=extra)
            print(row(f"round trip, {name}: tokens", [o.nbest[0][1].tokens for o in first],
                      [o.nbest[0][1].tokens for o in again]))
            print(row(f"round trip, {name}: texts", [[o.text] for o in first], [[o.text] for o in again]))
        notes = json.loads((folder / "seqxduce_export.json").read_text()).get("notes", [])
        if notes:
            print("\nthe export's notes (its model card's):\n" + "\n".join(f"- {n}" for n in notes))


if __name__ == "__main__":
    main()
