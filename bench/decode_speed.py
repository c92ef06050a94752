"""Decoding speed: target tokens/s of beam 4 and greedy, next to plain torch.nn.Transformer and CTranslate2.

    python bench/decode_speed.py                          # small and base, synthetic sources, 2 threads
    python bench/decode_speed.py --sizes small --json out.json
    python bench/decode_speed.py --run runs/multi30k      # also the run's model on its valid sources
    python bench/decode_speed.py --quantize int8          # seqxduce with dynamic int8 Linear layers as well
    python bench/decode_speed.py --compile                # and with its step compiled (decode.compile = true)

Synthetic protocol, the one the peers were measured by: post-norm Transformer,
shared vocabulary of 8,000, small = 3+3 layers d256 h4 ff1024, base = 6+6 d512 h8 ff2048 (small-6+1 and
small-6+2: small's width with the distillation students' layers, encoder + decoder); 64 sources of 25
tokens (24 random words + eos, numpy RandomState(1235)); output forced to 30 tokens (eos banned for 29 steps,
then forced); one warm-up call, then the median of --repeats calls (and, "by CPU time", the least process CPU
time of a call: on a loaded machine, at --threads 1, the steadier figure). Every system decodes the same ids in the
same process, in turns (each timed round calls every system once, so a change of load hits all alike): the
figure to read is the ratio to the torch baseline (bench/torch_baseline.py: nn.TransformerDecoder layers with a
hand-written key/value cache) or to CTranslate2, since absolute figures move with the load.
Models are untrained (random weights): with forced lengths the work does not depend on the weights.

With --run, the run's trained model also decodes the first --sentences sources of its valid split with its own
length limits (not forced), beam 4 and greedy, and the tokens counted are those output (eos included).

Peak memory: the process's peak RSS after each system's warm-up call (it only grows, so read the first system's
figure as its own and later ones as upper bounds), and torch.cuda.max_memory_allocated of that call on CUDA.
CTranslate2 (optional: pip install ctranslate2 transformers) is measured when installed, through a random
HF Marian model of the same shape converted as the peers harness does (float32, int8 with --quantize int8, or
the --ct2-compute types), in the same rounds as seqxduce, so each line prints its ratio to CTranslate2 float32;
otherwise it is skipped with a message.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_baseline  # noqa: E402

from seqxduce.api import DecodeRequest, VocabInfo  # noqa: E402
from seqxduce.decoding.search import beam_search, greedy_search  # noqa: E402
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings  # noqa: E402
from seqxduce.registry import registry  # noqa: E402

SIZES = {
    "small": dict(d_model=256, heads=4, d_ff=1024, layers=3),
    "base": dict(d_model=512, heads=8, d_ff=2048, layers=6),
    "tiny": dict(d_model=32, heads=2, d_ff=64, layers=1),  # the smoke test's
    # the Multi30k students' shapes (recipes/multi30k_en_de_student.toml: a deep encoder, a shallow decoder), beside
    # "small", the teacher member's 3 + 3 (all post-norm here: pre-norm adds one layer norm a stack)
    "small-6+1": dict(d_model=256, heads=4, d_ff=1024, layers=6, decoder_layers=1),
    "small-6+2": dict(d_model=256, heads=4, d_ff=1024, layers=6, decoder_layers=2),
}


def layer_counts(dims: dict) -> tuple[int, int]:
    """(encoder, decoder) layers of one of SIZES: `layers` for both unless `decoder_layers` says otherwise."""
    return dims["layers"], dims.get("decoder_layers", dims["layers"])

VOCAB = 8000
PAD, BOS, EOS = 0, 1, 2  # seqxduce's specials; the synthetic words are ids 4 .. 7998, as the peers'
FIRST_WORD, WORD_END = 4, VOCAB - 1


def synthetic_sources(count: int, length: int, seed: int = 1235) -> torch.Tensor:
    """(count, length) random word ids ending in eos: the peers harness's decode batch for its defaults."""
    rs = np.random.RandomState(seed)
    src = rs.randint(FIRST_WORD, WORD_END, size=(count, length)).astype(np.int64)
    src[:, -1] = EOS
    return torch.from_numpy(src)


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)  # KiB on Linux


def timed(calls: dict[str, Callable[[], int]], repeats: int, device: torch.device) -> dict[str, dict]:
    """Per system: one warm-up call (its memory figures are taken there), then `repeats` rounds that time each
    system once in turn, so that a change of the machine's load hits every system alike; the median is kept.
    A call returns the target tokens it produced."""
    figures: dict[str, dict] = {}
    for name, call in calls.items():
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        call()
        figures[name] = {"peak_rss_mb": peak_rss_mb(), "sec_all": [], "cpu_sec_all": []}
        if device.type == "cuda":
            torch.cuda.synchronize()
            figures[name]["cuda_max_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    for _ in range(repeats):
        for name, call in calls.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            figures[name]["tokens"] = call()
            if device.type == "cuda":
                torch.cuda.synchronize()
            figures[name]["sec_all"].append(round(time.perf_counter() - started, 4))
            figures[name]["cpu_sec_all"].append(round(time.process_time() - cpu_started, 4))
    for figure in figures.values():
        median = statistics.median(figure["sec_all"])
        cpu = min(figure["cpu_sec_all"])
        figure.update(tok_s=round(figure["tokens"] / median, 1), sec_median=round(median, 4),
                      cpu_tok_s=round(figure["tokens"] / cpu, 1), cpu_sec_min=round(cpu, 4))
    return figures


def build_seqxduce(size: str, device: torch.device):
    """The transformer plugin's model for one of SIZES, post-norm, tied embeddings, in eval mode."""
    dims = SIZES[size]
    component = registry().get("model", "transformer")
    encoder, decoder = layer_counts(dims)
    settings = component.settings(d_model=dims["d_model"], heads=dims["heads"], d_ff=dims["d_ff"],
                                  layers=encoder, encoder_layers=encoder, decoder_layers=decoder, norm="post",
                                  share_embeddings=True, tie_output=True)
    model = component.build(settings, VocabInfo(VOCAB, VOCAB, PAD, BOS, EOS, shared=True))
    return model.to(device).eval()


def quantized(model: torch.nn.Module, kind: str) -> torch.nn.Module:
    """The model as `seqxduce decode` runs it (seqxduce.decoding.options.prepare_for_decoding): "int8" a quantized
    copy (`--precision int8`), "none" a copy prepared for fp32 (on the CPU its Linear layers packed for MKL)."""
    import copy

    from seqxduce.decoding.options import prepare_for_decoding
    device = next(model.parameters()).device
    if kind == "none":
        return prepare_for_decoding(copy.deepcopy(model), "fp32", device)
    return prepare_for_decoding(model, kind, device)


def seqxduce_search(model, src: torch.Tensor, beam: int, settings: SearchSettings, autocast: str = "none") -> int:
    request = DecodeRequest(src, [""] * src.size(0), BOS, EOS, PAD)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)
    with torch.inference_mode(), torch.autocast(src.device.type, dtype=dtype, enabled=dtype is not None):
        if beam == 1:
            hyps = greedy_search(model, request, settings)
        else:
            hyps = beam_search(model, request, settings)
    return sum(len(h[0].tokens) + 1 for h in hyps)  # eos included


def forced(beam: int, out_len: int) -> SearchSettings:
    """Exactly out_len tokens: out_len - 1 words, then eos (max_len_a = 0: the source length does not count)."""
    if beam == 1:
        return SearchSettings(max_len_a=0.0, max_len_b=out_len - 1, min_len=out_len - 1)
    return BeamSettings(beam=beam, alpha=0.6, max_len_a=0.0, max_len_b=out_len - 1, min_len=out_len - 1)


def bench_synthetic(size: str, args, device: torch.device, results: dict) -> None:
    src = synthetic_sources(args.sources, args.src_len).to(device)
    torch.manual_seed(0)
    model = build_seqxduce(size, device)
    systems: list[tuple[str, Callable[[int], int]]] = []
    if not args.no_torch:  # first, so that the lines after it print their ratio to it
        dims = SIZES[size]
        baseline = torch_baseline.TorchSeq2Seq(VOCAB, PAD, dims["d_model"], dims["heads"], dims["d_ff"],
                                               *layer_counts(dims)).to(device).eval()
        systems.append(("torch", lambda beam: int(torch_baseline.generate(
            baseline, src, beam, args.out_len, BOS, [PAD, BOS, EOS]).numel())))
    for kind in ["none"] + ([args.quantize] if args.quantize != "none" else []):
        name = "seqxduce" if kind == "none" else f"seqxduce-{kind}"
        decoding_model = quantized(model, kind)
        systems.append((name, lambda beam, m=decoding_model: seqxduce_search(m, src, beam, forced(beam, args.out_len))))
    if args.autocast != "none":  # as `seqxduce decode` runs a run trained with that [train] precision
        systems.append((f"seqxduce-{args.autocast}", lambda beam: seqxduce_search(
            model, src, beam, forced(beam, args.out_len), args.autocast)))
    if args.compile:  # decode.compile = true; the warm-up call pays the compilation, the timed ones do not
        import copy

        from seqxduce.decoding.options import compile_step
        compiled = compile_step(copy.deepcopy(model))
        systems.append(("seqxduce-compile",
                        lambda beam: seqxduce_search(compiled, src, beam, forced(beam, args.out_len))))
    systems += ct2_systems(size, src, args) if not args.no_ct2 else []
    for beam in args.beams:
        measured = timed({name: (lambda call=call, beam=beam: call(beam)) for name, call in systems}, args.repeats,
                         device)
        results.update({f"{size}/beam{beam}/{name}": figures for name, figures in measured.items()})
        for name in measured:
            report(f"{size}/beam{beam}/{name}", results)


def ct2_systems(size: str, src: torch.Tensor, args) -> list[tuple[str, Callable[[int], int]]]:
    """("ct2", call) (and "ct2-int8" with --quantize int8) over a random HF Marian model of this size converted
    to CTranslate2, as the peers harness converts it; none if CTranslate2 is not installed."""
    try:
        import ctranslate2
        import transformers
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        print(f"[{size}] CTranslate2 skipped: pip install ctranslate2 transformers to compare with it")
        return []
    if size == "tiny":
        return []
    dims = SIZES[size]
    work = Path(tempfile.mkdtemp(prefix="decode_speed_ct2_"))
    hf_pad = VOCAB - 1  # as in Marian and the peers harness: pad = decoder start = the last id, never a word
    encoder, decoder = layer_counts(dims)
    config = transformers.MarianConfig(
        vocab_size=VOCAB, decoder_vocab_size=VOCAB, d_model=dims["d_model"], encoder_layers=encoder,
        decoder_layers=decoder, encoder_attention_heads=dims["heads"], decoder_attention_heads=dims["heads"],
        encoder_ffn_dim=dims["d_ff"], decoder_ffn_dim=dims["d_ff"], activation_function="relu",
        max_position_embeddings=1024, scale_embedding=True, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, pad_token_id=hf_pad, eos_token_id=EOS, bos_token_id=0,
        decoder_start_token_id=hf_pad, forced_eos_token_id=None)
    torch.manual_seed(0)
    transformers.MarianMTModel(config).eval().save_pretrained(work / "hf")
    from tokenizers import Tokenizer, models, pre_tokenizers
    specials = {0: "<s>", EOS: "</s>", 3: "<unk>", hf_pad: "<pad>"}
    vocab = {specials.get(i, f"w{i}"): i for i in range(VOCAB)}
    words = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<s>", eos_token="</s>",
                                         unk_token="<unk>", pad_token="<pad>").save_pretrained(work / "hf")
    try:
        TransformersConverter(str(work / "hf")).convert(str(work / "ct2"), force=True)
    except Exception as err:  # noqa: BLE001 - a converter that cannot read the model is a skip, not a failure
        print(f"[{size}] CTranslate2 skipped: conversion failed ({type(err).__name__}: {err})")
        return []
    names = {EOS: "</s>"}
    tokens = [[names.get(int(i), f"w{int(i)}") for i in row] for row in src.cpu()]
    systems = []
    for compute_type in ct2_compute_types(args):
        translator = ctranslate2.Translator(str(work / "ct2"), device=src.device.type, compute_type=compute_type,
                                            intra_threads=torch.get_num_threads(), inter_threads=1)

        def call(beam: int, translator=translator) -> int:
            out = translator.translate_batch(tokens, beam_size=beam, max_decoding_length=args.out_len,
                                             min_decoding_length=args.out_len, num_hypotheses=1, max_batch_size=0)
            return sum(len(o.hypotheses[0]) for o in out)  # 30 words: CT2 does not count the eos it adds

        systems.append(("ct2" if compute_type == "float32" else f"ct2-{compute_type}", call))
    return systems


def ct2_compute_types(args) -> list[str]:
    """CTranslate2's compute types to measure: --ct2-compute, else float32 (and int8 with --quantize int8)."""
    if args.ct2_compute:
        return [c.strip() for c in args.ct2_compute.split(",") if c.strip()]
    return ["float32"] + (["int8"] if args.quantize == "int8" else [])


def bench_run(run: str, args, device: torch.device, results: dict) -> None:
    """The run's trained model on its valid sources with the run's decoder lengths: beam 4 and greedy."""
    from seqxduce import components
    from seqxduce.data import encode_source, pad_sources
    from seqxduce.decoding.decode import load_run
    loaded = load_run(Path(run))
    model = loaded.model.to(device).eval()
    examples = loaded.task.examples("valid", components.data_dir(loaded.recipe))[: args.sentences]
    tok = loaded.tokenizers
    encoded = sorted((encode_source(tok.src, ex.source) for ex in examples), key=len)
    batches = [pad_sources(encoded[i:i + args.sources], tok.tgt.pad_id).to(device)
               for i in range(0, len(encoded), args.sources)]
    lengths = SearchSettings.lengths_of(loaded.decoder.settings) if hasattr(loaded.decoder, "settings") \
        else SearchSettings()
    variants = [("none", model)]  # as `seqxduce decode` loads it (fp32 on the CPU: Linear layers packed)
    if args.quantize != "none":  # loaded again as `decode --precision int8` loads it
        variants.append((args.quantize, load_run(Path(run), [f"decode.precision={args.quantize}"]).model.to(device)))
    for beam in args.beams:
        settings = BeamSettings(beam=beam, alpha=0.6, max_len_a=lengths.max_len_a, max_len_b=lengths.max_len_b,
                                min_len=lengths.min_len) if beam > 1 else lengths
        calls = {}
        for kind, m in variants:
            def call(m=m, beam=beam, settings=settings) -> int:
                total = 0
                for src in batches:
                    request = DecodeRequest(src, [""] * src.size(0), tok.tgt.bos_id, tok.tgt.eos_id, tok.tgt.pad_id)
                    with torch.inference_mode():
                        hyps = beam_search(m, request, settings) if beam > 1 else greedy_search(m, request, settings)
                    total += sum(len(h[0].tokens) + 1 for h in hyps)
                return total
            calls["seqxduce" + ("" if kind == "none" else f"-{kind}")] = call
        for name, figures in timed(calls, args.repeats, device).items():
            key = f"run/beam{beam}/{name}"
            results[key] = dict(figures, sentences=len(encoded))
            report(key, results)


def report(key: str, results: dict) -> None:
    size, beam, name = key.split("/")
    figures = results[key]
    baseline = results.get(f"{size}/{beam}/torch")
    ratio = f"  {figures['tok_s'] / baseline['tok_s']:.2f}x torch" if baseline and name != "torch" else ""
    ct2 = results.get(f"{size}/{beam}/ct2")
    ratio += f"  {figures['tok_s'] / ct2['tok_s']:.2f}x ct2" if ct2 and name != "ct2" else ""
    memory = f", cuda max {figures['cuda_max_allocated_mb']} MiB" if "cuda_max_allocated_mb" in figures else ""
    cpu = ""
    if "cpu_tok_s" in figures:  # on a loaded machine at 1 thread, the process's CPU time is the steadier figure
        ct2_cpu = f", {figures['cpu_tok_s'] / ct2['cpu_tok_s']:.2f}x ct2" if ct2 and "cpu_tok_s" in ct2 and \
            name != "ct2" else ""
        cpu = f"  | by CPU time {figures['cpu_tok_s']:10.1f} tok/s{ct2_cpu}"
    print(f"{key:32s} {figures['tok_s']:10.1f} tok/s  median {figures['sec_median']:.3f} s  "
          f"peak RSS {figures['peak_rss_mb']} MiB{memory}{ratio}{cpu}", flush=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="*", default=["small", "base"], choices=sorted(SIZES),
                        help="synthetic sizes to measure (none: only --run)")
    parser.add_argument("--beams", nargs="+", type=int, default=[4, 1])
    parser.add_argument("--sources", type=int, default=64, help="sources per search call (the peers: 64)")
    parser.add_argument("--src-len", type=int, default=25, help="synthetic source length, eos included")
    parser.add_argument("--out-len", type=int, default=30, help="synthetic output length, eos included")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per measurement (median)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (the peers: 2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--run", help="a run directory or checkpoint: also decode its valid sources")
    parser.add_argument("--sentences", type=int, default=1000, help="valid sources decoded with --run")
    parser.add_argument("--quantize", default="none", choices=("none", "int8"),
                        help="also measure seqxduce with this decode.quantize")
    parser.add_argument("--compile", action="store_true",
                        help="also measure seqxduce with decode.compile = true (torch.compile of the step)")
    parser.add_argument("--autocast", default="none", choices=("none", "bf16", "fp16"),
                        help="also measure seqxduce under this autocast (a run trained in bf16 / fp16 decodes so)")
    parser.add_argument("--no-torch", action="store_true", help="leave out the torch.nn baseline")
    parser.add_argument("--no-ct2", action="store_true", help="leave out CTranslate2")
    parser.add_argument("--ct2-compute", default="",
                        help="CTranslate2 compute types, comma-separated (e.g. float16 on CUDA); default float32, "
                             "and int8 with --quantize int8")
    parser.add_argument("--json", help="write every figure to this file as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    results: dict = {}
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "device": str(device),
            "sources": args.sources, "src_len": args.src_len, "out_len": args.out_len, "repeats": args.repeats,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count()}
    print(" ".join(f"{k}={v}" for k, v in meta.items()))
    for size in args.sizes:
        bench_synthetic(size, args, device, results)
    if args.run:
        bench_run(args.run, args, device, results)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
