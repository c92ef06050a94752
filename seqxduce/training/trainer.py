"""The training loop over an assembled run (seqxduce.training.run): the step (label-smoothed loss, gradient
accumulation, clipping, a skip of non-finite updates), logging, validation and checkpoints, and stops on signals."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from seqxduce import checkpoint as ckpt
from seqxduce import components
from seqxduce.api import TrainingStopped, UserError
from seqxduce.console import TrainProgress, console, format_figures
from seqxduce.corpus.soft_targets import SoftTargets
from seqxduce.data import Batch, Prefetcher
from seqxduce.device import autocast_context
from seqxduce.recipe import Recipe
from seqxduce.run_start import RunStart
from seqxduce.rundir import RunDir, prune
from seqxduce.signals import stop_setting_up, stop_training_on_signals
from seqxduce.stopping import Abandoned, StopRequest, signal_name
from seqxduce.torchrun import is_rank_zero
from seqxduce.training import distributed
from seqxduce.training.backward import cuttable_backward
from seqxduce.training.figures import NonfiniteRun, Window, batch_stats
from seqxduce.training.loss import label_smoothed_nll
from seqxduce.training.optim import clip_gradients, learning_rate, optimizer_step, set_learning_rate
from seqxduce.training.run import TeacherPass, TrainingRun, assemble, compile_enabled
from seqxduce.training.state import (
    TrainResult,
    TrainState,
    checkpoint_state,
    finished_already,
    full_states,
    set_step_seed,
    settle_average,
)
from seqxduce.training.step_plan import PlannedStep

__all__ = ["Trainer", "TrainResult", "train"]


class Trainer:
    """Trains an assembled run, on one rank of a (possibly single-process) world: the loop, the step and saving."""

    def __init__(self, parts: TrainingRun):
        self.parts = parts  # everything the run is made of, built outside (training.run.assemble)
        self.settings = parts.recipe.train
        self.stop = StopRequest()
        self.nonfinite = NonfiniteRun(self.settings.max_nonfinite_steps)
        self._in_step = False  # inside an optimizer step (what a second signal cuts short)
        # the data position before the step under way, while it may still be dropped (before its update)
        self._position_before: tuple[int, int] | None = None
        self._agreed = False  # every process dropped the step at the same point (FSDP: _agree_to_drop)

    @property
    def state(self) -> TrainState:
        """The training position and early stopping's record (what a checkpoint holds besides the weights)."""
        return self.parts.state

    # ------------------------------------------------------------ the loop

    def run(self) -> TrainResult:
        """Train to max_steps. A first Ctrl-C, SIGTERM or SIGUSR1 drops the step under way (or abandons the
        validation or averaging under way) and saves the last step completed, so that --resume continues it and runs
        the dropped step again exactly (_stop_in_step); a second one stops at once, keeping the checkpoints already
        written (TrainingStopped). Another process that dies or hangs stops this one after [train]
        collective_timeout, with an error."""
        with stop_training_on_signals(self.stop):
            try:
                try:
                    return self._run()
                except Abandoned:  # the signal landed in the step's forward or backward
                    raise self._stop_in_step() from None
                except RuntimeError as err:
                    if self.parts.world.world_size == 1 or not distributed.is_collective_failure(err):
                        raise
                    if self.stop.requested:  # another process stopped first, leaving this one's collective
                        raise self._stop_in_step() from None
                    raise self._lost(err) from None
            except KeyboardInterrupt:
                saved = self._rundir().step_checkpoints()
                kept = f"the last checkpoint is {saved[-1]}" if saved else "no checkpoint was written"
                where = (f"during step {self.state.step + 1}" if self._in_step
                         else f"after step {self.state.step}, before it was saved")
                raise TrainingStopped(f"interrupted {where}; {kept}; continue with --resume",
                                      self.stop.exit_code) from None

    def _lost(self, err: RuntimeError) -> UserError:
        return UserError(
            f"process {self.parts.world.rank} of {self.parts.world.world_size} lost the others during step "
            f"{self.state.step + 1} ({distributed.failure_text(err)}): one died or did not answer within "
            f"[train] collective_timeout = {self.settings.collective_timeout:g} s; "
            f"{self._last_checkpoint_text()}; continue with --resume")

    def _stop_in_step(self) -> TrainingStopped:
        """A stop that came during a step: the step is dropped and the last completed one saved, at once.

        Why the processes need not agree, under DDP or alone: the parameters, the optimizer and the loss scaler
        change only in the step's update, which runs outside abandonable() (no signal interrupts it), and rank 0
        holds the full weights. So whatever point each process reached, rank 0's state is a completed step's: the
        one before the step under way if its step was dropped (its accumulated gradients are dropped with it), or
        the step it finished, when its update ran (then every process had joined that step's gradient all-reduce
        and the `skipped` all-reduce after it, so the step is whole). Rank 0 alone writes it, without a collective
        (another process may have left already). A process that drops its step leaves the world at once: its
        exit closes its connections, so that a process blocked in the step's gradient all-reduce (inside backward,
        where no Python signal handler runs) fails out of it within moments, finds the stop requested and comes
        here, instead of waiting for [train] collective_timeout. Under FSDP the full state is a gather, a
        collective of every process: there a step is dropped only where all agree, between micro-batches
        (_agree_to_drop), and the save is made together."""
        self.stop.finishing = True  # a launcher's or scheduler's second signal waits for the save
        dropped = self._position_before is not None
        if dropped:  # the data position of the step before: the resume replays the dropped step exactly
            self.state.epoch, self.state.step_in_epoch = self._position_before
            self._position_before = None
        self._in_step = False
        step, world = self.state.step, self.parts.world
        name = signal_name(self.stop.signal or signal.SIGTERM)
        then = f"; step {step + 1}, under way, was dropped and runs again" if dropped else ""
        if self.settings.fsdp and not self._agreed:
            return TrainingStopped(f"{name}: process {world.rank} of {world.world_size} stopped during step "
                                   f"{step + 1} without the others, so FSDP's shards could not be gathered; "
                                   f"{self._last_checkpoint_text()}; continue with --resume", self.stop.exit_code)
        path = self.save(alone=not self.settings.fsdp)
        if not self.parts.is_main:
            return TrainingStopped(f"{name}: process {world.rank} of {world.world_size} stopped at step {step}"
                                   f"{then}; process 0 saves {path}", self.stop.exit_code)
        return TrainingStopped(f"{name}: interrupted at step {step}; saved {path}; continue with --resume{then}",
                               self.stop.exit_code)

    def _run(self) -> TrainResult:
        s = self.settings
        rundir = self._rundir()
        if s.patience and self.parts.validator is None:
            raise UserError(f"[train] patience = {s.patience}: task {self.parts.recipe.task.core.name!r} has no valid "
                            "split to stop on; set patience = 0")
        stopping = self.parts.early_stopping
        if stopping.spent(self.state):  # a --resume of a run that early stopping ended
            if self.parts.is_main:
                console.print(stopping.ended_line(self.state, rundir.path))
            return TrainResult(rundir.path, self.state.step, {})
        self.parts.plan.steps_per_epoch(self.state)  # a plan without a step is refused before anything trains
        if self.parts.resumed and self.parts.plan.nothing_left(self.state):
            return finished_already(rundir, self.settings, self.state.step, self.parts.is_main)
        last_metrics: dict[str, float | str] = {}
        window = Window()
        # the next steps' batches are collated (and pinned for a GPU) in a thread while this one trains
        with TrainProgress(s.max_steps, self.state.step, enabled=self.parts.is_main) as progress, \
                Prefetcher(self.parts.plan.steps(self.state), self._collated, depth=2) as planned:
            for plan, batches in planned:
                self._position_before = (self.state.epoch, self.state.step_in_epoch)
                self.state.epoch, self.state.step_in_epoch = plan.epoch, plan.step_in_epoch
                self._in_step = True
                figures = self.train_step(batches, plan.global_tokens)
                self._position_before = None  # its update ran: the step is done
                self.state.step += 1
                self.state.step_in_epoch += 1
                self._in_step = False
                window.add(figures)
                step = self.state.step
                self.nonfinite.add(step, figures["skipped_updates"])
                validating = bool(s.validate_every) and step % s.validate_every == 0 and step < s.max_steps
                checkpointing = step % s.checkpoint_every == 0 and step < s.max_steps
                if step % s.log_every == 0 or step == s.max_steps:  # the step's figures reach the host here
                    summary = window.summary(self.parts.optimizer.param_groups[0]["lr"], self.parts.world)
                    self.parts.log.write("train", step=step, epoch=self.state.epoch, target_tokens=window.tokens(),
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
                    signum = self._stop_now()  # a signal during validation abandoned it: save the step now
                    if signum:
                        raise self._interrupted(signum, "its validation abandoned")
                    if stopping.spent(self.state):
                        self.parts.log.write("stopped", step=step, reason="patience", best_step=self.state.best_step,
                                             best=self.state.best_value)
                        progress.print(stopping.stopped_line(self.state))
                        break
                if checkpointing:
                    self.save()
        self._check_nonfinite()
        # the last validation comes before the last checkpoint, so that it holds early stopping's record of it
        if self.parts.validator is not None and not stopping.spent(self.state):
            last_metrics = self.validate(progress)
        signum = self._stop_now()
        if signum:
            raise self._interrupted(signum, "the run's last, its final validation abandoned",
                                    "--resume writes what the end of the run writes")
        self.save()
        if self.parts.is_main:
            try:
                with self.stop.abandonable():
                    settle_average(rundir, s)
            except Abandoned:  # every step is saved: a --resume of the finished run writes the average
                raise TrainingStopped(f"{signal_name(self.stop.signal)}: stopped at step {self.state.step}, the "
                                      f"run's last, while averaging; saved {rundir.step_path(self.state.step)}; "
                                      "--resume writes the average", self.stop.exit_code) from None
        self.parts.world.barrier()
        return TrainResult(rundir.path, self.state.step, last_metrics)

    def _collated(self, plan: PlannedStep) -> list[Batch]:
        """A planned step's batches, padded, and in pinned memory when they go to a GPU (in the prefetch thread)."""
        batches = plan.batches(self.parts.tokenizers.vocab())
        soft = self.parts.soft_targets
        if soft is not None:
            batches = [taught(b, soft, indices) for b, indices in zip(batches, plan.batch_indices, strict=True)]
        return [b.pin_memory() for b in batches] if self.parts.device.type == "cuda" else batches

    def _stop_now(self) -> int:
        """The signal that asked any process to stop, else 0 (all processes must stop at the same step)."""
        flag = torch.tensor([float(self.stop.signal)], dtype=torch.float64)
        return int(self.parts.world.all_reduce_max(flag)[0])

    def _interrupted(self, signum: int, how: str = "", then: str = "continue with --resume") -> TrainingStopped:
        self.stop.signal = self.stop.signal or signum
        path = self.save()
        how = f" ({how})" if how else ""
        return TrainingStopped(f"{signal_name(signum)}: interrupted at step {self.state.step}{how}; saved {path}; "
                               f"{then}", self.stop.exit_code)

    def _check_nonfinite(self) -> None:
        """Read the run of skipped updates (a device value: at log, validation and checkpoint time only); too
        many in a row stop the run, naming the step at which the limit was reached."""
        step = self.nonfinite.reached_at()
        if not step:
            return
        n = self.settings.max_nonfinite_steps
        self.parts.log.write("stopped", step=step, reason="nonfinite", skipped_in_a_row=n)
        raise UserError(f"stopped at step {step}: the last {n} steps (from step {step - n + 1}) had a non-finite "
                        f"loss or gradient and their updates were skipped ([train] max_nonfinite_steps = "
                        f"{self.settings.max_nonfinite_steps}); {self._last_checkpoint_text()}; lower lr_scale or lr, "
                        "set clip_norm, or train in fp32 or bf16, then continue with --resume")

    # ------------------------------------------------------------ the step

    def train_step(self, batches: list[Batch], global_tokens: int | None = None) -> dict[str, Any]:
        """One optimizer step over this rank's batches (host tensors); gradients are normalised by global_tokens,
        the target tokens of every rank's batches of this step (default: these batches', in a world of one).

        Nothing here waits for the device: the figures it returns (loss, nll, aux, grad_norm, skipped_updates)
        are device tensors that the log window sums and reads at log time, and a non-finite step's update is
        skipped on the device (the fused optimizer's found_inf, as a GradScaler uses it).

        A stop signal drops the step anywhere before its update (Abandoned; see Trainer._stop_in_step), which no
        signal interrupts: the parameters and the optimizer change only there."""
        s, parts, world = self.settings, self.parts, self.parts.world
        if global_tokens is None:
            if world.world_size > 1:
                raise ValueError("train_step: several processes need the global_tokens of all their batches")
            global_tokens = sum(b.ntokens for b in batches)
        step = self.state.step + 1
        set_step_seed(s.seed, world.rank, step)
        set_learning_rate(parts.optimizer, learning_rate(s, step, parts.model.schedule_width))
        parts.wrapped.train()
        parts.optimizer.zero_grad(set_to_none=True)
        started = time.perf_counter()
        # under FSDP a signal only sets the flag, read by every process together between micro-batches
        with contextlib.nullcontext() if s.fsdp else self.stop.abandonable():
            loss_sum, nll_sum, aux_sum, grad_norm, skipped, model_stats = self._gradients(batches, global_tokens)
        optimizer_step(parts.optimizer, parts.fused, skipped)
        parts.scaler.update()  # after an fp16 overflow, this halves the loss scale
        elapsed = time.perf_counter() - started
        return {"loss": loss_sum, "nll": nll_sum, "tokens": float(global_tokens), "aux": aux_sum,
                "grad_norm": grad_norm, "seconds": elapsed, "skipped_updates": skipped,
                **batch_stats(model_stats)}

    def _gradients(self, batches: list[Batch], global_tokens: int) -> tuple:
        """The step's droppable part: forward and backward over the batches, the gradients scaled and clipped,
        and whether to skip the update; nothing kept changes here."""
        s, parts, world = self.settings, self.parts, self.parts.world
        pad_id = parts.tokenizers.vocab().pad_id
        loss_sum = nll_sum = aux_sum = torch.zeros((), dtype=torch.float64, device=parts.device)
        model_stats: list[dict[str, Any]] = []
        for i, host_batch in enumerate(batches):
            if s.fsdp:
                self._agree_to_drop()
            batch = host_batch.to(parts.device)
            sync = i == len(batches) - 1
            with world.no_sync(parts.wrapped, sync), autocast_context(parts.device, s.precision), \
                    cuttable_backward(parts.device, compile_enabled(s.compile, parts.device)):
                out = parts.wrapped(batch.src, batch.tgt_in)
                loss, nll = label_smoothed_nll(out.logits, batch.tgt_out, s.label_smoothing, pad_id, batch.soft,
                                               self.parts.recipe.distill.word_kd)
                total = loss
                if out.aux_loss is not None:
                    # the aux loss (e.g. ACT ponder cost) is a mean; weight it by tokens like the main loss
                    total = total + out.aux_loss.float() * batch.ntokens
                parts.scaler.scale(total).backward()
            loss_sum = loss_sum + loss.detach().double()
            nll_sum = nll_sum + nll.detach().double()
            if out.aux_loss is not None:
                aux_sum = aux_sum + out.aux_loss.detach().double() * batch.ntokens
            model_stats.append(out.stats)
        parts.scaler.unscale_(parts.optimizer)
        grads = [p.grad for p in parts.model.parameters() if p.grad is not None]
        if s.fsdp:  # each rank holds a shard of every gradient: scale and clip the shards, the norm over all ranks
            with torch.no_grad():
                grads = [g.to_local() for g in grads]
        # DDP (and FSDP) averaged gradients over ranks; undo that and divide by the tokens of the whole global batch
        torch._foreach_mul_(grads, world.world_size / max(global_tokens, 1))
        grad_norm = clip_gradients(grads, s.clip_norm, world if s.fsdp else None)
        # all-reduced gradients give every process the same norm; the loss is reduced too, so all skip alike
        skipped = world.all_reduce_max((~(torch.isfinite(loss_sum) & torch.isfinite(grad_norm))).float())
        return loss_sum, nll_sum, aux_sum, grad_norm, skipped, model_stats

    def _agree_to_drop(self) -> None:
        """Under FSDP, before each micro-batch: whether any process was asked to stop, read by all together (a
        small host all-reduce at the same point of every process's step, so no collective is left half-joined);
        if so every process drops the step here (Abandoned) and they save the last completed step together.
        A stop waits at most one micro-batch's forward and backward."""
        if self._stop_now():
            self._agreed = True
            raise Abandoned

    # ------------------------------------------------------------ validation

    def validate(self, progress: TrainProgress | None = None) -> dict[str, float | str]:
        """Score the model on the valid split (rank 0; every rank takes part in gathering an FSDP model) and log it."""
        metrics: dict[str, float | str] = {}
        model = self._eval_model() if self.parts.validator is not None else None
        if self.parts.is_main and self.parts.validator is not None:
            try:
                # a signal drops the validation where it is: it changes no training state, and decoding a
                # large valid set can outlast the seconds a scheduler gives before it kills the job
                with self.stop.abandonable():
                    metrics = self.parts.validator.scores(model)
            except Abandoned:
                self.parts.early_stopping.share(self.state, self.parts.world)
                return {}
            self.parts.log.write("valid", step=self.state.step, **metrics, **self.parts.validator.primary(metrics))
            if progress is not None:
                progress.print(f"valid step {self.state.step} | " + self.parts.validator.line(metrics))
                notice = self.parts.validator.notice(metrics)
                if notice:
                    progress.print(notice)
            self.parts.early_stopping.record(self.state, *self.parts.validator.watched(metrics), model)
        self.parts.early_stopping.share(self.state, self.parts.world)
        return metrics

    def _eval_model(self) -> torch.nn.Module | None:
        """The model validation runs: the trained one, or under FSDP a full copy gathered onto rank 0 (None on
        the other ranks; every rank must call this)."""
        if not self.settings.fsdp:
            return self.parts.model
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(self.parts.model, options=options)
        if not self.parts.is_main:
            return None
        with torch.random.fork_rng(devices=[]):  # building draws initial weights: keep the run's RNG as it was
            copy = components.build_model(self.parts.recipe, self.parts.tokenizers.vocab())
        copy.load_state_dict(weights)
        return copy.to(self.parts.device)

    # ------------------------------------------------------------ checkpoints

    def full_states(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The model's and optimizer's full state dicts on rank 0 (a collective under FSDP: every rank calls it)."""
        return full_states(self.parts.model, self.parts.optimizer, self.settings.fsdp, self.parts.is_main)

    def save(self, alone: bool = False) -> Path:
        """Write this step's checkpoint (main process), then remove the oldest beyond keep_checkpoints; alone:
        without a collective (a stop's save under DDP, when another process may have left: rank 0's weights are
        whole)."""
        rundir = self._rundir()
        path = rundir.step_path(self.state.step)
        weights, optimizer = self.full_states()
        if self.parts.is_main:
            state = checkpoint_state(weights, optimizer, self.parts.scaler, self.state, self.parts.run_id)
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
        if not alone:
            self.parts.world.barrier()
        return path

    def _rundir(self) -> RunDir:
        if self.parts.rundir is None:
            raise ValueError("this training run was assembled without a run directory: it cannot save or log")
        return self.parts.rundir

    def _last_checkpoint_text(self) -> str:
        saved = self.parts.rundir.step_checkpoints() if self.parts.rundir is not None else []
        return f"the last checkpoint, {saved[-1]}, is intact" if saved else "no checkpoint was written yet"


def taught(batch: Batch, soft: SoftTargets, indices: Sequence[int]) -> Batch:
    """The batch with the teacher's rows of its pairs (word-level distillation), padded as its targets are."""
    ids, probs = soft.collate(indices, batch.tgt_out.size(1))
    return replace(batch, soft_ids=ids, soft_probs=probs)


def train(recipe: Recipe, out: Path, start: RunStart | None = None,
          teacher_pass: TeacherPass | None = None) -> TrainResult:
    """Train the recipe's model into run directory `out`, started as `start` says (resolved already: new or
    resume; see seqxduce.run_start and training.run.assemble); teacher_pass as assemble takes it."""
    start = start or RunStart()
    # from here to the loop's own handling of signals (Trainer.run), a stop ends the command in one line
    with stop_setting_up(lambda signum: _stopped_setting_up(signum, RunDir(out), start)):
        if start.resume:  # a run finished by max_steps is known from its newest checkpoint alone: no data to load
            rundir = RunDir(out)
            rundir.check_start(resume=True)
            latest = int(rundir.newest_readable(mmap=True)[1].get("step", 0))
            if latest >= recipe.train.max_steps:
                return finished_already(rundir, recipe.train, latest, is_rank_zero())
        run = assemble(recipe, Path(out), start, teacher_pass)
    try:
        return Trainer(run).run()
    finally:
        run.log.close()
        run.world.close()


def _stopped_setting_up(signum: int, rundir: RunDir, start: RunStart) -> str:
    """The line of a stop before a run's first step (rank 0's; the others say nothing): nothing was trained, and
    how to start or go on. A new run whose recipe was saved already is started again by --overwrite (or
    --auto-resume, which replaces a start that saved no checkpoint); one that saved nothing by the same command."""
    if not is_rank_zero():
        return ""
    name = signal_name(signum)
    if start.resume:
        return (f"{name}: stopped while setting up the run, before training went on; its checkpoints are as they "
                "were: continue with --resume")
    again = ("start it again with --overwrite or --auto-resume" if rundir.run_files()
             else "run the same command again to start it")
    return f"{name}: stopped while setting up the run, before its first step; nothing was trained: {again}"
