"""The training loop: token batches, label-smoothed loss, Adam with the paper's schedule, precision,
data parallelism over torch.distributed, validation, checkpoints and exact resume."""

from __future__ import annotations

import contextlib
import math
import random
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from seqxduce import checkpoint as ckpt
from seqxduce import components, distributed
from seqxduce.api import UserError
from seqxduce.console import MetricsLog, TrainProgress, console, format_figures
from seqxduce.data import Pair, batches_for_step, collate, curriculum_cap, encode_pairs, steps_in_epoch, token_batches
from seqxduce.recipe import Recipe
from seqxduce.settings import TrainSettings


def inverse_sqrt_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Vaswani et al. 2017, eq. 3: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times scale."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def learning_rate(settings: TrainSettings, step: int, d_model: int | None) -> float:
    """The learning rate at an optimizer step (1-based) under the recipe's schedule."""
    if settings.schedule == "constant":
        return settings.lr
    if not d_model:
        raise UserError("[train] schedule = \"inverse_sqrt\" needs the model's d_model; set schedule = \"constant\"")
    return inverse_sqrt_lr(step, d_model, settings.warmup_steps, settings.lr_scale)


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets.

    The smoothed target puts 1 - epsilon on the gold token and epsilon spread uniformly over the whole
    vocabulary (Szegedy et al. 2016, as used by Vaswani et al. 2017).
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    mask = target != pad_id
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    uniform = -lprobs.mean(dim=-1)  # (B, T)
    loss = (1.0 - epsilon) * nll + epsilon * uniform
    return loss[mask].sum(), nll[mask].sum()


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    metrics: dict[str, float]


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 1
    step_in_epoch: int = 0


def resolve_device(name: str) -> torch.device:
    """cpu, cuda, cuda:N or auto."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"[train] device = {name!r} but no CUDA device is visible; use device = \"cpu\"")
    return torch.device(name)


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """torch.autocast for bf16/fp16, nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def set_step_seed(seed: int, rank: int, step: int) -> None:
    """Reseed per optimizer step (as fairseq does) so dropout is reproducible across resume and distinct per rank."""
    value = (seed * 1_000_003 + rank * 7_919 + step) % (2**63)
    torch.manual_seed(value)
    random.seed(value)


class Trainer:
    """One training run in one run directory, on one rank of a (possibly single-process) world."""

    def __init__(self, recipe: Recipe, run_dir: Path, resume: bool = False):
        self.recipe = recipe
        self.settings = recipe.train
        self.run_dir = Path(run_dir)
        self.dist = distributed.setup(recipe.train.device)
        self.device = self.dist.device or resolve_device(recipe.train.device)
        self.is_main = self.dist.rank == 0
        self._check_run_dir(resume)
        self.log = MetricsLog(self.run_dir / components.METRICS_FILE if self.is_main else None)
        self.task = components.build_task(recipe)
        self.data_dir = components.data_dir(recipe)
        self._prepare_data()
        self.train_examples = self.task.examples("train", self.data_dir)
        self.valid_examples = self.task.examples("valid", self.data_dir) if "valid" in self.task.splits else []
        self.tokenizers = self._tokenizers(resume)
        vocab = self.tokenizers.vocab()
        self.pad_id, self.bos_id, self.eos_id = vocab.pad_id, vocab.bos_id, vocab.eos_id
        self.train_pairs = self._encode(self.train_examples, "train")
        self.valid_pairs = self._encode(self.valid_examples, "valid") if self.valid_examples else []
        self.longest_source = max(len(p.src) for p in self.train_pairs)
        torch.manual_seed(self.settings.seed)
        self.model = components.build_model(recipe, vocab).to(self.device)
        self.d_model = getattr(self.model, "d_model", None) or getattr(recipe.model.settings, "d_model", None)
        self.wrapped = self.dist.wrap(self.model)
        self.optimizer = self._optimizer()
        # sum-over-tokens losses are large: start at 2^7 as fairseq does, not 2^16, to avoid skipped first steps
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=2.0**7,
                                           enabled=self.settings.precision == "fp16")
        self.state = TrainState()
        if resume:
            self._resume()
        self._write_recipe()
        self.stop_requested = False

    # ------------------------------------------------------------ setup

    def _check_run_dir(self, resume: bool) -> None:
        existing = ckpt.step_checkpoints(self.run_dir / components.CHECKPOINT_DIR)
        if existing and not resume:
            raise UserError(
                f"{self.run_dir} already holds checkpoints (latest {existing[-1].name}); "
                "continue it with --resume or train into another --out"
            )
        if resume and not existing:
            raise UserError(f"--resume: {self.run_dir / components.CHECKPOINT_DIR} holds no checkpoint to resume from")
        # relative paths in the recipe now resolve against the run directory the recipe is saved in
        self.recipe.task.core.data_dir = str(components.data_dir(self.recipe))
        self.recipe.base_dir = self.run_dir.resolve()
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if resume:  # an average of the old last checkpoints no longer stands for the run
                (self.run_dir / components.AVERAGE_FILE).unlink(missing_ok=True)
        self.dist.barrier()

    def _write_recipe(self) -> None:
        """Save the resolved recipe, only once the model is built (and any checkpoint loaded) with it, so that
        a run directory never holds a recipe its checkpoints do not fit."""
        if self.is_main:
            components.atomic_write_text(self.run_dir / components.RECIPE_FILE, self.recipe.to_toml())
        self.dist.barrier()

    def _prepare_data(self) -> None:
        if self.is_main:
            self.task.prepare(self.data_dir)
        self.dist.barrier()

    def _tokenizers(self, resume: bool) -> components.Tokenizers:
        """A resumed run keeps the tokenizers its checkpoints were trained with; a new run trains its own,
        replacing any left in the run directory by an earlier attempt (they may come from other settings)."""
        if not resume and self.is_main:
            components.train_tokenizers(self.recipe, self.train_examples, self.run_dir)
        self.dist.barrier()
        if not components.tokenizers_saved(self.recipe, self.run_dir):
            raise UserError(f"--resume: {self.run_dir} holds no tokenizer files; train into a new --out")
        return components.load_tokenizers(self.recipe, self.run_dir)

    def _encode(self, examples: list, split: str) -> list[Pair]:
        pairs, skipped = encode_pairs(examples, self.tokenizers.src, self.tokenizers.tgt,
                                      self.settings.max_source_len, self.settings.max_target_len)
        if skipped and self.is_main:
            console.print(f"{split}: skipped {skipped} of {len(examples)} pairs over max_source_len/max_target_len")
        if not pairs:
            raise UserError(f"{split}: no pairs left after the length limits; "
                            "raise [train] max_source_len/max_target_len")
        return pairs

    def _optimizer(self) -> torch.optim.Optimizer:
        s = self.settings
        if len(s.betas) != 2:
            raise UserError(f"[train] betas must hold two numbers, got {s.betas!r}")
        cls = torch.optim.Adam if s.optimizer == "adam" else torch.optim.AdamW
        lr = learning_rate(s, 1, self.d_model)
        return cls(self.model.parameters(), lr=lr, betas=tuple(s.betas), eps=s.eps, weight_decay=s.weight_decay)

    # ------------------------------------------------------------ checkpoints

    def _state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.state.step,
            "epoch": self.state.epoch,
            "step_in_epoch": self.state.step_in_epoch,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        }

    def save(self) -> Path:
        path = ckpt.step_path(self.run_dir / components.CHECKPOINT_DIR, self.state.step)
        if self.is_main:
            ckpt.atomic_save(self._state_dict(), path)
            ckpt.prune(path.parent, max(self.settings.keep_checkpoints, self.settings.average_last, 1))
        self.dist.barrier()
        return path

    def _resume(self) -> None:
        latest, state = ckpt.load_latest(self.run_dir / components.CHECKPOINT_DIR)
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as err:
            raise UserError(f"--resume: {latest} does not fit the model the recipe now builds "
                            f"({str(err).splitlines()[0]}); resume without changing [model] or [tokenizer]"
                            ) from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.state = TrainState(int(state["step"]), int(state["epoch"]), int(state["step_in_epoch"]))
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(_as_random_state(state["rng"]["python"]))
        if self.is_main:
            console.print(f"resumed from {latest} at step {self.state.step}")

    # ------------------------------------------------------------ the loop

    def _source_cap(self, step: int) -> int | None:
        """The length curriculum's source cap at `step` (None: every pair trains)."""
        s = self.settings
        return curriculum_cap(step, s.curriculum_start_len, s.curriculum_steps, self.longest_source)

    def _epoch_batches(self, epoch: int, cap: int | None) -> list[list[int]]:
        # a function of (epoch, cap) only, so --resume rebuilds the same batches
        return token_batches(self.train_pairs, self.settings.max_tokens, self.settings.seed, epoch,
                             max_source=cap)

    def run(self) -> TrainResult:
        """Train to max_steps; on Ctrl-C, finish the current step and save it so that --resume continues it.

        Ctrl-C only sets a flag that the loop reads between steps: an interrupt inside an optimizer step
        would save parameters of one step with the data position and RNG state of another. A second
        Ctrl-C stops at once, keeping the checkpoints already written.
        """
        with _stop_on_sigint(self):
            try:
                return self._run()
            except KeyboardInterrupt:
                saved = ckpt.step_checkpoints(self.run_dir / components.CHECKPOINT_DIR)
                kept = f"the last checkpoint is {saved[-1]}" if saved else "no checkpoint was written"
                raise UserError(f"interrupted during step {self.state.step + 1}; {kept}; continue with --resume"
                                ) from None

    def _stop_now(self) -> bool:
        """Whether Ctrl-C was pressed on any rank (all ranks must stop at the same step)."""
        flag = torch.tensor([1.0 if self.stop_requested else 0.0], dtype=torch.float64)
        return bool(self.dist.all_reduce_max(flag)[0] > 0)

    def _interrupted(self) -> UserError:
        path = self.save()
        return UserError(f"interrupted at step {self.state.step}; saved {path}; continue with --resume")

    def _run(self) -> TrainResult:
        s = self.settings
        cap = self._source_cap(self.state.step)
        batches = self._epoch_batches(self.state.epoch, cap)
        per_epoch = steps_in_epoch(len(batches), self.dist.world_size, s.update_freq)
        if per_epoch == 0 and cap is not None:
            raise UserError(f"[train] curriculum_start_len = {s.curriculum_start_len} leaves no training pair "
                            f"(sources here have at least {min(len(p.src) for p in self.train_pairs)} tokens, "
                            "eos included); raise it")
        if per_epoch == 0:
            raise UserError(
                f"the training data fill {len(batches)} batches, fewer than world_size * update_freq = "
                f"{self.dist.world_size * s.update_freq}; lower [train] max_tokens or update_freq"
            )
        last_metrics: dict[str, float | str] = {}
        window = _Window()
        with TrainProgress(s.max_steps, self.state.step, enabled=self.is_main) as progress:
            while self.state.step < s.max_steps:
                if self._source_cap(self.state.step) != cap:  # the curriculum admits longer sources
                    cap = self._source_cap(self.state.step)
                    batches = self._epoch_batches(self.state.epoch, cap)
                    per_epoch = steps_in_epoch(len(batches), self.dist.world_size, s.update_freq)
                if self.state.step_in_epoch >= per_epoch:
                    if s.max_epochs and self.state.epoch >= s.max_epochs:
                        break
                    self.state.epoch += 1
                    self.state.step_in_epoch = 0
                    batches = self._epoch_batches(self.state.epoch, cap)
                    per_epoch = steps_in_epoch(len(batches), self.dist.world_size, s.update_freq)
                group = batches_for_step(batches, self.state.step_in_epoch, self.dist.rank, self.dist.world_size,
                                         s.update_freq)
                figures = self.train_step(group)
                self.state.step += 1
                self.state.step_in_epoch += 1
                window.add(figures)
                step = self.state.step
                if step % s.log_every == 0 or step == s.max_steps:
                    summary = window.summary(self.optimizer.param_groups[0]["lr"])
                    self.log.write("train", step=step, epoch=self.state.epoch, **summary)
                    progress.update(step, summary)
                    progress.print(f"step {step} | " + format_figures(summary) + f" | eta {progress.eta(step)}")
                    window = _Window()
                else:
                    progress.update(step)
                if self._stop_now():
                    raise self._interrupted()
                if s.validate_every and step % s.validate_every == 0 and step < s.max_steps:
                    last_metrics = self.validate(progress)
                if step % s.checkpoint_every == 0 and step < s.max_steps:
                    self.save()
        self.save()
        if self.valid_pairs:
            last_metrics = self.validate(progress)
        if s.average_last > 1 and self.is_main:
            self._average()
        self.dist.barrier()
        return TrainResult(self.run_dir, self.state.step, last_metrics)

    def train_step(self, group: list[list[int]]) -> dict[str, float]:
        """One optimizer step over this rank's batches; gradients are normalised by the global token count."""
        s = self.settings
        step = self.state.step + 1
        set_step_seed(s.seed, self.dist.rank, step)
        lr = learning_rate(s, step, self.d_model)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.wrapped.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals = torch.zeros(4, dtype=torch.float64)  # loss, nll, tokens, aux
        model_stats: list[dict[str, float]] = []
        started = time.perf_counter()
        for i, indices in enumerate(group):
            batch = collate([self.train_pairs[j] for j in indices], self.pad_id, self.bos_id, self.eos_id)
            batch = batch.to(self.device)
            sync = i == len(group) - 1
            with self.dist.no_sync(self.wrapped, sync), autocast_context(self.device, s.precision):
                out = self.wrapped(batch.src, batch.tgt_in)
                loss, nll = label_smoothed_nll(out.logits, batch.tgt_out, s.label_smoothing, self.pad_id)
                total = loss
                if out.aux_loss is not None:
                    # the aux loss (e.g. ACT ponder cost) is a mean; weight it by tokens like the main loss
                    total = total + out.aux_loss.float() * batch.ntokens
                self.scaler.scale(total).backward()
            aux = float(out.aux_loss.detach()) if out.aux_loss is not None else 0.0
            totals += torch.tensor([float(loss.detach()), float(nll.detach()), batch.ntokens, aux * batch.ntokens],
                                   dtype=torch.float64)
            model_stats.append(out.stats)
        totals = self.dist.all_reduce_sum(totals)
        ntokens = float(totals[2])
        self.scaler.unscale_(self.optimizer)
        # DDP averaged gradients over ranks; undo that and divide by the tokens of the whole global batch
        factor = self.dist.world_size / max(ntokens, 1.0)
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(factor)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), s.clip_norm if s.clip_norm > 0 else float("inf")))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        elapsed = time.perf_counter() - started
        return {"loss": float(totals[0]), "nll": float(totals[1]), "tokens": ntokens, "aux": float(totals[3]),
                "grad_norm": grad_norm, "seconds": elapsed, **reduce_stats(model_stats, self.dist)}

    # ------------------------------------------------------------ validation

    @torch.no_grad()
    def validate(self, progress: TrainProgress | None = None) -> dict[str, float | str]:
        """Loss and perplexity on the valid split, and the task's metric on a greedy decode of a sample."""
        metrics: dict[str, float] = {}
        if self.is_main and self.valid_pairs:
            metrics = self._valid_loss()
            metrics.update(self._valid_metric())
            self.log.write("valid", step=self.state.step, **metrics)
            line = f"valid step {self.state.step} | " + format_figures(metrics)
            if progress is not None:
                progress.print(line)
        self.dist.barrier()
        return metrics

    def _valid_loss(self) -> dict[str, float]:
        self.model.eval()
        loss_sum = nll_sum = tokens = 0.0
        for indices in token_batches(self.valid_pairs, self.settings.max_tokens, 0, 0, shuffle=False):
            batch = collate([self.valid_pairs[j] for j in indices], self.pad_id, self.bos_id, self.eos_id)
            batch = batch.to(self.device)
            with autocast_context(self.device, self.settings.precision):
                out = self.model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_nll(out.logits, batch.tgt_out, self.settings.label_smoothing, self.pad_id)
            loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.ntokens
        nll = nll_sum / max(tokens, 1)
        return {"loss": loss_sum / max(tokens, 1), "nll": nll, "ppl": math.exp(min(nll, 100.0))}

    def _valid_metric(self) -> dict[str, float | str]:
        from seqxduce.decoding import decode_examples

        sample = self.valid_examples[: self.settings.valid_decode_examples]
        if not sample:
            return {}
        recipe_search = self.settings.valid_search == "recipe"
        decoder = components.build_decoder(self.recipe, self.tokenizers) if recipe_search else None
        outputs = decode_examples(self.model, self.tokenizers, self.task, sample, decoder=decoder,
                                  device=self.device, precision=self.settings.precision,
                                  decode_settings=self.recipe.decode)
        report = self.task.score([o.text for o in outputs], [ex.ref for ex in sample], [ex.source for ex in sample])
        metrics: dict[str, float | str] = {"search": self.recipe.decode.core.name if recipe_search else "greedy"}
        metrics.update({f"valid_{k}": v for k, v in report.metrics.items()})
        return metrics

    def _average(self) -> None:
        paths = ckpt.step_checkpoints(self.run_dir / components.CHECKPOINT_DIR)[-self.settings.average_last:]
        ckpt.atomic_save(ckpt.average(paths), self.run_dir / components.AVERAGE_FILE)
        console.print(f"averaged {len(paths)} checkpoints into {self.run_dir / components.AVERAGE_FILE}")


def reduce_stats(per_batch: list[dict[str, float]], world: distributed.World) -> dict[str, float]:
    """A model's stats (ModelOutput.stats) over the accumulated batches of all ranks: a name ending in
    `_max` by maximum, any other by mean."""
    names = sorted({name for stats in per_batch for name in stats})
    if not names:
        return {}
    maxed = [n for n in names if n.endswith("_max")]
    meaned = [n for n in names if not n.endswith("_max")]
    maxima = torch.tensor([max(float(s.get(n, float("-inf"))) for s in per_batch) for n in maxed],
                          dtype=torch.float64)
    means = torch.tensor([sum(float(s.get(n, 0.0)) for s in per_batch) / len(per_batch) for n in meaned],
                         dtype=torch.float64)
    maxima = world.all_reduce_max(maxima)
    means = world.all_reduce_sum(means) / world.world_size
    return {**dict(zip(maxed, maxima.tolist())), **dict(zip(meaned, means.tolist()))}


# a training step's own figures; the others it returns are the model's stats
TRAINER_FIGURES = ("loss", "nll", "tokens", "aux", "grad_norm", "seconds")


class _Window:
    """Sums training figures between two log lines."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.steps = 0
        self.started = time.perf_counter()

    def add(self, figures: dict[str, float]) -> None:
        self.steps += 1
        for k, v in figures.items():
            if k.endswith("_max") and k not in TRAINER_FIGURES:
                self.sums[k] = max(self.sums.get(k, float("-inf")), v)
            else:
                self.sums[k] = self.sums.get(k, 0.0) + v

    def summary(self, lr: float) -> dict[str, float]:
        tokens = max(self.sums.get("tokens", 0.0), 1.0)
        nll = self.sums.get("nll", 0.0) / tokens
        out = {"loss": self.sums.get("loss", 0.0) / tokens, "ppl": math.exp(min(nll, 100.0)), "lr": lr,
               "tokens_per_s": self.sums.get("tokens", 0.0) / max(time.perf_counter() - self.started, 1e-9),
               "grad_norm": self.sums.get("grad_norm", 0.0) / max(self.steps, 1)}
        if self.sums.get("aux"):
            out["aux_loss"] = self.sums["aux"] / tokens
        for k, v in self.sums.items():
            if k not in TRAINER_FIGURES:
                out[k] = v if k.endswith("_max") else v / max(self.steps, 1)
        return out


@contextlib.contextmanager
def _stop_on_sigint(trainer: Trainer):
    """While training, a first Ctrl-C asks the trainer to stop after its current step; a second one raises
    KeyboardInterrupt. Outside the main thread signals cannot be handled and Ctrl-C keeps its default."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if trainer.stop_requested:
            raise KeyboardInterrupt
        trainer.stop_requested = True
        console.print("stopping after this step (Ctrl-C again to stop at once)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _as_random_state(value: Any) -> tuple:
    """random.setstate needs tuples; a checkpoint may give lists back."""
    version, internal, gauss = value
    return (version, tuple(internal), gauss)


def train(recipe: Recipe, out: Path, resume: bool = False) -> TrainResult:
    """Train the recipe's model into run directory `out` (resuming from its latest checkpoint if asked)."""
    trainer = Trainer(recipe, Path(out), resume=resume)
    try:
        return trainer.run()
    finally:
        trainer.dist.close()
