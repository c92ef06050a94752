"""A training run built from its parts in memory, without a run directory: what a test or a benchmark of the step
needs (it trains and validates, but cannot save)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from seqxduce import components
from seqxduce.api import VocabInfo
from seqxduce.device import resolve_device
from seqxduce.recipe import Recipe
from seqxduce.training import distributed
from seqxduce.training.optim import build_optimizer, build_scaler
from seqxduce.training.run import TrainingRun, encode
from seqxduce.training.step_plan import StepPlan


def in_memory_run(recipe: Recipe, model: Callable[[VocabInfo], torch.nn.Module] | None = None,
                  device: str | None = None) -> TrainingRun:
    """The recipe's run in one process on `device`: its task's training data (prepared under the recipe's
    data_dir), tokenizers trained in a temporary folder, and its model (or `model(vocab)`) seeded as `seqxduce
    train` seeds it. device: where to train (default: the recipe's [train] device, as `seqxduce train` resolves it)."""
    task = components.build_task(recipe)
    data_dir = components.data_dir(recipe)
    task.prepare(data_dir)
    examples = task.examples("train", data_dir)
    with tempfile.TemporaryDirectory() as work:
        tokenizers = components.train_tokenizers(recipe, examples, Path(work))
    torch.manual_seed(recipe.train.seed)
    vocab = tokenizers.vocab()
    where = torch.device(device) if device is not None else resolve_device(recipe.train.device)
    net = (components.build_model(recipe, vocab) if model is None else model(vocab)).to(where)
    optimizer, fused = build_optimizer(net, recipe.train, getattr(net, "schedule_width", None))
    pairs = encode(recipe, tokenizers, examples, "train")
    scaler = build_scaler(recipe.train, where)
    return TrainingRun(recipe=recipe, world=distributed.World(), device=where, task=task, tokenizers=tokenizers,
                       model=net, wrapped=net, optimizer=optimizer, fused=fused, scaler=scaler,
                       plan=StepPlan(recipe.train, pairs, sampler=None))
