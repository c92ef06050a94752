"""The figures of training steps: a model's stats reduced over batches and processes, and the sums between two
log lines."""

from __future__ import annotations

import math
import time

import torch

from seqxduce import distributed


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
TRAINER_FIGURES = ("loss", "nll", "tokens", "aux", "grad_norm", "seconds", "skipped_updates")


class Window:
    """Sums training figures between two log lines."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.steps = 0
        self.skipped = 0
        self.started = time.perf_counter()

    def tokens(self) -> int:
        """Target tokens trained on in this window."""
        return int(self.sums.get("tokens", 0.0))

    def add(self, figures: dict[str, float]) -> None:
        if figures.get("skipped_updates"):  # its loss or gradient norm is not finite: counted, not averaged
            self.skipped += 1
            return
        self.steps += 1
        for k, v in figures.items():
            if k.endswith("_max") and k not in TRAINER_FIGURES:
                self.sums[k] = max(self.sums.get(k, float("-inf")), v)
            else:
                self.sums[k] = self.sums.get(k, 0.0) + v

    def summary(self, lr: float) -> dict[str, float]:
        if not self.steps:  # every update of the window was skipped: there is no loss to report
            return {"lr": lr, "skipped_updates": self.skipped}
        tokens = max(self.sums.get("tokens", 0.0), 1.0)
        nll = self.sums.get("nll", 0.0) / tokens
        out = {"loss": self.sums.get("loss", 0.0) / tokens, "ppl": math.exp(min(nll, 100.0)), "lr": lr,
               "tokens_per_s": self.sums.get("tokens", 0.0) / max(time.perf_counter() - self.started, 1e-9),
               "grad_norm": self.sums.get("grad_norm", 0.0) / max(self.steps, 1)}
        if self.sums.get("aux"):
            out["aux_loss"] = self.sums["aux"] / tokens
        if self.skipped:
            out["skipped_updates"] = self.skipped
        for k, v in self.sums.items():
            if k not in TRAINER_FIGURES:
                out[k] = v if k.endswith("_max") else v / max(self.steps, 1)
        return out
