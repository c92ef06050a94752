"""Training speed of a recipe's model: seqxduce's Trainer.train_step beside the same model in plain
torch.nn.Transformer (and HF Marian when `transformers` is installed), timed in one process, interleaved.

    python bench/train_speed.py RECIPE [--size small|base|big] [--set KEY=VALUE ...] [--steps 20] [--repeats 3]
    python bench/train_speed.py --synthetic [--size small|base] [--threads 2]      # the issue's CPU protocol
    python bench/train_speed.py ... --json figures.json --profile 25

Data: the recipe's own training pairs (token batches of [train] max_tokens, source + target; the --batches
batches with the most pairs, cycled, as ../shared/tools/gpu_bench.py picks them), or with --synthetic the peers
harness's protocol (../shared/tools/peers): random sentences of --length tokens (eos included) on both sides,
--target-tokens target tokens per step, one shared vocabulary of --vocab ids; without a RECIPE the harness's
model and optimizer (post-norm, dropout 0.1 on residuals, attention and activation, tied embeddings, Adam
(0.9, 0.98) at a constant 5e-4, label smoothing 0.1, fp32).

Every model gets the same batches. Per model and repeat: --warmup untimed steps, then --steps timed ones; the
models take turns inside each repeat, so a change in machine load hits all of them. Printed per model: target
tokens/s (median over repeats; spread), median step time, FLOPs of one real step counted by
torch.utils.flop_counter.FlopCounterMode (forward + backward matmuls and attention; scaled per target token to
the other batches, as gpu_bench.py does), achieved FLOP/s and its fraction of a peak measured in this process
(CPU: the best of three fp32 --gemm-size^3 matmuls at the same thread count; CUDA: an 8192^3 matmul in the
recipe's autocast dtype, bf16 for fp32 too), peak memory (CPU: peak RSS during the model's steps, Linux VmHWM
reset per window, the other models' resident weights included; CUDA: torch.cuda.max_memory_allocated), and the
ratio to nn.Transformer and to Marian (median of the per-repeat ratios).

Only Trainer's public entry points are used (built in memory from a recipe, no run directory; plan.train_pairs,
train_step), so the benchmark measures whatever the trainer does inside a step.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package: reach bench_common beside us

import bench_common as bc  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from seqxduce import hookimpl  # noqa: E402
from seqxduce.api import Example, Report, Task  # noqa: E402
from seqxduce.corpus.arrays import collate_indices, token_batches  # noqa: E402
from seqxduce.device import autocast_context  # noqa: E402
from seqxduce.recipe import Recipe, build_recipe, load_recipe, read_toml  # noqa: E402
from seqxduce.registry import Registry, new_manager, reset_registry  # noqa: E402
from seqxduce.training.in_memory import in_memory_run  # noqa: E402
from seqxduce.training.trainer import Trainer  # noqa: E402

# model sizes as --size sets them (explicit keys: a recipe's own d_model would win over a [model] preset)
SIZES: dict[str, dict[str, int]] = {
    "small": {"layers": 3, "d_model": 256, "d_ff": 1024, "heads": 4},  # the small (and Multi30k's)
    "base": {"layers": 6, "d_model": 512, "d_ff": 2048, "heads": 8},
    "big": {"layers": 6, "d_model": 1024, "d_ff": 4096, "heads": 16},
}

# the peers harness's recipe (../shared/tools/peers/peer_seqxduce.py), task and tokenizer replaced by the bench's
PEERS_RECIPE: dict[str, dict[str, Any]] = {
    "model": {"name": "transformer", "norm": "post", "dropout": 0.1, "attention_dropout": 0.1,
              "activation_dropout": 0.1, "share_embeddings": True, "tie_output": True, "max_positions": 256,
              **SIZES["small"]},
    "train": {"device": "auto", "precision": "fp32", "seed": 1234, "update_freq": 1, "optimizer": "adam",
              "betas": [0.9, 0.98], "eps": 1e-8, "schedule": "constant", "lr": 5e-4, "clip_norm": 0.0,
              "label_smoothing": 0.1, "validate_every": 0, "valid_decode_examples": 0},
    "decode": {"name": "beam"},
}
SPECIALS = 4  # <pad> <s> </s> <unk>: ids 0..3 of the word tokenizer


# ------------------------------------------------------------------ synthetic data as plugins


def word(i: int) -> str:
    return f"w{i}"


class SyntheticTask(Task):
    """Random sentences of a fixed length: only a train split (no validation)."""

    splits = ("train",)

    def __init__(self, settings: Any = None, sentences: list[Example] | None = None):
        self.sentences = sentences or []

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        return self.sentences

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        return Report(metrics={}, primary="none")


def synthetic_examples(length: int, sentences: int, vocab: int, seed: int) -> list[Example]:
    """`sentences` pairs of length - 1 random words each side (eos makes `length`); word w<i> gets id i."""
    rng = random.Random(seed)
    line = lambda: " ".join(word(rng.randrange(SPECIALS, vocab - 1)) for _ in range(length - 1))  # noqa: E731
    return [Example(source=line(), target=line()) for _ in range(sentences)]


def bench_plugin(examples: list[Example], vocab: int) -> object:
    """A plugin object registering the synthetic task and a word tokenizer fixed to <specials> w4 .. w<vocab-1>."""
    from seqxduce_text.settings import VocabSettings
    from seqxduce_text.tokenizers import WordTokenizer

    class FixedWords(WordTokenizer):
        def train(self, texts, workdir):  # noqa: ANN001 - the Tokenizer contract's signature
            self._set_tokens(["<pad>", "<s>", "</s>", "<unk>"] + [word(i) for i in range(SPECIALS, vocab)])

    class Plugin:
        @hookimpl
        def register_tasks(self, register):  # noqa: ANN001
            register("bench_synthetic", lambda settings: SyntheticTask(settings, examples),
                     help="train_speed.py: random fixed-length sentences")

        @hookimpl
        def register_tokenizers(self, register):  # noqa: ANN001
            register("bench_words", FixedWords, settings=VocabSettings, help="train_speed.py: w4 .. w<vocab-1>")

    return Plugin()


# ------------------------------------------------------------------ the recipe


def size_overrides(size: str | None) -> list[str]:
    if not size:
        return []
    keys = {**SIZES[size], "encoder_layers": 0, "decoder_layers": 0}
    return [f"model.{k}={v}" for k, v in keys.items()]


@contextlib.contextmanager
def bench_recipe(args: argparse.Namespace) -> Iterator[tuple[Recipe, list[Example] | None]]:
    """The recipe to time (with --synthetic: its [model] and [train] on the synthetic data, with the bench's
    plugins registered process-wide while it is used)."""
    overrides = size_overrides(args.size) + list(args.overrides)
    if not args.synthetic:
        if not args.recipe:
            raise SystemExit("train_speed.py: give a RECIPE, or --synthetic for the peers protocol")
        yield load_recipe(args.recipe, overrides), None
        return
    if args.length < 2 or args.target_tokens < args.length:
        raise SystemExit("train_speed.py: --length must be >= 2 and --target-tokens >= --length")
    per_batch = args.target_tokens // args.length
    examples = synthetic_examples(args.length, per_batch * args.batches, args.vocab, 1234)
    data = {k: dict(v) for k, v in PEERS_RECIPE.items()}
    source, base = "<peers recipe>", Path.cwd()
    if args.recipe:
        given = read_toml(Path(args.recipe))
        data = {k: dict(given.get(k, {})) for k in ("model", "train", "decode")}
        source, base = args.recipe, Path(args.recipe).resolve().parent
    data["task"] = {"name": "bench_synthetic"}
    data["tokenizer"] = {"name": "bench_words", "shared": True}
    pm = new_manager()
    pm.register(bench_plugin(examples, args.vocab), name="train_speed_bench")
    reg = Registry(pm)
    reset_registry(reg)
    try:
        yield build_recipe(data, source=source, base_dir=base, overrides=overrides, reg=reg), examples
    finally:
        reset_registry(None)


# ------------------------------------------------------------------ the plain-torch and Marian models


def sinusoids(length: int, dim: int) -> torch.Tensor:
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
    return table


class TorchTransformer(nn.Module):
    """The recipe's Transformer in torch.nn.TransformerEncoder/Decoder layers: the same widths and depths, norm
    placement (pre-norm adds the final LayerNorms, as seqxduce does), dropout on residuals, attention weights and
    the ReLU each as the recipe says, scaled embeddings + sinusoids, one embedding matrix shared with the output
    projection (a separate source matrix when the vocabulary is not shared)."""

    def __init__(self, s: Any, src_vocab: int, tgt_vocab: int, pad_id: int, shared: bool):
        super().__init__()
        pre = s.norm == "pre"
        self.pad_id, self.scale = pad_id, math.sqrt(s.d_model)
        self.target = nn.Embedding(tgt_vocab, s.d_model, padding_idx=pad_id)
        self.source = self.target if shared else nn.Embedding(src_vocab, s.d_model, padding_idx=pad_id)
        self.register_buffer("positions", sinusoids(1024, s.d_model), persistent=False)
        self.drop = nn.Dropout(s.dropout)
        enc = nn.TransformerEncoderLayer(s.d_model, s.heads, s.d_ff, s.dropout, batch_first=True, norm_first=pre)
        dec = nn.TransformerDecoderLayer(s.d_model, s.heads, s.d_ff, s.dropout, batch_first=True, norm_first=pre)
        self.encoder = nn.TransformerEncoder(enc, s.encoder_layers or s.layers,
                                             norm=nn.LayerNorm(s.d_model) if pre else None,
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, s.decoder_layers or s.layers,
                                             norm=nn.LayerNorm(s.d_model) if pre else None)
        for layer in [*self.encoder.layers, *self.decoder.layers]:  # torch's one `dropout` split as the recipe's
            layer.dropout.p = s.activation_dropout
            for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = s.attention_dropout

    def embed(self, tokens: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        return self.drop(table(tokens) * self.scale + self.positions[: tokens.size(1)])

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        pad = src == self.pad_id
        pad = pad if bool(pad.any()) else None  # as seqxduce: no mask where nothing is padded
        memory = self.encoder(self.embed(src, self.source), src_key_padding_mask=pad)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device)
        h = self.decoder(self.embed(tgt_in, self.target), memory, tgt_mask=causal, tgt_is_causal=True,
                         memory_key_padding_mask=pad)
        return F.linear(h, self.target.weight)  # (B, T, V)


def marian_model(s: Any, src_vocab: int, tgt_vocab: int, pad_id: int, bos_id: int, eos_id: int,
                 shared: bool) -> nn.Module:
    """HF transformers' MarianMTModel from a config (random init, nothing downloaded), as the peers harness
    builds it: post-norm, scaled embeddings, sinusoids, ReLU, tied embeddings."""
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=src_vocab, decoder_vocab_size=tgt_vocab, d_model=s.d_model,
        encoder_layers=s.encoder_layers or s.layers, decoder_layers=s.decoder_layers or s.layers,
        encoder_attention_heads=s.heads, decoder_attention_heads=s.heads,
        encoder_ffn_dim=s.d_ff, decoder_ffn_dim=s.d_ff, activation_function="relu",
        dropout=s.dropout, attention_dropout=s.attention_dropout, activation_dropout=s.activation_dropout,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, max_position_embeddings=1024, scale_embedding=True,
        share_encoder_decoder_embeddings=shared, tie_word_embeddings=True,
        pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=bos_id, decoder_start_token_id=bos_id,
        forced_eos_token_id=None, use_cache=False)
    return MarianMTModel(config)


def marian_missing(recipe: Recipe) -> str | None:
    """Why Marian cannot be the recipe's baseline (None: it can)."""
    s = recipe.model.settings
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "HF Marian: skipped, `transformers` is not installed (pip install -e '.[bench]')"
    if recipe.model.core.name != "transformer" or s.norm != "post" or s.d_k or s.d_v or s.attention_window:
        return "HF Marian: skipped, it has no equivalent of this model (post-norm transformer, default d_k/d_v only)"
    return None


# ------------------------------------------------------------------ the contenders


@dataclass
class Contender:
    """One model under test: a step over batch k, and what it is."""

    name: str
    step: Callable[[int], None]
    params: int
    note: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


def count_params(model: nn.Module) -> int:
    """Trainable parameters, a shared matrix once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())


def plain_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list, recipe: Recipe, pad_id: int,
               device: torch.device, logits_of: Callable) -> Callable[[int], None]:
    """A training step as the peers harness writes one: forward, label-smoothed summed cross-entropy over
    non-pad targets, divided by their count, backward, optimizer step."""
    t = recipe.train

    def step(k: int) -> None:
        src, tgt_in, tgt_out, ntokens = batches[k % len(batches)]
        src, tgt_in, tgt_out = (x.to(device, non_blocking=True) for x in (src, tgt_in, tgt_out))
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with autocast_context(device, t.precision):
            logits = logits_of(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), tgt_out.reshape(-1),
                               ignore_index=pad_id, label_smoothing=t.label_smoothing, reduction="sum")
        (loss / ntokens).backward()
        optimizer.step()

    return step


def adam(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    t = recipe.train
    cls = torch.optim.Adam if t.optimizer == "adam" else torch.optim.AdamW
    return cls(model.parameters(), lr=t.lr, betas=tuple(t.betas), eps=t.eps, weight_decay=t.weight_decay)


def baselines(recipe: Recipe, trainer: Trainer, groups: list[list[int]], wanted: set[str]) -> tuple[list, list]:
    """The plain-torch (and Marian) contenders on the trainer's batches, and lines saying what was skipped."""
    vocab = trainer.parts.tokenizers.vocab()
    s, device = recipe.model.settings, trainer.parts.device
    batches = []
    for indices in groups:
        b = collate_indices(trainer.parts.plan.train_pairs, indices, vocab)
        batches.append((b.src, b.tgt_in, b.tgt_out, b.ntokens))
    out, skipped = [], []
    if recipe.model.core.name != "transformer" or s.d_k or s.d_v or s.attention_window:
        return [], ["nn.Transformer, HF Marian: skipped, they have no equivalent of this model"]
    shared = vocab.shared and s.share_embeddings
    if "torch" in wanted:
        torch.manual_seed(0)
        model = TorchTransformer(s, vocab.src_size, vocab.tgt_size, vocab.pad_id, shared).to(device)
        step = plain_step(model, adam(model, recipe), batches, recipe, vocab.pad_id, device, model)
        out.append(Contender("nn.Transformer", step, count_params(model), "torch.nn layers, same sizes"))
    if "marian" in wanted:
        why = marian_missing(recipe)
        if why:
            skipped.append(why)
        else:
            import transformers

            torch.manual_seed(0)
            model = marian_model(s, vocab.src_size, vocab.tgt_size, vocab.pad_id, vocab.bos_id, vocab.eos_id,
                                 shared).to(device)
            logits = lambda src, tgt_in: model(input_ids=src, decoder_input_ids=tgt_in,  # noqa: E731
                                               use_cache=False).logits
            step = plain_step(model, adam(model, recipe), batches, recipe, vocab.pad_id, device, logits)
            out.append(Contender("HF Marian", step, count_params(model),
                                 f"transformers {transformers.__version__}, "
                                 f"attention {model.config._attn_implementation}"))
    return out, skipped


# ------------------------------------------------------------------ measuring


def counted_flops(step: Callable[[int], None], k: int) -> int:
    """FLOPs of one real step over batch k (forward + backward), as FlopCounterMode counts them."""
    with FlopCounterMode(display=False) as counter:
        step(k)
    return int(counter.get_total_flops())


def borrow_flops(contenders: list[Contender]) -> None:
    """A step whose matmuls FlopCounterMode cannot see (a compiled graph may hide them) counts as the same
    model's step in another contender (equal parameters), and says so."""
    for c in contenders:
        if c.figures["flops_per_step"] == 0:
            twin = next((o for o in contenders if o.params == c.params and o.figures["flops_per_step"]), None)
            if twin is not None:
                c.figures.update(flops_per_step=twin.figures["flops_per_step"],
                                 flops_per_token=twin.figures["flops_per_token"])
                c.note += f"; FLOPs counted on {twin.name} (none visible in its own step)"


def time_window(c: Contender, device: torch.device, tokens: list[int], first: int, warmup: int,
                steps: int) -> dict[str, float]:
    """--warmup untimed then --steps timed steps of one contender from batch `first` on; its figures."""
    for i in range(warmup):
        c.step(first + i)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = bc.rss_mb()
    bc.reset_peak_rss()
    timer = bc.StepTimer(device)
    timer.start()
    ks = [first + warmup + i for i in range(steps)]
    for k in ks:
        c.step(k)
        timer.step()
    times = timer.times()
    toks = sum(tokens[k % len(tokens)] for k in ks)
    memory = (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else bc.peak_rss_mb())
    return {"tok_s": toks / sum(times), "step_s": bc.median(times), "tokens": toks, "seconds": sum(times),
            "peak_memory_mb": memory, "rss_before_mb": rss_before}


def measure_peak(device: torch.device, precision: str, gemm_size: int) -> tuple[float, str]:
    """The peak a fraction is taken of, and how it was measured."""
    if device.type == "cuda":
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        name = "bf16" if dtype == torch.bfloat16 else "fp16"
        return bc.cuda_matmul_peak(device, dtype), f"8192^3 {name} matmul, this process (CUDA events)"
    threads = torch.get_num_threads()
    return bc.cpu_gemm_peak(gemm_size), f"best of 3 fp32 {gemm_size}^3 matmuls, this process, {threads} threads"


def profile(c: Contender, device: torch.device, first: int, steps: int, rows: int) -> str:
    """torch.profiler's table of the ops taking the most self time over `steps` steps (proportions matter)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        for i in range(steps):
            c.step(first + i)
        bc.synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=60)


# ------------------------------------------------------------------ the run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", nargs="?", help="recipe file (optional with --synthetic: the peers recipe)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="recipe override, as `seqxduce train --set` (after --size)")
    p.add_argument("--size", choices=sorted(SIZES), help="model size: sets model.layers, d_model, d_ff, heads")
    p.add_argument("--synthetic", action="store_true", help="random fixed-length sentences (the peers protocol)")
    p.add_argument("--length", type=int, default=25, help="--synthetic: tokens per sentence, eos included")
    p.add_argument("--target-tokens", type=int, default=4100, help="--synthetic: target tokens per step")
    p.add_argument("--vocab", type=int, default=8000, help="--synthetic: shared vocabulary size")
    p.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    p.add_argument("--steps", type=int, default=20, help="timed steps per model and repeat")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before each timed window")
    p.add_argument("--repeats", type=int, default=3, help="timed windows per model (the median is printed)")
    p.add_argument("--models", default="seqxduce,torch,marian",
                   help="comma-separated: seqxduce, torch (nn.Transformer), marian (HF, if installed)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--gemm-size", type=int, default=4096, help="CPU: matrix size of the fp32 peak measurement")
    p.add_argument("--peak", type=float, default=0.0, help="FLOP/s to take fractions of, instead of measuring")
    p.add_argument("--json", help="write the figures to this file ('-': print them)")
    p.add_argument("--profile", type=int, default=0, metavar="ROWS",
                   help="after timing, profile 3 steps of each model and print its ROWS costliest ops")
    args = p.parse_args(argv)
    if min(args.steps, args.repeats, args.batches) < 1 or args.warmup < 0:
        p.error("--steps, --repeats and --batches must be >= 1, --warmup >= 0")
    return args


def pick_groups(trainer: Trainer, recipe: Recipe, args: argparse.Namespace) -> list[list[int]]:
    """Batches of pair indices: the synthetic ones in order, else the recipe's token batches with the most pairs."""
    if args.synthetic:
        per_batch = args.target_tokens // args.length
        return [list(range(k * per_batch, (k + 1) * per_batch)) for k in range(args.batches)]
    batches = token_batches(trainer.parts.plan.train_pairs, recipe.train.max_tokens, 1, 1)
    batches.sort(key=len, reverse=True)  # as gpu_bench.py: comparable across configs
    return batches[: args.batches]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build, time and compare the models; return the figures (printed as a table too)."""
    if args.threads:
        torch.set_num_threads(args.threads)
        with contextlib.suppress(RuntimeError):  # only settable before any inter-op work
            torch.set_num_interop_threads(1)
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    unknown = wanted - {"seqxduce", "torch", "marian"}
    if unknown:
        raise SystemExit(f"train_speed.py: --models: unknown {', '.join(sorted(unknown))}; "
                         "use seqxduce, torch, marian")
    with bench_recipe(args) as (recipe, _):
        torch.manual_seed(0)
        trainer = Trainer(in_memory_run(recipe))
        device = trainer.parts.device
        groups = pick_groups(trainer, recipe, args)
        tokens = [sum(len(trainer.parts.plan.train_pairs[j].tgt) + 1 for j in g) for g in groups]  # eos included

        def seqxduce_step(k: int) -> None:
            indices = groups[k % len(groups)]  # collated in the step, as the loop's prefetch thread does
            pairs = trainer.parts.plan.train_pairs
            trainer.train_step([collate_indices(pairs, indices, trainer.parts.tokenizers.vocab())])
            trainer.state.step += 1  # what the loop does after a step (the schedule and seed move on)

        contenders = []
        if "seqxduce" in wanted:
            contenders.append(Contender("seqxduce", seqxduce_step, count_params(trainer.parts.model),
                                        "Trainer.train_step"))
        extra, skipped = baselines(recipe, trainer, groups, wanted)
        contenders += extra
        if not contenders:
            raise SystemExit("train_speed.py: --models left nothing to time")
        env = bc.environment(device)
        peak, peak_how = (args.peak, "given (--peak)") if args.peak else measure_peak(
            device, recipe.train.precision, args.gemm_size)
        for c in contenders:  # the counted step is each model's first, untimed
            flops = counted_flops(c.step, 0)
            c.figures = {"flops_per_step": flops, "flops_per_token": flops / tokens[0], "windows": []}
        borrow_flops(contenders)
        for r in range(args.repeats):
            for c in contenders:
                c.figures["windows"].append(time_window(c, device, tokens, 1 + r * (args.warmup + args.steps),
                                                        args.warmup, args.steps))
        profiles = {c.name: profile(c, device, 0, 3, args.profile) for c in contenders} if args.profile else {}
    record = summarize(args, recipe, env, peak, peak_how, contenders, skipped, tokens, groups)
    print_run(record, skipped)
    for name, text in profiles.items():
        print(f"\nprofile of 3 steps, {name} (self time, proportions only):\n{text}")
    if args.json:
        bc.write_json(args.json, record)
    return record


def summarize(args: argparse.Namespace, recipe: Recipe, env: dict, peak: float, peak_how: str,
              contenders: list[Contender], skipped: list[str], tokens: list[int], groups: list) -> dict[str, Any]:
    s = recipe.model.settings
    results: dict[str, dict[str, Any]] = {}
    for c in contenders:
        w = c.figures["windows"]
        tok_s = bc.median([x["tok_s"] for x in w])
        achieved = c.figures["flops_per_token"] * tok_s
        results[c.name] = {
            "params": c.params, "note": c.note,
            "tok_s": tok_s, "tok_s_min": min(x["tok_s"] for x in w), "tok_s_max": max(x["tok_s"] for x in w),
            "step_ms": 1000 * bc.median([x["step_s"] for x in w]),
            "flops_per_step": c.figures["flops_per_step"], "flops_per_token": c.figures["flops_per_token"],
            "achieved_flops": achieved, "fraction_of_peak": achieved / peak,
            "peak_memory_mb": max(x["peak_memory_mb"] for x in w),
            "windows": w,
        }
    for base_name, key in (("nn.Transformer", "vs_torch"), ("HF Marian", "vs_marian")):
        if base_name in results:
            for res in results.values():
                ratios = [a["tok_s"] / b["tok_s"] for a, b in zip(res["windows"], results[base_name]["windows"])]
                res[key] = bc.median(ratios)
    return {
        "environment": env,
        "recipe": str(args.recipe or "<peers recipe>"), "overrides": size_overrides(args.size) + args.overrides,
        "data": (f"synthetic: {args.length}-token sentences, {args.target_tokens // args.length} pairs per batch, "
                 f"vocabulary {args.vocab}" if args.synthetic else f"recipe's train split, max_tokens "
                 f"{recipe.train.max_tokens}, the {len(groups)} batches with the most pairs"),
        "model": {"d_model": s.d_model, "d_ff": s.d_ff, "heads": s.heads, "norm": s.norm,
                  "encoder_layers": s.encoder_layers or s.layers, "decoder_layers": s.decoder_layers or s.layers,
                  "dropout": [s.dropout, s.attention_dropout, s.activation_dropout]},
        "precision": recipe.train.precision,
        "target_tokens_per_step": tokens,
        "protocol": {"warmup": args.warmup, "steps": args.steps, "repeats": args.repeats},
        "peak_flops": peak, "peak_how": peak_how,
        "memory": "torch.cuda.max_memory_allocated" if "cuda" in env["device"] else "peak RSS (VmHWM) per window",
        "skipped": skipped,
        "results": results,
    }


def print_run(record: dict[str, Any], skipped: list[str]) -> None:
    env, m = record["environment"], record["model"]
    cuda = "cuda" in env["device"]
    print(f"\ntrain_speed | {env['date']} | {env['device']} | torch {env['torch']} | {env['threads']} threads | "
          f"seqxduce {env['commit']} | load average {env['load_average']}")
    print(f"recipe {record['recipe']} {' '.join(record['overrides'])}".rstrip())
    print(f"model {m['encoder_layers']}+{m['decoder_layers']} layers, d_model {m['d_model']}, d_ff {m['d_ff']}, "
          f"heads {m['heads']}, {m['norm']}-norm, dropout/attention/activation {m['dropout']} | "
          f"{record['precision']} | {record['data']}")
    toks = record["target_tokens_per_step"]
    p = record["protocol"]
    print(f"{min(toks)}-{max(toks)} target tokens per step | {p['warmup']} warm-up + {p['steps']} timed steps, "
          f"{p['repeats']} repeats, models interleaved | peak {bc.si(record['peak_flops'], 'FLOP/s')} "
          f"({record['peak_how']})")
    fraction = "MFU" if cuda else "of GEMM peak"
    headers = ["model", "params", "target tok/s (min-max)", "step ms", "FLOP/step", "FLOP/s", fraction,
               "peak mem MiB", "x nn.Transformer", "x Marian"]
    rows = []
    for name, r in record["results"].items():
        rows.append([name, bc.si(r["params"]), f"{r['tok_s']:,.0f} ({r['tok_s_min']:,.0f}-{r['tok_s_max']:,.0f})",
                     f"{r['step_ms']:.1f}", bc.si(r["flops_per_step"]), bc.si(r["achieved_flops"]),
                     f"{100 * r['fraction_of_peak']:.1f}%", f"{r['peak_memory_mb']:,.0f}",
                     f"{r['vs_torch']:.3f}" if "vs_torch" in r else "-",
                     f"{r['vs_marian']:.3f}" if "vs_marian" in r else "-"])
    print(bc.table(headers, rows))
    print("; ".join(f"{name}: {r['note']}" for name, r in record["results"].items() if r["note"]))
    for line in skipped:
        print(line)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command-line entry; returns the figures it printed."""
    return run(parse_args(argv))


if __name__ == "__main__":
    main()
