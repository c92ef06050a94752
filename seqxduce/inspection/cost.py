"""A recipe's model size and training cost, for `seqxduce recipe info`: parameters counted on a model built
on torch's meta device (no memory, no data), and training FLOPs per step and over max_steps.

FLOPs = 3 x forward (the backward pass costs about twice the forward). The forward count is the model's own
when it offers `forward_flops_per_token()` -> (per source token, per target token), e.g. 2 per multiply-add
of every weight matrix the token passes through; otherwise every token is taken to pass through every
parameter (2 x parameters, the 6 N D rule). A step's tokens are max_tokens x update_freq per process, taken
as half source and half target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seqxduce import components
from seqxduce.api import Settings, VocabInfo
from seqxduce.recipe import Recipe
from seqxduce.rundir import RunDir


@dataclass
class TrainingCost:
    """Parameters and training FLOPs of a recipe's model."""

    parameters: int
    vocab_size: int
    vocab_from: str  # where the vocabulary size came from, in words
    tokens_per_step: int
    flops_per_step: float
    counted_by_model: bool  # False: the 2 x parameters per token fallback


def vocabulary(recipe: Recipe, recipe_dir: Path) -> tuple[VocabInfo, str] | None:
    """The vocabulary sizes the model will have: from tokenizers saved beside the recipe (a run directory),
    else from what the tokenizer's settings fix (Settings.planned_vocab_size); None when neither says."""
    shared = recipe.tokenizer.core.shared
    run = RunDir(recipe_dir)
    if run.tokenizers.has(recipe):
        vocab = run.tokenizers.load(recipe).vocab()
        return vocab, f"the tokenizer saved in {recipe_dir}"
    settings = recipe.tokenizer.settings
    size = settings.planned_vocab_size() if isinstance(settings, Settings) else None
    if size is None:
        return None
    return VocabInfo(src_size=size, tgt_size=size, pad_id=0, bos_id=1, eos_id=2, shared=shared), \
        "[tokenizer] vocab_size"


def training_cost(recipe: Recipe, recipe_dir: Path) -> TrainingCost | None:
    """The recipe's parameter count and FLOPs per training step; None when the vocabulary size is unknown."""
    import torch

    found = vocabulary(recipe, recipe_dir)
    if found is None:
        return None
    vocab, vocab_from = found
    with torch.device("meta"):
        model = components.build_model(recipe, vocab)
    parameters = sum(p.numel() for p in model.parameters())  # a shared (tied) matrix counts once
    counted = model.forward_flops_per_token()
    source, target = counted if counted is not None else (2 * parameters, 2 * parameters)
    tokens = recipe.train.max_tokens * recipe.train.update_freq
    flops = 3.0 * (tokens / 2 * source + tokens / 2 * target)
    return TrainingCost(parameters, vocab.tgt_size, vocab_from, tokens, flops, counted is not None)


def cost_lines(recipe: Recipe, recipe_dir: Path) -> list[str]:
    """Lines stating the parameters and training FLOPs (see the module docstring)."""
    cost = training_cost(recipe, recipe_dir)
    if cost is None:
        return ["parameters and FLOPs: unknown until the tokenizer is trained ([tokenizer] sets no vocab_size); "
                "`seqxduce recipe info RUN/recipe.toml` on a trained run gives them"]
    steps = recipe.train.max_steps
    how = ("the model's count: 2 per multiply-add of each weight matrix a token passes through"
           if cost.counted_by_model else "2 x parameters per token: the model gives no finer count")
    return [
        f"parameters: {cost.parameters:,} ({cost.parameters / 1e6:.1f}M; vocabulary {cost.vocab_size} from "
        f"{cost.vocab_from})",
        f"training FLOPs: {cost.flops_per_step:.3g} per step ({cost.tokens_per_step} tokens per process = "
        f"max_tokens x update_freq, half source, half target), {cost.flops_per_step * steps:.3g} for "
        f"max_steps = {steps}",
        f"FLOPs = 3 x forward; forward = {how}",
    ] + _members_line(recipe)


def _members_line(recipe: Recipe) -> list[str]:
    """With [train] members = N, what the figures above are per member, and what the run as a whole costs."""
    count = recipe.train.members
    if count <= 1:
        return []
    return [f"[train] members = {count}: the figures above are each member's; training the run costs {count} times "
            f"the FLOPs, and decoding it runs all {count} members"]
