"""Assembling a training run: the world, the run directory, the data, the tokenizers, the model (wrapped and
compiled), the optimizer and its schedule, and the training state, built once and handed to the Trainer as one
value, as fairseq and Joey NMT build them outside their trainers."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from seqxduce import checkpoint as ckpt
from seqxduce import components
from seqxduce.api import Example, Settings, Task, UserError
from seqxduce.components import Tokenizers
from seqxduce.console import console
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays, release_freed_memory
from seqxduce.corpus.prepare import (
    TOKENIZERS,
    Examples,
    data_fingerprint,
    dataset_for_files,
    nonempty,
    prepare_new,
    prepared_folder,
    train_tokenizers_shown,
    write_dataset,
)
from seqxduce.corpus.sampled_epochs import EpochEncoder
from seqxduce.data import Pair, encode_pairs
from seqxduce.device import resolve_device
from seqxduce.recipe import Recipe
from seqxduce.run_start import RunStart
from seqxduce.rundir import SAMPLED_DIR, RunDir, locate
from seqxduce.signals import stop_while_preparing
from seqxduce.training import distributed
from seqxduce.training.early_stopping import EarlyStopping
from seqxduce.training.metrics_log import MetricsLog
from seqxduce.training.optim import build_optimizer, build_scaler, restore_optimizer
from seqxduce.training.state import TrainState, restore
from seqxduce.training.step_plan import StepPlan
from seqxduce.training.tensorboard_log import TENSORBOARD_DIR, summary_writer_class
from seqxduce.training.validation import Validator


@dataclass
class TrainingRun:
    """Everything one training run (on one rank) is made of. `model` is the plain module, whose state_dict the
    checkpoints hold and which validation runs; `wrapped` is what the training forward calls (DDP, FSDP, compiled).
    A run without a run directory (rundir None) trains and validates but cannot save."""

    recipe: Recipe
    world: distributed.World
    device: torch.device
    task: Task
    tokenizers: Tokenizers
    model: torch.nn.Module
    wrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer
    fused: bool  # the optimizer is the fused kernel, which skips a non-finite step on the device
    scaler: torch.amp.GradScaler
    plan: StepPlan
    validator: Validator | None = None  # None: no valid split
    rundir: RunDir | None = None
    state: TrainState = field(default_factory=TrainState)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # tells this run's checkpoints from another's
    resumed: bool = False
    log: MetricsLog = field(default_factory=lambda: MetricsLog(None))
    early_stopping: EarlyStopping | None = None  # None: built from [train] patience and the run directory

    def __post_init__(self) -> None:
        if self.early_stopping is None:
            best_file = self.rundir.best_file if self.rundir is not None else None
            self.early_stopping = EarlyStopping(self.recipe.train.patience, best_file, self.run_id)

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0, which logs, validates and writes the run's files."""
        return self.world.rank == 0


def compile_enabled(setting: str, device: torch.device) -> bool:
    """[train] compile: on, off, or auto = on for CUDA only."""
    return setting == "on" or (setting == "auto" and device.type == "cuda")


def compiled(model: torch.nn.Module, setting: str, device: torch.device) -> torch.nn.Module:
    """The training forward, compiled when [train] compile says so; the plain module stays as it is."""
    if not compile_enabled(setting, device):
        return model
    # batch shapes vary with length: mark them dynamic from the start instead of recompiling per shape
    return torch.compile(model, dynamic=True)


@dataclass(frozen=True)
class FineTuningSource:
    """What --init-from names: the run directory, the checkpoint in it and the checkpoint's contents."""

    run_dir: Path
    checkpoint: Path
    saved: dict


def assemble(recipe: Recipe, run_dir: Path, start: RunStart | None = None) -> TrainingRun:
    """Build a run in run directory `run_dir` as `start` says (resolved: new or resume; checked where it was made):
    a new one (trained tokenizers, or start.tokenizers_from's), or the one there, restored from its newest
    checkpoint exactly. start.init_from (a run directory or checkpoint) starts a new run from its weights and
    tokenizer files, and with start.keep_optimizer its optimizer state, for fine-tuning. Every rank of a world
    calls it."""
    s = recipe.train
    start = start or RunStart()
    resume = start.resume
    # read before any heavy work, so that a model that does not match is one line at once
    init = fine_tuning_source(recipe, start.init_from, start.keep_optimizer) if start.init_from else None
    tokenizers_from = init.run_dir if init is not None else start.tokenizers_from
    world = distributed.setup(s.device, s.collective_timeout)
    if s.fsdp:  # before the data and the model are built
        world.require_shards()
    device = world.device or resolve_device(s.device)
    is_main = world.rank == 0
    if is_main and s.tensorboard:
        summary_writer_class()  # a missing package is one line before the run folder is touched
    rundir = RunDir(run_dir)
    _open_run_dir(rundir, world, start)
    # read before any heavy work, so that a checkpoint that cannot be resumed is one line at once
    resume_from = rundir.resume_state() if resume else None
    board = rundir.path / TENSORBOARD_DIR if is_main and s.tensorboard else None
    log = MetricsLog(rundir.metrics_file if is_main else None, tensorboard=board)
    task = components.build_task(recipe)
    data_dir = components.data_dir(recipe)
    if is_main:
        task.prepare(data_dir)
    world.barrier()
    train_examples = Examples(task, data_dir)  # read only when the training data are not prepared yet, or sampled
    with stop_while_preparing("preparing the training data, before the first step"):
        train_pairs, data_key = training_data(recipe, task, data_dir, rundir, world, train_examples, resume,
                                              tokenizers_from)
    valid_examples = task.examples("valid", data_dir) if "valid" in task.splits else []
    torch.manual_seed(s.seed)
    built = components.build_components(recipe, rundir.tokenizers.load(recipe), task)
    tokenizers = built.tokenizers
    valid_pairs = encode(recipe, tokenizers, valid_examples, "valid", rundir, is_main) if valid_examples else []
    # reads the training text again only if a tokenizer samples (subword regularization), once an epoch
    sampler = EpochEncoder(train_examples, tokenizers.src, tokenizers.tgt, s.max_source_len, s.max_target_len,
                           s.max_tokens, s.seed, folder=rundir.path / SAMPLED_DIR, rank=world.rank, show=is_main,
                           key=data_key)
    model = built.model.to(device)
    if resume_from is not None:  # into the plain module, before any sharding
        ckpt.load_weights(model, resume_from[1]["model"], f"--resume: {resume_from[0]}",
                          "resume without changing [model] or [tokenizer]")
    elif init is not None:
        ckpt.load_weights(model, init.saved["model"], f"--init-from {init.checkpoint}",
                          "fine-tune with the [model] and [tokenizer] of the run it comes from")
    wrapped = compiled(world.wrap(model, fsdp=s.fsdp), s.compile, device)
    optimizer, fused = build_optimizer(model, s, model.schedule_width)
    scaler = build_scaler(s, device)
    if init is not None:
        if start.keep_optimizer:  # Adam's moments go on; the schedule starts again at step 1 of the new run
            restore_optimizer(optimizer, init.saved["optimizer"], fused)
        if is_main:
            kept = "its optimizer state kept" if start.keep_optimizer else "a fresh optimizer"
            console.print(f"initialised from {init.checkpoint} (step {init.saved.get('step', '?')}), {kept}")
    run = TrainingRun(
        recipe=recipe, world=world, device=device, task=task, tokenizers=tokenizers, model=model, wrapped=wrapped,
        optimizer=optimizer, fused=fused, scaler=scaler,
        plan=StepPlan(s, train_pairs, sampler, world.rank, world.world_size),
        validator=Validator(recipe, task, tokenizers, valid_examples, valid_pairs, device) if valid_pairs else None,
        rundir=rundir, log=log)
    if resume_from is not None:
        latest, saved = resume_from
        run.state = restore(latest, saved, model, optimizer, fused, scaler, s.fsdp)
        run.run_id = saved.get("run_id") or run.run_id
        run.resumed = True
        if is_main:
            console.print(f"resumed from {latest} at step {run.state.step}")
    # the resolved recipe is saved only once the model is built (and any checkpoint loaded) with it, so that a
    # run directory never holds a recipe its checkpoints do not fit
    if is_main:
        rundir.write_recipe(recipe)
    # what building the run freed (the checks' reads, the model's and optimizer's set-up) goes back to the system:
    # glibc keeps a process's freed heap otherwise, 50 MB and more that every rank would hold for its whole life
    release_freed_memory()
    world.barrier()
    return run


def fine_tuning_source(recipe: Recipe, init_from: Path, keep_optimizer: bool) -> FineTuningSource:
    """The run directory, checkpoint and its contents that --init-from names, refused in one line when the recipe's
    architecture or vocabulary differs from that run's: [model] and [tokenizer] must match, [train] may change."""
    source, path = locate(init_from)
    if not source.recipe_file.is_file():
        raise UserError(f"--init-from {init_from}: {source.path} holds no {source.recipe_file.name}; name a run "
                        "directory or a checkpoint inside one")
    theirs, mine = source.load_recipe().resolved(), recipe.resolved()
    settings = recipe.model.settings
    may_change = settings.decode_time_keys() if isinstance(settings, Settings) else set()
    for section in ("model", "tokenizer"):
        for key in sorted(set(theirs[section]) | set(mine[section])):
            there, here = theirs[section].get(key, "(unset)"), mine[section].get(key, "(unset)")
            if there != here and not (section == "model" and key in may_change):
                raise UserError(f"--init-from {init_from}: [{section}] {key} = {there!r} there but {here!r} in this "
                                f"recipe; fine-tuning keeps the architecture and vocabulary: set {section}.{key} "
                                f"as that run has it ([train] may change)")
    saved = ckpt.load(path, mmap=True)
    if keep_optimizer and not saved.get("optimizer"):
        raise UserError(f"--keep-optimizer: {path} holds no optimizer state (an average or best.pt holds weights "
                        "only); name a step checkpoint, or leave out --keep-optimizer")
    if keep_optimizer and recipe.train.fsdp:
        raise UserError("--keep-optimizer: not with [train] fsdp = true; fine-tune with a fresh optimizer")
    return FineTuningSource(source.path, path, saved)


def _open_run_dir(rundir: RunDir, world: distributed.World, start: RunStart) -> None:
    rundir.check_start(start.resume, start.overwrite)
    if world.rank == 0:
        for line in rundir.open(start.overwrite):
            console.print(line)
    world.barrier()


def _tokenizers_in(rundir: RunDir, recipe: Recipe, world: distributed.World, examples: Examples,
                   resume: bool, tokenizers_from: Path | None) -> None:
    """A resumed run keeps the tokenizers its checkpoints were trained with; a new run trains its own (or
    copies tokenizers_from's), replacing any left in the run directory by an earlier attempt (they may come
    from other settings)."""
    if not resume and world.rank == 0:
        if tokenizers_from is not None:
            rundir.tokenizers.copy(recipe, tokenizers_from)
        else:
            train_tokenizers_shown(rundir.tokenizers, recipe, nonempty(recipe, examples))  # lines for a log file
    world.barrier()
    if not rundir.tokenizers.has(recipe):
        raise UserError(f"--resume: {rundir.path} holds no tokenizer files; train into a new --out")


def training_data(recipe: Recipe, task: Task, data_dir: Path, rundir: RunDir, world: distributed.World,
                  examples: Examples, resume: bool, tokenizers_from: Path | None) -> tuple[PairArrays, str]:
    """The run's tokenizer files into its directory and its training pairs, mapped from the prepared dataset:
    rank 0 prepares what is not prepared yet (corpus.prepare), the others wait, then every rank maps the same
    files. With [train] token_cache = false, every rank encodes in memory and nothing is written."""
    s = recipe.train
    is_main = world.rank == 0
    limits = (s.max_source_len, s.max_target_len)
    if not s.token_cache:
        _tokenizers_in(rundir, recipe, world, examples, resume, tokenizers_from)
        tokenizers = rundir.tokenizers.load(recipe)
        listed, skipped = encode_pairs(list(nonempty(recipe, examples)), tokenizers.src, tokenizers.tgt, *limits)
        _report_kept(len(listed), skipped, is_main)
        pairs = PairArrays.from_pairs(listed)
        return pairs, _digest(pairs)
    fingerprint = data_fingerprint(task, data_dir, examples)
    reused = False  # the data were prepared before (else preparing them printed what it kept)
    if not resume and tokenizers_from is None:  # a new run: tokenizers and ids from the prepared folder
        folder = prepared_folder(recipe, fingerprint)
        if is_main:
            if binarized.exists(folder):
                binarized.open_dataset(folder)  # a damaged one is refused here, before anything is copied
                reused = True
                console.print(f"train: the training data were prepared already: {folder}")
            else:
                prepare_new(recipe, folder, examples, fingerprint, total=examples.lines_hint())
            rundir.tokenizers.copy(recipe, folder / TOKENIZERS)
    else:  # the tokenizer files come from elsewhere: the ids are keyed by their bytes
        _tokenizers_in(rundir, recipe, world, examples, resume, tokenizers_from)
        tokenizers = rundir.tokenizers.load(recipe)
        # a restart, a resumed run, a run given the same tokenizer files: the dataset prepared before, if any
        folder = dataset_for_files(recipe, fingerprint, rundir.tokenizers.files(recipe), tokenizers)
        if is_main:
            if binarized.exists(folder):
                binarized.open_dataset(folder)
                reused = True
                console.print(f"train: the training data were prepared already: {folder}")
            else:
                write_dataset(folder, nonempty(recipe, examples), tokenizers, recipe, total=examples.lines_hint())
    mapped = _await_prepared(folder, world, lambda: _node_copy(recipe, rundir, fingerprint, examples, world))
    pairs, meta = binarized.open_dataset(mapped, verify=not is_main)  # rank 0 checked it above
    _report_kept(len(pairs), sum(meta.get("dropped", {}).values()), is_main and reused)
    return pairs, folder.name  # the dataset's key: its data, tokenizers and limits


def _digest(pairs: PairArrays) -> str:
    """A key of pairs encoded in memory (a small corpus): their ids."""
    digest = hashlib.sha256()
    for array in (pairs.src_ids, pairs.src_offsets, pairs.tgt_ids, pairs.tgt_offsets):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:32]


def _await_prepared(folder: Path, world: distributed.World, node_copy: Callable[[], Path]) -> Path:
    """The folder this rank maps. The other ranks wait for rank 0's dataset by its folder or rank 0's word that
    it is done (the rendezvous store), not in a collective: preparing a large corpus outlasts [train]
    collective_timeout (a rank 0 that fails ends the world under torchrun). A rank that hears rank 0 is done but
    does not see the folder is on a node whose cache folder is its own ($SEQXDUCE_CACHE not shared): it maps the
    node's own copy of the same ids (node_copy)."""
    done = f"seqxduce/prepared/{folder.name}"
    if world.world_size > 1 and world.rank != 0:
        while not binarized.exists(folder) and not world.announced(done):
            time.sleep(0.2)
        if not binarized.exists(folder):
            folder = node_copy()
    else:
        world.announce(done)
    world.barrier()
    return folder


def _node_copy(recipe: Recipe, rundir: RunDir, fingerprint: str, examples: Examples, world: distributed.World
               ) -> Path:
    """This node's own dataset of the ids rank 0 mapped: encoded with the run's tokenizer files (which rank 0
    put in the run directory: the same bytes, so the same ids) by the node's first process, the others waiting
    for it; found instead when the node has it already (a restart)."""
    if not rundir.tokenizers.has(recipe):
        raise UserError(f"process {world.rank}: sees neither the training data process 0 prepared nor the run's "
                        f"tokenizer files in {rundir.path}: put --out on storage every node shares")
    tokenizers = rundir.tokenizers.load(recipe)
    own = dataset_for_files(recipe, fingerprint, rundir.tokenizers.files(recipe), tokenizers)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        if not binarized.exists(own):
            write_dataset(own, nonempty(recipe, examples), tokenizers, recipe, show=False)
        console.print(f"process {world.rank}: this node's cache folder is not process 0's; it maps its own copy "
                      f"of the training data, {own}")
    while not binarized.exists(own):
        time.sleep(0.2)
    return own


def _report_kept(kept: int, skipped: int, is_main: bool) -> None:
    if skipped and is_main:
        console.print(f"train: skipped {skipped} of {kept + skipped} pairs over max_source_len/max_target_len")
    if not kept:
        raise UserError("train: no pairs left after the length limits; raise [train] max_source_len/max_target_len")


def encode(recipe: Recipe, tokenizers: Tokenizers, examples: list[Example], split: str,
           rundir: RunDir | None = None, is_main: bool = True) -> list[Pair]:
    """A split's examples encoded into pairs within the length limits, in memory (the training split of a run
    comes from its prepared dataset: training_data)."""
    s = recipe.train
    pairs, skipped = encode_pairs(examples, tokenizers.src, tokenizers.tgt, s.max_source_len, s.max_target_len)
    if skipped and is_main:
        console.print(f"{split}: skipped {skipped} of {len(examples)} pairs over max_source_len/max_target_len")
    if not pairs:
        raise UserError(f"{split}: no pairs left after the length limits; "
                        "raise [train] max_source_len/max_target_len")
    return pairs
