"""Parity of an imported Marian model, three ways: with Hugging Face's generate(), with CTranslate2's own converter,
and fine-tuning it (the loss on new text falls; a resumed fine-tuning is bit-exact).

    python bench/marian_parity.py [--model DIR] [--sources 300] [--max-new-tokens 30] [--skip-fine-tuning]
                                  [--stopping-only]

Without --model it builds the tests' tiny MarianMTModel (seqxduce_marian.testing: SentencePiece models trained on
generated sentences, a few training steps on reversing them, a random final_logits_bias) in a temporary folder;
with --model it takes a Marian folder in the Hugging Face format (an OPUS-MT download). It imports the folder
(`seqxduce import --from marian`), then prints:

1. seqxduce's greedy and beam-4 outputs against generate()'s (same beam, length penalty p as
   decode.length_penalty = "power" with alpha = p, max_new_tokens N as max_len_a = 0, max_len_b = N - 1,
   its forced eos at that limit as decode.limit_eos = "free", early_stopping = "never" for the exact search
   seqxduce runs): equal outputs, and the largest difference of their log-probabilities (teacher-forced by
   Hugging Face, eos included; for outputs that reach the limit, generate's own forced eos is free);
   The same with target prefixes (seqxduce_marian.testing.target_prefixes: a third none, a third the word the
   output starts with, a third one or two words absent from the source, which the model finds unlikely), given to
   generate() as decoder_input_ids = [<pad>] + prefix with the limit counting the prefix, as an imported
   max_length does: equal outputs over all rows and over the unlikely-prefix rows, the largest difference of the
   scores (generate's sequences_scores: what follows the prefix, over that part's length) and the mean output
   length of both; then the same prefixes with the folder's own stopping rule (its generation settings'
   early_stopping, absent = generate's default false): generate() with it against the import's own [decode]
   (decode.early_stopping as imported) and against the exact search (early_stopping = "never");
2. `seqxduce export --to ctranslate2` of the import against ct2-transformers-converter of the folder: equal
   outputs (as pieces) under greedy and beam 4; and seqxduce's beam 4 (no length penalty) with the prefixes above
   against translate_batch(target_prefix=...) of the converter's model, over the rows whose output goes on past
   its prefix (CTranslate2 never ends an output right after its prefix);
3. fine-tuning the import on a copying task it was not trained for (the tests' generated sentences): the
   summed log-probability of 40 held-out pairs before and after 12 steps, and whether 6 steps + --resume to 12
   equal 12 in one go, tensor by tensor.
Needs transformers and ctranslate2 (the `test` extra).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import cpu_name, git_commit, load_average  # noqa: E402


def cli(*args: object) -> str:
    """Run a seqxduce command in-process; its output (a failure raises with it)."""
    from click.testing import CliRunner

    from seqxduce.cli import add_plugin_commands

    result = CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])
    if result.exit_code != 0:
        raise SystemExit(f"seqxduce {' '.join(map(str, args))} failed:\n{result.output}")
    return result.output


def generate_parity(folder: Path, run: Path, sources: list[str], max_new: int) -> list[str]:
    """Rows of part 1."""
    from seqxduce_marian.testing import hf_generate

    import seqxduce
    from seqxduce.rundir import RunDir

    rundir = RunDir(run)
    src = rundir.tokenizers.load(rundir.load_recipe()).src
    ids = [src.encode(s) + [src.eos_id] for s in sources]
    rows = []
    for beam, penalty in ((1, 0.0), (4, 0.0), (4, 1.0)):
        reference = hf_generate(folder, ids, beam, max_new, length_penalty=penalty)
        overrides = ["decode.max_len_a=0", f"decode.max_len_b={max_new - 1}"]
        overrides += (["decode.name=greedy"] if beam == 1 else
                      ["decode.name=beam", f"decode.beam={beam}", f"decode.alpha={penalty}",
                       "decode.length_penalty=power", "decode.limit_eos=free", "decode.early_stopping=never"])
        outputs = seqxduce.decode(run, sources, overrides=overrides)
        # an output that reaches the limit ends with generate's forced eos, which seqxduce (limit_eos = "free")
        # scores as generate does, at 0, where the teacher-forced reference charges it: its gap is eos's cost
        equal = [(o.nbest[0][1].logprob, ref[1]) for o, ref in zip(outputs, reference)
                 if o.nbest[0][1].tokens == ref[0] and (beam == 1 or len(ref[0]) < max_new - 1)]
        same = sum(o.nbest[0][1].tokens == ref[0] for o, ref in zip(outputs, reference))
        gap = max((abs(a - b) for a, b in equal), default=float("nan"))
        search = "greedy" if beam == 1 else f"beam {beam}, length_penalty {penalty:g}"
        rows.append(f"| generate() | {search} | {same}/{len(sources)} ({100 * same / len(sources):.1f}%) "
                    f"| {gap:.1e}{'' if beam == 1 else f' ({len(equal)} ending before the limit)'} |")
    return rows


def prefix_parity(folder: Path, run: Path, sources: list[str], max_new: int) -> list[str]:
    """Rows of part 1 with target prefixes."""
    from seqxduce_marian.testing import hf_generate, target_prefixes

    import seqxduce
    from seqxduce.decoding.decode import encode_prefixes

    prefixes = target_prefixes(sources)
    rows = []
    for beam, penalty in ((1, 0.0), (4, 1.0)):
        overrides = ["decode.max_len_a=0", f"decode.max_len_b={max_new - 1}"]
        overrides += (["decode.name=greedy"] if beam == 1 else
                      ["decode.name=beam", f"decode.beam={beam}", f"decode.alpha={penalty}",
                       "decode.length_penalty=power", "decode.limit_eos=free", "decode.early_stopping=never"])
        loaded = seqxduce.engine.load_run(run, overrides)
        src, tgt = loaded.tokenizers.src, loaded.tokenizers.tgt
        prefix_ids = encode_prefixes(tgt, prefixes, "prefix ")
        reference = hf_generate(folder, [src.encode(s) + [src.eos_id] for s in sources], beam, max_new,
                                length_penalty=penalty, prefixes=prefix_ids)
        hyps = [o.nbest[0][1] for o in seqxduce.engine.decode(loaded, sources, prefixes=prefixes)]
        same = [h.tokens == ref[0] for h, ref in zip(hyps, reference)]
        unlikely = same[2::3]
        gap = max((abs(h.score - ref[2]) for h, ref, s in zip(hyps, reference, same) if s and ref[2] is not None),
                  default=float("nan"))
        ours_len = sum(len(h.tokens) for h in hyps) / len(hyps)
        theirs_len = sum(len(ref[0]) for ref in reference) / len(reference)
        search = "greedy" if beam == 1 else f"beam {beam}, length_penalty {penalty:g}"
        rows.append(f"| generate(decoder_input_ids) | {search}, target prefixes | {sum(same)}/{len(sources)} "
                    f"({100 * sum(same) / len(sources):.1f}%); unlikely prefixes {sum(unlikely)}/{len(unlikely)}; "
                    f"mean output {ours_len:.1f} tokens (generate {theirs_len:.1f}) | "
                    f"{'-' if beam == 1 else f'{gap:.1e} (scores)'} |")
    return rows


def stopping_parity(folder: Path, run: Path, sources: list[str], max_new: int) -> list[str]:
    """Rows of part 1 with the folder's own stopping rule (its generation settings' early_stopping, absent =
    generate's default false) and the target prefixes: the import's own [decode] (only the length limit set as the
    other rows set it) against generate() with that rule, and the exact search ("never") against it."""
    import json

    from seqxduce_marian.testing import hf_generate, target_prefixes

    import seqxduce
    from seqxduce.decoding.decode import encode_prefixes

    generation = folder / "generation_config.json"
    own = json.loads(generation.read_text()).get("early_stopping") if generation.exists() else None
    own = False if own is None else own
    prefixes = target_prefixes(sources)
    limits = ["decode.max_len_a=0", f"decode.max_len_b={max_new - 1}"]
    imported = seqxduce.engine.load_run(run, limits)
    settings = imported.recipe.decode.settings
    src, tgt = imported.tokenizers.src, imported.tokenizers.tgt
    prefix_ids = encode_prefixes(tgt, prefixes, "prefix ")
    reference = hf_generate(folder, [src.encode(s) + [src.eos_id] for s in sources], settings.beam, max_new,
                            length_penalty=settings.alpha, prefixes=prefix_ids, early_stopping=own)
    rows = []
    for loaded, what in ((imported, f"the import's own (early_stopping = {json.dumps(settings.early_stopping)})"),
                         (seqxduce.engine.load_run(run, [*limits, "decode.early_stopping=never"]),
                          "early_stopping = \"never\" (the exact search)")):
        hyps = [o.nbest[0][1] for o in seqxduce.engine.decode(loaded, sources, prefixes=prefixes)]
        same = [h.tokens == ref[0] for h, ref in zip(hyps, reference)]
        gap = max((abs(h.score - ref[2]) for h, ref, s in zip(hyps, reference, same) if s), default=float("nan"))
        rows.append(f"| generate(decoder_input_ids), the folder's own early_stopping = {json.dumps(own)} | "
                    f"beam {settings.beam}, length_penalty {settings.alpha:g}, target prefixes; seqxduce: {what} | "
                    f"{sum(same)}/{len(sources)} ({100 * sum(same) / len(sources):.1f}%); unlikely prefixes "
                    f"{sum(same[2::3])}/{len(same[2::3])} | {gap:.1e} (scores) |")
    return rows


def ctranslate2_prefix_parity(run: Path, sources: list[str], max_new: int, work: Path) -> str:
    """The target_prefix row of part 2 (after ctranslate2_parity converted the folder into work / "theirs")."""
    import ctranslate2
    from seqxduce_marian.testing import target_prefixes

    import seqxduce
    from seqxduce.decoding.decode import encode_prefixes

    prefixes = target_prefixes(sources)
    loaded = seqxduce.engine.load_run(run, ["decode.max_len_a=0", f"decode.max_len_b={max_new - 1}",
                                            "decode.alpha=0", "decode.beam=4"])
    src, tgt = loaded.tokenizers.src, loaded.tokenizers.tgt
    prefix_ids = encode_prefixes(tgt, prefixes, "prefix ")
    found = ctranslate2.Translator(str(work / "theirs")).translate_batch(
        [[src.id_to_token(i) for i in src.encode(s)] + ["</s>"] for s in sources],
        target_prefix=[[tgt.id_to_token(i) for i in p] for p in prefix_ids], beam_size=4, length_penalty=0.0,
        max_decoding_length=max_new, min_decoding_length=0)
    ours = [o.nbest[0][1].tokens for o in seqxduce.engine.decode(loaded, sources, prefixes=prefixes)]
    going_on = [([tgt.id_to_token(i) for i in o], f.hypotheses[0]) for o, f, p in zip(ours, found, prefix_ids)
                if len(o) > len(p)]
    same = sum(a == b for a, b in going_on)
    return (f"| translate_batch(target_prefix), converter's model | beam 4, no length penalty, target prefixes "
            f"| {same}/{len(going_on)} ({100 * same / max(len(going_on), 1):.1f}%) of the outputs that go on past "
            f"their prefix ({len(sources) - len(going_on)} end right after it) | |")


def ctranslate2_parity(folder: Path, run: Path, sources: list[str], max_new: int, work: Path) -> list[str]:
    """Rows of part 2."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    from seqxduce.rundir import RunDir

    cli("export", run, "--to", "ctranslate2", "-o", work / "ours")
    TransformersConverter(str(folder)).convert(str(work / "theirs"))
    rundir = RunDir(run)
    src = rundir.tokenizers.load(rundir.load_recipe()).src
    batch = [[src.id_to_token(i) for i in src.encode(s)] for s in sources]
    rows = []
    for beam in (1, 4):
        options = dict(beam_size=beam, max_decoding_length=max_new, length_penalty=0.0)
        ours = ctranslate2.Translator(str(work / "ours")).translate_batch(batch, suppress_sequences=[["<pad>"]],
                                                                          **options)
        theirs = ctranslate2.Translator(str(work / "theirs")).translate_batch([b + ["</s>"] for b in batch],
                                                                              **options)
        same = sum(a.hypotheses[0] == b.hypotheses[0] for a, b in zip(ours, theirs))
        search = "greedy" if beam == 1 else f"beam {beam}"
        rows.append(f"| ct2-transformers-converter | {search} | {same}/{len(sources)} "
                    f"({100 * same / len(sources):.1f}%) | |")
    return rows


def fine_tuning(run: Path, work: Path) -> list[str]:
    """Rows of part 3."""
    import torch
    from seqxduce_marian.testing import sentences

    data = work / "mydata"
    data.mkdir()
    for split, count, seed in (("train", 200, 11), ("valid", 40, 12), ("test", 40, 13)):
        lines = sentences(count, seed=seed, longest=6)
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    sets = []
    for value in (f"task.data_dir={data}", "train.schedule=constant", "train.lr=0.002", "train.max_tokens=600",
                  "train.validate_every=6", "train.checkpoint_every=6", "train.valid_decode_examples=5",
                  "train.device=cpu", "train.max_steps=12"):
        sets += ["--set", value]

    def logprob(model_run: Path) -> float:
        out = work / f"{model_run.name}.scores"
        cli("score", model_run, "--source", data / "valid.en", "--target", data / "valid.de", "-o", out)
        return sum(float(line.split("\t")[0]) for line in out.read_text(encoding="utf-8").splitlines())

    cli("train", run / "recipe.toml", "--init-from", run, "--out", work / "tuned", *sets)
    cli("train", run / "recipe.toml", "--init-from", run, "--out", work / "split", *sets, "--set", "train.max_steps=6")
    cli("train", work / "split" / "recipe.toml", "--out", work / "split", "--resume", "--set", "train.max_steps=12")
    a = torch.load(work / "tuned" / "checkpoints" / "step_00000012.pt", weights_only=True)["model"]
    b = torch.load(work / "split" / "checkpoints" / "step_00000012.pt", weights_only=True)["model"]
    exact = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    before, after = logprob(run), logprob(work / "tuned")
    return [f"| fine-tuning, 12 steps | log-prob of 40 held-out pairs | {before:.2f} -> {after:.2f} | |",
            f"| 6 steps + --resume to 12 against 12 | every tensor equal | {exact} | |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a Marian folder in the Hugging Face format (default: the tiny one)")
    parser.add_argument("--sources", type=int, default=300)
    parser.add_argument("--max-new-tokens", type=int, default=30)
    parser.add_argument("--skip-fine-tuning", action="store_true", help="print parts 1 and 2 only")
    parser.add_argument("--stopping-only", action="store_true",
                        help="print only the rows with the folder's own early_stopping (part 1's last two)")
    args = parser.parse_args()
    from seqxduce_marian.testing import build_tiny_marian, sentences

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = args.model or build_tiny_marian(work / "tiny-marian")
        run = work / "run"
        cli("import", folder, "--from", "marian", "-o", run)
        sources = sentences(args.sources, seed=5)
        print(f"commit {git_commit()}, {cpu_name()}, load {load_average()}")
        print("| compared with | search | equal outputs | largest log-prob difference of equal outputs |")
        print("|---|---|---|---|")
        if args.stopping_only:
            for row in stopping_parity(folder, run, sources, args.max_new_tokens):
                print(row, flush=True)
            return
        for row in generate_parity(folder, run, sources, args.max_new_tokens):
            print(row, flush=True)
        for row in prefix_parity(folder, run, sources, args.max_new_tokens):
            print(row, flush=True)
        for row in stopping_parity(folder, run, sources, args.max_new_tokens):
            print(row, flush=True)
        for row in ctranslate2_parity(folder, run, sources, args.max_new_tokens, work):
            print(row, flush=True)
        print(ctranslate2_prefix_parity(run, sources, args.max_new_tokens, work), flush=True)
        if not args.skip_fine_tuning:
            for row in fine_tuning(run, work):
                print(row, flush=True)


if __name__ == "__main__":
    main()
