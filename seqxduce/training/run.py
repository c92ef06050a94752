"""Assembling a training run: the world, the run directory, the data, the tokenizers, the model (wrapped and
compiled), the optimizer and its schedule, and the training state, built once and handed to the Trainer as one
value, as fairseq and Joey NMT build them outside their trainers."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch

from seqxduce import checkpoint as ckpt
from seqxduce import components
from seqxduce.api import Example, Settings, Task, UserError
from seqxduce.atomic import atomic_write_text
from seqxduce.components import Tokenizers
from seqxduce.console import console
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays, release_freed_memory
from seqxduce.corpus.distilled import student_task
from seqxduce.corpus.soft_targets import SOFT_RECORD, SoftTargets
from seqxduce.corpus.training_data import TrainingCorpus
from seqxduce.data import Pair, encode_pairs
from seqxduce.device import emulated_bf16, resolve_device
from seqxduce.recipe import Recipe
from seqxduce.run_start import RunStart
from seqxduce.rundir import SAMPLED_DIR, RunDir, locate
from seqxduce.signals import stop_while_preparing
from seqxduce.torchrun import first_on_node
from seqxduce.training import distributed
from seqxduce.training.early_stopping import EarlyStopping
from seqxduce.training.metrics_log import MetricsLog
from seqxduce.training.optim import build_optimizer, build_scaler, restore_optimizer
from seqxduce.training.state import TrainState, restore
from seqxduce.training.step_plan import StepPlan
from seqxduce.training.tensorboard_log import TENSORBOARD_DIR, summary_writer_class
from seqxduce.training.validation import Validator

# a warning, not a refusal: the run is right, only slow; the committed recipes say bf16 for the CPUs that have it
EMULATED_BF16_TRAINING = (
    'warning: [train] precision = "bf16" on a CPU without bf16 units (no AVX512-BF16, no AMX): torch emulates '
    "bf16 here, about 13x slower per step than fp32 on a Zen 3 EPYC; --set train.precision=fp32 trains at the "
    "fp32 speed (a resumed run too: --resume --set train.precision=fp32)")


class TeacherPass(Protocol):
    """[distill] word_kd's teacher distributions over a run's training pairs, found in the cache or computed there
    (seqxduce.distillation.teacher_targets.teacher_soft_targets): handed in by whoever starts the run (engine.train),
    as training imports no distillation. expected: the set a resumed run trained with; share: (rank, world size)."""

    def __call__(self, recipe: Recipe, pairs: PairArrays, tokenizer_files: Sequence[Path], *, expected: str | None,
                 share: tuple[int, int]) -> SoftTargets: ...


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
    soft_targets: SoftTargets | None = None  # the teacher's distributions over the training pairs ([distill] word_kd)

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


def assemble(recipe: Recipe, run_dir: Path, start: RunStart | None = None,
             teacher_pass: TeacherPass | None = None) -> TrainingRun:
    """Build a run in run directory `run_dir` as `start` says (resolved: new or resume; checked where it was made):
    a new one (trained tokenizers, or start.tokenizers_from's), or the one there, restored from its newest
    checkpoint exactly. start.init_from (a run directory or checkpoint) starts a new run from its weights and
    tokenizer files, and with start.keep_optimizer its optimizer state, for fine-tuning. teacher_pass: how a
    [distill] word_kd run gets its teacher's distributions (TeacherPass). Every rank of a world calls it."""
    s = recipe.train
    start = start or RunStart()
    resume = start.resume
    # read before any heavy work, so that a model that does not match is one line at once
    init = fine_tuning_source(recipe, start.init_from, start.keep_optimizer) if start.init_from else None
    world = distributed.setup(s.device, s.collective_timeout)
    if s.fsdp:  # before the data and the model are built
        world.require_shards()
    device = world.device or resolve_device(s.device)
    is_main = world.rank == 0
    if is_main and emulated_bf16(device, s.precision):
        console.print(EMULATED_BF16_TRAINING, markup=False, highlight=False)
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
    task = student_task(recipe, task)  # a distilled set's record is written before the barrier
    # for the corpus, a fine-tuned run is one given the tokenizer files of the run it comes from
    corpus_start = start if init is None else replace(start, tokenizers_from=init.run_dir, init_from=None,
                                                      keep_optimizer=False)
    with stop_while_preparing("preparing the training data, before the first step"):
        corpus = TrainingCorpus.open(recipe, task, data_dir, corpus_start, rundir.tokenizers,
                                     sampled_folder=rundir.path / SAMPLED_DIR, ranks=_WorldRanks(world))
    soft = _soft_targets(recipe, corpus, rundir, resume_from is not None, world, teacher_pass) \
        if recipe.distill.word_kd else None
    valid_examples = task.examples("valid", data_dir) if "valid" in task.splits else []
    torch.manual_seed(s.seed)
    tokenizers = corpus.tokenizers
    built = components.build_components(recipe, tokenizers, task)
    valid_pairs = encode(recipe, tokenizers, valid_examples, "valid", is_main) if valid_examples else []
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
        plan=StepPlan(s, corpus.pairs, corpus.epochs, world.rank, world.world_size, task.corpus_weights()),
        validator=Validator(recipe, task, tokenizers, valid_examples, valid_pairs, device) if valid_pairs else None,
        rundir=rundir, log=log, soft_targets=soft)
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


def _soft_targets(recipe: Recipe, corpus: TrainingCorpus, rundir: RunDir, resumed: bool,
                  world: distributed.World, teacher_pass: TeacherPass | None) -> SoftTargets:
    """[distill] word_kd's teacher distributions over the corpus's pairs (computed once, in the cache; the ranks of
    a world each compute their share of the pass). The run
    folder records which ones it trains with (SOFT_RECORD), so that a resume with other ones (its teacher trained on,
    another k) is refused in one line before anything is computed, not trained on without a word."""
    if corpus.epochs.sampling():
        raise UserError(f"[distill] word_kd = {recipe.distill.word_kd:g}: the teacher's distributions are kept per "
                        "target position of fixed ids, but this [tokenizer] samples a new encoding each epoch; turn "
                        "its sampling off, or word_kd")
    if teacher_pass is None:  # a caller's slip, not the user's: seqxduce.train hands the pass in
        raise ValueError("assemble: a [distill] word_kd run needs the teacher's pass (teacher_pass=seqxduce."
                         "distillation.teacher_targets.teacher_soft_targets), or train it with seqxduce.train")
    record = rundir.path / SOFT_RECORD
    expected = json.loads(record.read_text())["soft_targets"] if resumed and record.is_file() else None
    soft = teacher_pass(recipe, corpus.pairs, rundir.tokenizers.files(recipe), expected=expected,
                        share=(world.rank, world.world_size))
    if world.rank == 0 and soft.folder is not None:
        atomic_write_text(record, json.dumps({"soft_targets": soft.folder.name}) + "\n")
    return soft


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


class _WorldRanks:
    """How the processes of a world meet while the corpus is made (corpus.training_data.Ranks): rank 0 writes; the
    others wait for its dataset by its folder or rank 0's word that it is done (the rendezvous store), not in a
    collective: preparing a large corpus outlasts [train] collective_timeout (a rank 0 that fails ends the world
    under torchrun). A rank that hears rank 0 is done but does not see the folder is on a node whose cache folder is
    its own ($SEQXDUCE_CACHE not shared): it maps the node's own copy of the same ids, which the node's first
    process makes and the others wait for."""

    def __init__(self, world: distributed.World):
        self.world, self.rank, self.writes = world, world.rank, world.rank == 0

    def meet(self) -> None:
        self.world.barrier()

    def mapped(self, folder: Path, own_copy: Callable[[bool], Path]) -> Path:
        world = self.world
        done = f"seqxduce/prepared/{folder.name}"
        if world.world_size > 1 and world.rank != 0:
            while not binarized.exists(folder) and not world.announced(done):
                time.sleep(0.2)
            if not binarized.exists(folder):
                folder = own_copy(first_on_node())
                while not binarized.exists(folder):
                    time.sleep(0.2)
        else:
            world.announce(done)
        world.barrier()
        return folder


def encode(recipe: Recipe, tokenizers: Tokenizers, examples: list[Example], split: str,
           is_main: bool = True) -> list[Pair]:
    """A split's examples encoded into pairs within the length limits, in memory (the training split of a run
    comes from its corpus: corpus.training_data)."""
    s = recipe.train
    pairs, skipped = encode_pairs(examples, tokenizers.src, tokenizers.tgt, s.max_source_len, s.max_target_len)
    if skipped and is_main:
        console.print(f"{split}: skipped {skipped} of {len(examples)} pairs over max_source_len/max_target_len")
    if not pairs:
        raise UserError(f"{split}: no pairs left after the length limits; "
                        "raise [train] max_source_len/max_target_len")
    return pairs
