"""A training run built from its parts in memory, without a run directory: what a test of the step needs."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from seqxduce import components, distributed
from seqxduce.api import VocabInfo
from seqxduce.epochs import StepPlan
from seqxduce.optim import build_optimizer, build_scaler
from seqxduce.recipe import Recipe
from seqxduce.training_run import TrainingRun, encode


def step_parts(recipe: Recipe, model: Callable[[VocabInfo], torch.nn.Module] | None = None,
               device: str = "cpu") -> TrainingRun:
    """The recipe's run in one process on `device`: its task's training data (prepared under the recipe's data_dir),
    tokenizers trained in memory, and its model (or `model(vocab)`) seeded as `seqxduce train` seeds it."""
    task = components.build_task(recipe)
    data_dir = components.data_dir(recipe)
    task.prepare(data_dir)
    examples = task.examples("train", data_dir)
    with tempfile.TemporaryDirectory() as work:
        tokenizers = components.train_tokenizers(recipe, examples, Path(work))
    torch.manual_seed(recipe.train.seed)
    vocab = tokenizers.vocab()
    where = torch.device(device)
    net = (components.build_model(recipe, vocab) if model is None else model(vocab)).to(where)
    optimizer, fused = build_optimizer(net, recipe.train, getattr(net, "schedule_width", None))
    pairs = encode(recipe, tokenizers, examples, "train")
    scaler = build_scaler(recipe.train, where)
    return TrainingRun(recipe=recipe, world=distributed.World(), device=where, task=task, tokenizers=tokenizers,
                       model=net, wrapped=net, optimizer=optimizer, fused=fused, scaler=scaler,
                       plan=StepPlan(recipe.train, pairs, sampler=None))
