"""The training loop: token batches, label-smoothed loss, Adam with the paper's schedule, precision,
data parallelism over torch.distributed, validation, checkpoints and exact resume."""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqxduce import checkpoint as ckpt
from seqxduce import components, distributed
from seqxduce.api import TrainingStopped, UserError
from seqxduce.console import MetricsLog, TrainProgress, console, format_figures
from seqxduce.data import (
    Batch,
    Pair,
    Prefetcher,
    batches_for_step,
    collate,
    curriculum_cap,
    encode_pairs,
    steps_in_epoch,
    token_batches,
)
from seqxduce.device import autocast_context, resolve_device
from seqxduce.inspection.run_readme import write_run_readme
from seqxduce.loss import label_smoothed_nll
from seqxduce.recipe import Recipe
from seqxduce.rundir import RunDir, prune
from seqxduce.sampled_epochs import EpochEncoder
from seqxduce.settings import TrainSettings
from seqxduce.stopping import StopRequest, signal_name, stop_on_signals
from seqxduce.tensorboard_log import TENSORBOARD_DIR, summary_writer_class
from seqxduce.token_cache import encode_pairs_cached
from seqxduce.train_figures import NonfiniteRun, Window, batch_stats


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


def clip_gradients(grads: list[torch.Tensor], max_norm: float, shards: distributed.World | None = None
                   ) -> torch.Tensor:
    """The gradients' total L2 norm (a device tensor), scaling them down to max_norm when above it (max_norm 0:
    no clipping), as clip_grad_norm_ does: a few foreach kernels over all parameters and no read on the host.
    With shards, grads are this rank's shards of the gradients (FSDP) and the squared norms are summed over ranks."""
    if shards is not None:
        squares = torch.stack(torch._foreach_norm(grads)).float().pow(2).sum() if grads else torch.zeros(())
        norm = shards.all_reduce_sum(squares).sqrt()
    elif not grads:
        return torch.zeros(())
    else:
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())
    if max_norm > 0:
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def restore_optimizer(optimizer: torch.optim.Optimizer, saved: dict[str, Any], fused: bool) -> None:
    """Load a checkpoint's optimizer state, keeping this run's implementation: load_state_dict would take the
    saved groups' fused/foreach flags, so a checkpoint of a foreach optimizer (written before the fused one, or on
    a device without it) would turn this one back to foreach, which cannot skip a step on the device."""
    optimizer.load_state_dict(saved)
    keep_implementation(optimizer, fused)


def keep_implementation(optimizer: torch.optim.Optimizer, fused: bool) -> None:
    """Set the optimizer's groups back to fused (step counts as float32 tensors beside the parameters) or foreach."""
    for group in optimizer.param_groups:
        group["fused"], group["foreach"] = (True, None) if fused else (None, True)
        if fused:  # the fused kernel takes the step counts as float32 tensors beside the parameters
            for param in group["params"]:
                state = optimizer.state.get(param, {})
                if "step" in state:
                    state["step"] = torch.as_tensor(state["step"], dtype=torch.float32).to(param.device)


def compile_enabled(setting: str, device: torch.device) -> bool:
    """[train] compile: on, off, or auto = on for CUDA only."""
    return setting == "on" or (setting == "auto" and device.type == "cuda")


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    metrics: dict[str, float]


@dataclass
class PlannedStep:
    """One optimizer step as the schedule plans it: the data position, this rank's batches (pair indices) and
    the target tokens of all ranks' batches (the gradient's normaliser), and the pairs the batches index."""

    epoch: int
    step_in_epoch: int
    group: list[list[int]]
    global_tokens: int
    pairs: list[Pair]  # the epoch's training pairs, which group indexes (sampled anew per epoch, or the fixed ones)


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 1
    step_in_epoch: int = 0


def set_step_seed(seed: int, rank: int, step: int) -> None:
    """Reseed per optimizer step (as fairseq does) so dropout is reproducible across resume and distinct per rank."""
    value = (seed * 1_000_003 + rank * 7_919 + step) % (2**63)
    torch.manual_seed(value)
    random.seed(value)


class Trainer:
    """One training run in one run directory, on one rank of a (possibly single-process) world."""

    def __init__(self, recipe: Recipe, run_dir: Path, resume: bool = False, overwrite: bool = False,
                 tokenizers_from: Path | None = None):
        self.recipe = recipe
        self.settings = recipe.train
        self.rundir = RunDir(run_dir)
        self.run_dir = self.rundir.path
        self.dist = distributed.setup(recipe.train.device, recipe.train.collective_timeout)
        if recipe.train.fsdp:  # before the data and the model are built
            self.dist.require_shards()
        self.device = self.dist.device or resolve_device(recipe.train.device)
        self.is_main = self.dist.rank == 0
        if self.is_main and self.settings.tensorboard:
            summary_writer_class()  # a missing package is one line before the run folder is touched
        self._open_run_dir(resume, overwrite)
        # read before any heavy work, so that a checkpoint that cannot be resumed is one line at once
        resume_from = self.rundir.resume_state() if resume else None
        board = self.rundir.path / TENSORBOARD_DIR if self.is_main and self.settings.tensorboard else None
        self.log = MetricsLog(self.rundir.metrics_file if self.is_main else None, tensorboard=board)
        self.task = components.build_task(recipe)
        self.data_dir = components.data_dir(recipe)
        self._prepare_data()
        self.train_examples = self.task.examples("train", self.data_dir)
        if not self.train_examples:
            raise UserError(f"[task] name = {recipe.task.core.name!r} read no training examples from "
                            f"{self.data_dir}: the training file is empty")
        self.valid_examples = self.task.examples("valid", self.data_dir) if "valid" in self.task.splits else []
        self._train_tokenizers(resume, tokenizers_from)
        torch.manual_seed(self.settings.seed)
        built = self.rundir.components(recipe, self.task)
        self.tokenizers = built.tokenizers
        vocab = self.tokenizers.vocab()
        self.pad_id, self.bos_id, self.eos_id = vocab.pad_id, vocab.bos_id, vocab.eos_id
        self.train_pairs = self._encode(self.train_examples, "train")
        self.valid_pairs = self._encode(self.valid_examples, "valid") if self.valid_examples else []
        # the curriculum's longest source is the deterministic encoding's; a longer sampled one waits for its end
        self.longest_source = max(len(p.src) for p in self.train_pairs)
        self.sampler = EpochEncoder(self.train_examples, self.tokenizers.src, self.tokenizers.tgt,
                                    self.settings.max_source_len, self.settings.max_target_len,
                                    self.settings.max_tokens, self.settings.seed)
        self._sampled: tuple[int | None, list[Pair]] = (None, [])
        self._last_batches: tuple[tuple[int, int | None] | None, list[Pair], list[list[int]]] = (None, [], [])
        self.model = built.model.to(self.device)
        self.d_model = self.model.schedule_width
        if resume_from is not None:  # into the plain module, before any sharding
            ckpt.load_weights(self.model, resume_from[1]["model"], f"--resume: {resume_from[0]}",
                              "resume without changing [model] or [tokenizer]")
        self.wrapped = self._compiled(self.dist.wrap(self.model, fsdp=self.settings.fsdp))
        self.optimizer, self.fused = self._optimizer()
        self._prefetched: tuple[list[list[int]], list[Batch], int] | None = None
        # sum-over-tokens losses are large: start at 2^7 as fairseq does, not 2^16, to avoid skipped first steps
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=2.0**7,
                                           enabled=self.settings.precision == "fp16")
        self.state = TrainState()
        self.run_id = uuid.uuid4().hex  # tells this run's checkpoints from another's (see RunDir.check_average)
        self.resumed = resume_from is not None
        if resume_from is not None:
            self._resume(*resume_from)
        self._write_recipe()
        self.stop = StopRequest()
        self.nonfinite = NonfiniteRun(self.settings.max_nonfinite_steps)
        self.primary_metric: str | None = None  # e.g. valid_bleu, once a validation has scored

    # ------------------------------------------------------------ setup

    def _open_run_dir(self, resume: bool, overwrite: bool) -> None:
        self.rundir.check_start(resume, overwrite)
        if self.is_main:
            for line in self.rundir.open(overwrite):
                console.print(line)
        self.dist.barrier()

    def _write_recipe(self) -> None:
        """Save the resolved recipe, only once the model is built (and any checkpoint loaded) with it, so that
        a run directory never holds a recipe its checkpoints do not fit."""
        if self.is_main:
            self.rundir.write_recipe(self.recipe)
        self.dist.barrier()

    def _prepare_data(self) -> None:
        if self.is_main:
            self.task.prepare(self.data_dir)
        self.dist.barrier()

    def _train_tokenizers(self, resume: bool, tokenizers_from: Path | None) -> None:
        """A resumed run keeps the tokenizers its checkpoints were trained with; a new run trains its own (or
        copies tokenizers_from's), replacing any left in the run directory by an earlier attempt (they may come
        from other settings)."""
        if not resume and self.is_main:
            if tokenizers_from is not None:
                self.rundir.copy_tokenizers(self.recipe, tokenizers_from)
            else:
                self.rundir.train_tokenizers(self.recipe, self.train_examples)
        self.dist.barrier()
        if not self.rundir.has_tokenizers(self.recipe):
            raise UserError(f"--resume: {self.run_dir} holds no tokenizer files; train into a new --out")

    def _encode(self, examples: list, split: str) -> list[Pair]:
        limits = (self.settings.max_source_len, self.settings.max_target_len)
        if split == "train" and self.settings.token_cache:
            files = self.rundir.tokenizer_files(self.recipe)
            pairs, skipped, cached = encode_pairs_cached(examples, self.tokenizers.src, self.tokenizers.tgt, *limits,
                                                         files)
            if cached is not None and self.is_main:
                console.print(f"{split}: read {len(pairs)} tokenized pairs from the cache {cached}")
        else:
            pairs, skipped = encode_pairs(examples, self.tokenizers.src, self.tokenizers.tgt, *limits)
        if skipped and self.is_main:
            console.print(f"{split}: skipped {skipped} of {len(examples)} pairs over max_source_len/max_target_len")
        if not pairs:
            raise UserError(f"{split}: no pairs left after the length limits; "
                            "raise [train] max_source_len/max_target_len")
        return pairs

    def _compiled(self, model: torch.nn.Module) -> torch.nn.Module:
        """The training forward, compiled when [train] compile says so; self.model stays the plain module, whose
        state_dict (no `_orig_mod.` prefix) the checkpoints hold and which validation and decoding run."""
        if not compile_enabled(self.settings.compile, self.device):
            return model
        # batch shapes vary with length: mark them dynamic from the start instead of recompiling per shape
        return torch.compile(model, dynamic=True)

    def _optimizer(self) -> tuple[torch.optim.Optimizer, bool]:
        """Adam or AdamW, fused (one kernel for all parameters, and a skip decided on the device) where the
        device has the fused kernel (CUDA, and the CPU since torch 2.4), else foreach; and whether it is fused."""
        s = self.settings
        cls = torch.optim.Adam if s.optimizer == "adam" else torch.optim.AdamW
        args = dict(lr=learning_rate(s, 1, self.d_model), betas=tuple(s.betas), eps=s.eps,
                    weight_decay=s.weight_decay)
        try:
            return cls(self.model.parameters(), fused=True, **args), True
        except RuntimeError:  # a device (or dtype) without the fused kernel
            return cls(self.model.parameters(), foreach=True, **args), False

    # ------------------------------------------------------------ checkpoints

    def _full_states(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The model's and the optimizer's state dicts as a checkpoint holds them: under FSDP gathered from the
        shards onto rank 0's CPU (a collective: every rank calls it), the others get empty ones."""
        if not self.settings.fsdp:
            return (self.model.state_dict(), self.optimizer.state_dict()) if self.is_main else ({}, {})
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        return get_state_dict(self.model, self.optimizer,
                              options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def _restore_sharded_optimizer(self, latest: Path, saved: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        if not all(isinstance(key, str) for key in saved["state"]):
            raise UserError(f"--resume: {latest} was written without [train] fsdp; resume it with fsdp = false")
        set_optimizer_state_dict(self.model, self.optimizer, saved, options=StateDictOptions(full_state_dict=True))
        keep_implementation(self.optimizer, self.fused)

    def _eval_model(self) -> torch.nn.Module | None:
        """The model validation runs: the trained one, or under FSDP a full copy gathered onto rank 0 (None on
        the other ranks; every rank must call this)."""
        if not self.settings.fsdp:
            return self.model
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        weights = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not self.is_main:
            return None
        with torch.random.fork_rng(devices=[]):  # building draws initial weights: keep the run's RNG as it was
            copy = components.build_model(self.recipe, self.tokenizers.vocab())
        copy.load_state_dict(weights)
        return copy.to(self.device)

    def _state_dict(self, weights: dict[str, Any], optimizer: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": weights,
            "optimizer": optimizer,
            "scaler": self.scaler.state_dict(),
            "step": self.state.step,
            "epoch": self.state.epoch,
            "step_in_epoch": self.state.step_in_epoch,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
            "run_id": self.run_id,
        }

    def save(self) -> Path:
        """Write this step's checkpoint (main process), then remove the oldest beyond keep_checkpoints."""
        path = self.rundir.step_path(self.state.step)
        weights, optimizer = self._full_states()
        if self.is_main:
            state = self._state_dict(weights, optimizer)
            bad = ckpt.nonfinite_tensor(state["model"])
            if bad is not None:
                raise UserError(f"step {self.state.step}: {bad} holds NaN or inf, so no checkpoint was written; "
                                f"{self._last_checkpoint_text()}; lower the learning rate and continue with --resume")
            try:
                ckpt.atomic_save(state, path)
            except UserError as err:
                raise UserError(f"{err}; {self._last_checkpoint_text()}; free disk space and continue with "
                                "--resume") from None
            prune(path.parent, max(self.settings.keep_checkpoints, self.settings.average_last, 1))
        self.dist.barrier()
        return path

    def _last_checkpoint_text(self) -> str:
        saved = self.rundir.step_checkpoints()
        return f"the last checkpoint, {saved[-1]}, is intact" if saved else "no checkpoint was written yet"

    def _resume(self, latest: Path, state: dict[str, Any]) -> None:
        """The optimizer, scaler, data position and RNG of a checkpoint (its weights were loaded before wrapping)."""
        if self.settings.fsdp:
            self._restore_sharded_optimizer(latest, state["optimizer"])
        else:
            restore_optimizer(self.optimizer, state["optimizer"], self.fused)
        self.scaler.load_state_dict(state["scaler"])
        self.state = TrainState(int(state["step"]), int(state["epoch"]), int(state["step_in_epoch"]))
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(_as_random_state(state["rng"]["python"]))
        self.run_id = state.get("run_id") or self.run_id
        if self.is_main:
            console.print(f"resumed from {latest} at step {self.state.step}")

    # ------------------------------------------------------------ the loop

    def _source_cap(self, step: int) -> int | None:
        """The length curriculum's source cap at `step` (None: every pair trains)."""
        s = self.settings
        return curriculum_cap(step, s.curriculum_start_len, s.curriculum_steps, self.longest_source,
                              s.curriculum_hold_steps)

    def _epoch_pairs(self, epoch: int) -> list[Pair]:
        """The training pairs of an epoch: encoded anew from ([train] seed, epoch) when a tokenizer samples
        (subword regularization), else the deterministic ones; every rank and a --resume get the same."""
        if self._sampled[0] != epoch:
            sampled = self.sampler.pairs(epoch)
            self._sampled = (epoch, self.train_pairs if sampled is None else sampled)
        return self._sampled[1]

    def _epoch_batches(self, epoch: int, cap: int | None) -> tuple[list[Pair], list[list[int]]]:
        """The epoch's pairs and their batches (lists of indices into those pairs)."""
        # a function of (epoch, cap) only, so --resume rebuilds the same batches; the last one is kept because
        # the run's checks and its schedule both start from it
        if self._last_batches[0] != (epoch, cap):
            pairs = self._epoch_pairs(epoch)
            self._last_batches = ((epoch, cap), pairs, token_batches(pairs, self.settings.max_tokens,
                                                                     self.settings.seed, epoch, max_source=cap,
                                                                     bucket_width=self.settings.bucket_width))
        return self._last_batches[1], self._last_batches[2]

    def run(self) -> TrainResult:
        """Train to max_steps. A first Ctrl-C or SIGTERM finishes the current step and saves it, so that --resume
        continues it; a second one stops at once, keeping the checkpoints already written (TrainingStopped).
        Another process that dies or hangs stops this one after [train] collective_timeout, with an error."""
        with stop_on_signals(self.stop):
            try:
                return self._run()
            except KeyboardInterrupt:
                saved = self.rundir.step_checkpoints()
                kept = f"the last checkpoint is {saved[-1]}" if saved else "no checkpoint was written"
                raise TrainingStopped(f"interrupted during step {self.state.step + 1}; {kept}; continue with "
                                      "--resume", self.stop.exit_code) from None
            except RuntimeError as err:
                if self.dist.world_size == 1 or not distributed.is_collective_failure(err):
                    raise
                raise UserError(
                    f"process {self.dist.rank} of {self.dist.world_size} lost the others during step "
                    f"{self.state.step + 1} ({distributed.failure_text(err)}): one died or did not answer within "
                    f"[train] collective_timeout = {self.settings.collective_timeout:g} s; "
                    f"{self._last_checkpoint_text()}; continue with --resume") from None

    def _stop_now(self) -> int:
        """The signal that asked any process to stop, else 0 (all processes must stop at the same step)."""
        flag = torch.tensor([float(self.stop.signal)], dtype=torch.float64)
        return int(self.dist.all_reduce_max(flag)[0])

    def _interrupted(self, signum: int) -> TrainingStopped:
        self.stop.signal = self.stop.signal or signum
        path = self.save()
        return TrainingStopped(f"{signal_name(signum)}: interrupted at step {self.state.step}; saved {path}; "
                               "continue with --resume", self.stop.exit_code)

    def _nothing_left(self, per_epoch: int) -> bool:
        """Whether the loop would train no step: max_steps reached, or the last of max_epochs finished."""
        s = self.settings
        return self.state.step >= s.max_steps or bool(
            s.max_epochs and self.state.epoch >= s.max_epochs and self.state.step_in_epoch >= per_epoch)

    def _check_nonfinite(self) -> None:
        """Read the run of skipped updates (a device value: at log, validation and checkpoint time only); too
        many in a row stop the run, naming the step at which the limit was reached."""
        step = self.nonfinite.reached_at()
        if not step:
            return
        n = self.settings.max_nonfinite_steps
        self.log.write("stopped", step=step, reason="nonfinite", skipped_in_a_row=n)
        raise UserError(f"stopped at step {step}: the last {n} steps (from step {step - n + 1}) had a non-finite "
                        f"loss or gradient and their updates were skipped ([train] max_nonfinite_steps = "
                        f"{self.settings.max_nonfinite_steps}); {self._last_checkpoint_text()}; lower lr_scale or lr, "
                        "set clip_norm, or train in fp32 or bf16, then continue with --resume")

    def _schedule(self) -> Iterator[PlannedStep]:
        """The steps to train from the current state on, in order, with the batches each rank takes: a function of
        the state alone (as the loop's position is), so that it can run ahead of the training in a thread."""
        s, world = self.settings, self.dist.world_size
        step, epoch, step_in_epoch = self.state.step, self.state.epoch, self.state.step_in_epoch
        cap = self._source_cap(step)
        pairs, batches = self._epoch_batches(epoch, cap)
        per_epoch = steps_in_epoch(len(batches), world, s.update_freq)
        while step < s.max_steps:
            if self._source_cap(step) != cap:  # the curriculum admits longer sources
                cap = self._source_cap(step)
                pairs, batches = self._epoch_batches(epoch, cap)
                per_epoch = steps_in_epoch(len(batches), world, s.update_freq)
            if step_in_epoch >= per_epoch:
                if s.max_epochs and epoch >= s.max_epochs:
                    return
                epoch, step_in_epoch = epoch + 1, 0
                pairs, batches = self._epoch_batches(epoch, cap)
                per_epoch = steps_in_epoch(len(batches), world, s.update_freq)
            group = batches_for_step(batches, step_in_epoch, self.dist.rank, world, s.update_freq)
            # the target tokens of every rank's batches (eos included, as the loss counts), known here without
            # asking the other ranks
            every_rank = batches_for_step(batches, step_in_epoch, 0, 1, world * s.update_freq)
            tokens = sum(len(pairs[i].tgt) + 1 for batch in every_rank for i in batch)
            yield PlannedStep(epoch, step_in_epoch, group, tokens, pairs)
            step, step_in_epoch = step + 1, step_in_epoch + 1

    def _prepare(self, plan: PlannedStep) -> list[Batch]:
        """A planned step's batches, padded, and in pinned memory when they go to a GPU (in the prefetch thread)."""
        batches = self._collate(plan.group, plan.pairs)
        return [b.pin_memory() for b in batches] if self.device.type == "cuda" else batches

    def _collate(self, group: list[list[int]], pairs: list[Pair]) -> list[Batch]:
        """The padded batches of a group of index lists into pairs."""
        return [collate([pairs[j] for j in indices], self.pad_id, self.bos_id, self.eos_id) for indices in group]

    def _run(self) -> TrainResult:
        s = self.settings
        cap = self._source_cap(self.state.step)
        _, batches = self._epoch_batches(self.state.epoch, cap)
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
        if self.resumed and self._nothing_left(per_epoch):
            return finished_already(self.rundir, self.settings, self.state.step, self.is_main)
        last_metrics: dict[str, float | str] = {}
        window = Window()
        # the next steps' batches are collated (and pinned for a GPU) in a thread while this one trains
        with TrainProgress(s.max_steps, self.state.step, enabled=self.is_main) as progress, \
                Prefetcher(self._schedule(), self._prepare, depth=2) as planned:
            for plan, batches in planned:
                self.state.epoch, self.state.step_in_epoch = plan.epoch, plan.step_in_epoch
                self._prefetched = (plan.group, batches, plan.global_tokens)
                figures = self.train_step(plan.group)
                self.state.step += 1
                self.state.step_in_epoch += 1
                window.add(figures)
                step = self.state.step
                self.nonfinite.add(step, figures["skipped_updates"])
                validating = bool(s.validate_every) and step % s.validate_every == 0 and step < s.max_steps
                checkpointing = step % s.checkpoint_every == 0 and step < s.max_steps
                if step % s.log_every == 0 or step == s.max_steps:  # the step's figures reach the host here
                    summary = window.summary(self.optimizer.param_groups[0]["lr"], self.dist)
                    self.log.write("train", step=step, epoch=self.state.epoch, target_tokens=window.tokens(),
                                   **summary)
                    progress.update(step, summary)
                    progress.print(f"step {step} | " + format_figures(summary) + f" | eta {progress.eta(step)}")
                    window = Window()
                    self._check_nonfinite()
                else:
                    progress.update(step)
                    if validating or checkpointing:
                        self._check_nonfinite()
                signum = self._stop_now()
                if signum:
                    self._check_nonfinite()
                    raise self._interrupted(signum)
                if validating:
                    last_metrics = self.validate(progress)
                if checkpointing:
                    self.save()
        self._check_nonfinite()
        self.save()
        if self.valid_pairs:
            last_metrics = self.validate(progress)
        if self.is_main:
            settle_average(self.rundir, s)
        self.dist.barrier()
        return TrainResult(self.run_dir, self.state.step, last_metrics)

    def train_step(self, group: list[list[int]], global_tokens: int | None = None) -> dict[str, Any]:
        """One optimizer step over this rank's batches; gradients are normalised by the global token count.

        Nothing here waits for the device: the figures it returns (loss, nll, aux, grad_norm, skipped_updates)
        are device tensors that the log window sums and reads at log time, and a non-finite step's update is
        skipped on the device (the fused optimizer's found_inf, as a GradScaler uses it). global_tokens, the
        target tokens of every rank's batches of this step, is known on the host; without it, it is summed."""
        s = self.settings
        step = self.state.step + 1
        set_step_seed(s.seed, self.dist.rank, step)
        lr = learning_rate(s, step, self.d_model)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.wrapped.train()
        self.optimizer.zero_grad(set_to_none=True)
        batches, planned_tokens = self._collated(group)
        global_tokens = global_tokens if global_tokens is not None else planned_tokens
        if global_tokens is None:
            global_tokens = sum(b.ntokens for b in batches)
            if self.dist.world_size > 1:  # a host tensor: reduced over gloo, no wait for the device
                global_tokens = int(self.dist.all_reduce_sum(torch.tensor([global_tokens], dtype=torch.float64))[0])
        loss_sum = nll_sum = aux_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        model_stats: list[dict[str, Any]] = []
        started = time.perf_counter()
        for i, host_batch in enumerate(batches):
            batch = host_batch.to(self.device)
            sync = i == len(batches) - 1
            with self.dist.no_sync(self.wrapped, sync), autocast_context(self.device, s.precision):
                out = self.wrapped(batch.src, batch.tgt_in)
                loss, nll = label_smoothed_nll(out.logits, batch.tgt_out, s.label_smoothing, self.pad_id)
                total = loss
                if out.aux_loss is not None:
                    # the aux loss (e.g. ACT ponder cost) is a mean; weight it by tokens like the main loss
                    total = total + out.aux_loss.float() * batch.ntokens
                self.scaler.scale(total).backward()
            loss_sum = loss_sum + loss.detach().double()
            nll_sum = nll_sum + nll.detach().double()
            if out.aux_loss is not None:
                aux_sum = aux_sum + out.aux_loss.detach().double() * batch.ntokens
            model_stats.append(out.stats)
        self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if s.fsdp:  # each rank holds a shard of every gradient: scale and clip the shards, the norm over all ranks
            with torch.no_grad():
                grads = [g.to_local() for g in grads]
        # DDP (and FSDP) averaged gradients over ranks; undo that and divide by the tokens of the whole global batch
        torch._foreach_mul_(grads, self.dist.world_size / max(global_tokens, 1))
        grad_norm = clip_gradients(grads, s.clip_norm, self.dist if s.fsdp else None)
        # all-reduced gradients give every process the same norm; the loss is reduced too, so all skip alike
        skipped = self.dist.all_reduce_max((~(torch.isfinite(loss_sum) & torch.isfinite(grad_norm))).float())
        self._optimizer_step(skipped)
        self.scaler.update()  # after an fp16 overflow, this halves the loss scale
        elapsed = time.perf_counter() - started
        return {"loss": loss_sum, "nll": nll_sum, "tokens": float(global_tokens), "aux": aux_sum,
                "grad_norm": grad_norm, "seconds": elapsed, "skipped_updates": skipped,
                **batch_stats(model_stats)}

    def _optimizer_step(self, skipped: torch.Tensor) -> None:
        """The update, unless `skipped` (a 0-dim 0./1. tensor) says the loss or gradient was not finite: a fused
        optimizer reads it on the device as found_inf (its step count is not advanced either); another one
        needs it on the host."""
        if not self.fused:
            if not bool(skipped):
                self.optimizer.step()
            return
        self.optimizer.found_inf = skipped  # the gradients were unscaled already: no grad_scale
        try:
            self.optimizer.step()
        finally:
            del self.optimizer.found_inf

    def _collated(self, group: list[list[int]]) -> tuple[list[Batch], int | None]:
        """The group's batches and global token count: as built ahead by the prefetcher when it holds this group,
        else collated now from the current epoch's pairs (the count then unknown)."""
        ready = self._prefetched
        if ready is not None and ready[0] is group:
            self._prefetched = None
            return ready[1], ready[2]
        return self._collate(group, self._epoch_pairs(self.state.epoch)), None

    # ------------------------------------------------------------ validation

    @torch.no_grad()
    def validate(self, progress: TrainProgress | None = None) -> dict[str, float | str]:
        """Loss and perplexity on the valid split, and the task's metric on a sample decoded as valid_search says."""
        metrics: dict[str, float] = {}
        model = self._eval_model() if self.valid_pairs else None
        if self.is_main and self.valid_pairs:
            metrics = self._valid_loss(model)
            metrics.update(self._valid_metric(model))
            self.log.write("valid", step=self.state.step, **metrics, **self._primary(metrics))
            line = f"valid step {self.state.step} | " + format_figures(metrics)
            if progress is not None:
                progress.print(line)
        self.dist.barrier()
        return metrics

    def _valid_loss(self, model: torch.nn.Module) -> dict[str, float]:
        model.eval()
        loss_sum = nll_sum = tokens = 0.0
        for indices in token_batches(self.valid_pairs, self.settings.max_tokens, 0, 0, shuffle=False):
            batch = collate([self.valid_pairs[j] for j in indices], self.pad_id, self.bos_id, self.eos_id)
            batch = batch.to(self.device)
            with autocast_context(self.device, self.settings.precision):
                out = model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_nll(out.logits, batch.tgt_out, self.settings.label_smoothing, self.pad_id)
            loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.ntokens
        nll = nll_sum / max(tokens, 1)
        return {"loss": loss_sum / max(tokens, 1), "nll": nll, "ppl": math.exp(min(nll, 100.0))}

    def _valid_metric(self, model: torch.nn.Module) -> dict[str, float | str]:
        from seqxduce.decoding import decode_sources, score_outputs
        from seqxduce.search import GreedyDecoder
        from seqxduce.search_settings import SearchSettings

        sample = self.valid_examples[: self.settings.valid_decode_examples]
        if not sample:
            return {}
        recipe_search = self.settings.valid_search == "recipe"
        decode = self.recipe.decode
        decoder = (components.build_decoder(self.recipe, self.tokenizers) if recipe_search
                   else GreedyDecoder(SearchSettings.lengths_of(decode.settings)))
        outputs = decode_sources(model, self.tokenizers, self.task, sample, decoder, self.device,
                                 self.settings.precision, decode.core.batch_size)
        report = score_outputs(self.task, outputs, sample)
        self.primary_metric = f"valid_{report.primary}"
        metrics: dict[str, float | str] = {"search": self.recipe.decode.core.name if recipe_search else "greedy"}
        metrics.update({f"valid_{k}": v for k, v in report.metrics.items()})
        return metrics

    def _primary(self, metrics: dict[str, float | str]) -> dict[str, str]:
        """The log's name for the task's main metric, so `seqxduce info` and `plot` know which one it is."""
        return {"primary": self.primary_metric} if self.primary_metric in metrics else {}

def settle_average(rundir: RunDir, settings: TrainSettings) -> None:
    """At the end of a run: average its last checkpoints when asked; otherwise an average left from before a
    resume no longer stands for the run, and goes now that the final checkpoint (which replaces it) is written."""
    if settings.average_last > 1:
        console.print(f"averaged the last {settings.average_last} checkpoints into "
                      f"{rundir.write_average(settings.average_last)}")
    elif rundir.average_file.exists():
        rundir.average_file.unlink()
        console.print(f"removed {rundir.average_file}: it averaged checkpoints the run has gone past")


def finished_already(rundir: RunDir, settings: TrainSettings, step: int, is_main: bool) -> TrainResult:
    """A --resume of a finished run trains nothing and deletes nothing; it makes only an average the run asks
    for and lacks (one a kill at the very end left unwritten)."""
    if is_main:
        console.print(f"{rundir.path}: the run already finished at step {step} (max_steps = {settings.max_steps}, "
                      f"max_epochs = {settings.max_epochs}); nothing to train: raise them with --set to go on")
        if settings.average_last > 1 and not _average_current(rundir):
            settle_average(rundir, settings)
    return TrainResult(rundir.path, step, {})


def _average_current(rundir: RunDir) -> bool:
    try:
        rundir.check_average()
    except UserError:
        return False
    return rundir.average_file.is_file()


def _as_random_state(value: Any) -> tuple:
    """random.setstate needs tuples; a checkpoint may give lists back."""
    version, internal, gauss = value
    return (version, tuple(internal), gauss)


def train(recipe: Recipe, out: Path, resume: bool = False, overwrite: bool = False,
          tokenizers_from: Path | None = None) -> TrainResult:
    """Train the recipe's model into run directory `out` (resuming from its latest checkpoint if asked; with
    overwrite, replacing a run already there; a new run copies tokenizers_from's tokenizer files if given)."""
    if resume:  # a run finished by max_steps is known from its newest checkpoint alone: no data to load
        rundir = RunDir(out)
        rundir.check_start(resume=True, overwrite=overwrite)
        latest = int(rundir.newest_readable(mmap=True)[1].get("step", 0))
        if latest >= recipe.train.max_steps:
            return finished_already(rundir, recipe.train, latest, int(os.environ.get("RANK", "0")) == 0)
    trainer = Trainer(recipe, Path(out), resume=resume, overwrite=overwrite, tokenizers_from=tokenizers_from)
    try:
        result = trainer.run()
        if trainer.is_main:
            write_run_readme(result.run_dir)
        return result
    finally:
        trainer.log.close()
        trainer.dist.close()
