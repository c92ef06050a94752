"""Decoding with an ensemble: several trained models (checkpoints of one run, or runs that share its tokenizers)
predict each next token together, their probabilities averaged, as fairseq's and tensor2tensor's ensembles do.

The ensemble is itself a Model, built from the Model contract alone (encode, init_cache, step, reorder), so every
decoder plugin and every task can use it without knowing; members may differ in architecture, never in vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seqxduce import checkpoint as ckpt
from seqxduce import components, rundir
from seqxduce.api import AttentionWeights, Model, ModelOutput, UserError


class EnsembleModel(torch.nn.Module, Model):
    """Members' next-token distributions averaged in probability space: log(mean_i p_i)."""

    def __init__(self, members: Sequence[Model]):
        super().__init__()
        if not members:
            raise UserError("an ensemble needs at least one model")
        self.members = list(members)
        # registered as submodules so that .to(), .eval() and state_dict() reach every member
        self.modules_ = torch.nn.ModuleList([m for m in members if isinstance(m, torch.nn.Module)])
        self.log_n = math.log(len(members))

    @property
    def schedule_width(self) -> int | None:
        return self.members[0].schedule_width

    @property
    def positions_limit(self) -> int | None:
        """The shortest limit of the members that declare one (every member reads every input)."""
        limits = [m.positions_limit for m in self.members if m.positions_limit is not None]
        return min(limits) if limits else None

    def _average(self, logprobs: list[torch.Tensor]) -> torch.Tensor:
        return torch.logsumexp(torch.stack([lp.float() for lp in logprobs]), dim=0) - self.log_n

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> ModelOutput:
        """Log-probabilities of the averaged distribution (B, T, V), for scoring teacher-forced targets."""
        outs = [m(src, tgt_in).logits.log_softmax(dim=-1) for m in self.members]
        return ModelOutput(logits=self._average(outs))

    def encode(self, src: torch.Tensor) -> list[Any]:
        return [m.encode(src) for m in self.members]

    def init_cache(self, memory: list[Any]) -> list[Any]:
        return [m.init_cache(mem) for m, mem in zip(self.members, memory)]

    def step(self, tokens: torch.Tensor, memory: list[Any], cache: list[Any]) -> tuple[torch.Tensor, list[Any]]:
        results = [m.step(tokens, mem, c) for m, mem, c in zip(self.members, memory, cache)]
        return self._average([lp for lp, _ in results]), [c for _, c in results]

    def reorder(self, memory: list[Any], cache: list[Any] | None, index: torch.Tensor) -> tuple[list[Any], Any]:
        caches = cache if cache is not None else [None] * len(self.members)
        pairs = [m.reorder(mem, c, index) for m, mem, c in zip(self.members, memory, caches)]
        return [mem for mem, _ in pairs], None if cache is None else [c for _, c in pairs]

    def annotate(self, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each member's per-position figures: the first member's under their own names (what a reader of a
        single model's annotations expects), member k's (k >= 2) with `_member<k>` appended."""
        figures: dict[str, torch.Tensor] = {}
        for k, member in enumerate(self.members, start=1):
            for name, values in member.annotate(src, tgt_in).items():
                figures[name if k == 1 else f"{name}_member{k}"] = values
        return figures

    def attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> AttentionWeights | None:
        """Refused: the members average their predictions, not their attention, and each attends in its own
        way; this says so itself, so that no message blames a member's model for the ensemble's lack."""
        raise UserError(f"an ensemble of {len(self.members)} models has no attention weights of its own (its members "
                        "attend each in their own way); draw one member's: `seqxduce attention RUN --member K` "
                        "(load_run(RUN, member=K)), or name that member's checkpoint")


def tokenizer_files(run: rundir.RunDir) -> dict[str, bytes]:
    """The saved tokenizer files of a run, by name (what decides that two runs read and write the same ids)."""
    return {p.name: p.read_bytes() for p in run.tokenizers.any_files()}


def load_members(main: rundir.RunDir, paths: Sequence[Path], device: torch.device,
                 model_overrides: Sequence[str] = ()) -> list[Model]:
    """The models of extra checkpoints or run directories, each with its own run's recipe (plus the decode-time
    model_overrides, e.g. a Universal Transformer's depth, which apply to every member alike), on device.

    Refused, naming the file: a member whose run has other tokenizer files than the main run's (its ids would
    mean other words, and the average would be silently wrong), or another task."""
    ours = tokenizer_files(main)
    main_task = main.load_recipe().task.core.name
    members: list[Model] = []
    for path in paths:
        run, checkpoint = rundir.locate(path)
        if tokenizer_files(run) != ours:
            raise UserError(f"--ensemble {path}: its run {run.path} has other tokenizer files than {main.path}; "
                            "ensemble checkpoints of one run, or runs trained with the same tokenizer files")
        recipe = run.load_recipe(model_overrides)
        components.check_decode_overrides(recipe, tuple(model_overrides))
        if recipe.task.core.name != main_task:
            raise UserError(f"--ensemble {path}: trained for task {recipe.task.core.name!r}, not {main_task!r}")
        model = components.build_components(recipe, run.tokenizers.load(recipe)).model
        ckpt.load_weights(model, ckpt.load(checkpoint)["model"], checkpoint,
                          f"ensemble it with the recipe it was trained with ({run.recipe_file})")
        members.append(model.to(device).eval())
    return members
