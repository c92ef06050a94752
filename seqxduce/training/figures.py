"""The figures of training steps: a model's stats over accumulated batches, the sums between two log lines and the
run of non-finite updates. A step's figures may be device tensors: they are summed on the device and read on the
host only when a log line, a validation or a checkpoint needs them, so that no step waits for the GPU."""

from __future__ import annotations

import math
import time

import torch

from seqxduce.training import distributed

Figure = float | torch.Tensor  # a Python number, or a 0-dim tensor on any device


def _is_tensor(*values: object) -> bool:
    return any(isinstance(v, torch.Tensor) for v in values)


def _stack(values: list[Figure]) -> torch.Tensor:
    """One float64 tensor of the values, on the device of the first tensor among them (else the CPU)."""
    device = next((v.device for v in values if isinstance(v, torch.Tensor)), torch.device("cpu"))
    return torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in values])


def batch_stats(per_batch: list[dict[str, Figure]]) -> dict[str, Figure]:
    """A model's stats (ModelOutput.stats) over the accumulated batches of one step, on this rank: a name ending
    in `_max` by maximum, any other by mean. Tensors stay on their device (the ranks are reduced at log time)."""
    names = sorted({name for stats in per_batch for name in stats})
    out: dict[str, Figure] = {}
    for name in names:
        if name.endswith("_max"):
            values = [s.get(name, float("-inf")) for s in per_batch]
            out[name] = _stack(values).max() if _is_tensor(*values) else max(float(v) for v in values)
        else:
            out[name] = sum((s.get(name, 0.0) for s in per_batch), 0.0) / len(per_batch)
    return out


# a training step's own figures; the others it returns are the model's stats
TRAINER_FIGURES = ("loss", "nll", "tokens", "aux", "grad_norm", "seconds", "skipped_updates")
# summed over ranks at log time: each rank holds the sums of its own batches
RANK_SUMS = ("loss", "nll", "aux")


def _unless(skipped: Figure, value: Figure, fill: float) -> Figure:
    """value, or fill where the step was skipped (a NaN loss times 0 would still be NaN, hence a select)."""
    if not _is_tensor(skipped, value):
        return fill if skipped else float(value)
    if not isinstance(skipped, torch.Tensor):
        return value if not skipped else torch.full_like(value, fill)
    if not isinstance(value, torch.Tensor):  # a host number (the step's tokens): no copy to the device
        if fill == 0.0:
            return (~skipped.bool()).to(torch.float64) * float(value)
        return torch.where(skipped.bool(), fill, float(value))
    return torch.where(skipped.bool(), fill, value)


class Window:
    """Sums training figures between two log lines; a skipped update (non-finite loss or gradient) is counted,
    not averaged."""

    def __init__(self) -> None:
        self.sums: dict[str, Figure] = {}
        self.maxima: dict[str, Figure] = {}
        self.steps: Figure = 0
        self.skipped: Figure = 0
        self.started = time.perf_counter()

    def tokens(self) -> int:
        """Target tokens trained on in this window (reads a device sum: call at log time)."""
        return int(self.sums.get("tokens", 0.0))

    def add(self, figures: dict[str, Figure]) -> None:
        skipped = figures.get("skipped_updates", 0.0)
        for k, v in figures.items():
            if k in ("skipped_updates", "seconds"):
                continue
            if k.endswith("_max") and k not in TRAINER_FIGURES:
                value = _unless(skipped, v, float("-inf"))
                before = self.maxima.get(k)
                self.maxima[k] = value if before is None else (
                    _stack([before, value]).max() if _is_tensor(before, value) else max(before, value))
            else:
                self.sums[k] = self.sums.get(k, 0.0) + _unless(skipped, v, 0.0)
        self.steps = self.steps + (1 - skipped)
        self.skipped = self.skipped + skipped

    def summary(self, lr: float, world: distributed.World | None = None) -> dict[str, float]:
        """The window's figures, reduced over the ranks of `world`: the one point where they reach the host."""
        world = world or distributed.World()
        summed = [k for k in self.sums if k in RANK_SUMS or k not in TRAINER_FIGURES]
        kept = [k for k in self.sums if k not in summed]
        maxed = list(self.maxima)
        sums = world.all_reduce_sum(_stack([self.sums[k] for k in summed])) if summed else torch.zeros(0)
        maxima = world.all_reduce_max(_stack([self.maxima[k] for k in maxed])) if maxed else torch.zeros(0)
        read = _stack([self.steps, self.skipped, *(self.sums[k] for k in kept), *sums, *maxima]).tolist()
        steps, skipped = int(read[0]), int(read[1])
        values = dict(zip([*kept, *summed, *maxed], read[2:]))
        for k in summed:
            if k not in TRAINER_FIGURES:  # a model's stat: the mean over ranks of the means over batches
                values[k] /= world.world_size
        if not steps:  # every update of the window was skipped: there is no loss to report
            return {"lr": lr, "skipped_updates": skipped}
        tokens = max(values.get("tokens", 0.0), 1.0)
        nll = values.get("nll", 0.0) / tokens
        out = {"loss": values.get("loss", 0.0) / tokens, "ppl": math.exp(min(nll, 100.0)), "lr": lr,
               "tokens_per_s": values.get("tokens", 0.0) / max(time.perf_counter() - self.started, 1e-9),
               "grad_norm": values.get("grad_norm", 0.0) / steps}
        if values.get("aux"):
            out["aux_loss"] = values["aux"] / tokens
        if skipped:
            out["skipped_updates"] = skipped
        for k, v in values.items():
            if k not in TRAINER_FIGURES:
                out[k] = v if k.endswith("_max") else v / steps
        return out


class NonfiniteRun:
    """Skipped updates in a row, counted where the step's skip flag lives (on the device: no wait), and the first
    step at which `limit` of them in a row were reached; read on the host at log, validation and checkpoint time."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.length: Figure = 0
        self.stop_step: Figure = 0  # 0 while the limit was not reached

    def add(self, step: int, skipped: Figure) -> None:
        self.length = (self.length + 1) * skipped
        reached = (self.length >= self.limit) & (self.stop_step == 0)
        self.stop_step = self.stop_step + reached * (step - self.stop_step)

    def reached_at(self) -> int:
        """The step at which the limit was reached, or 0 (reads a device value: call at check points)."""
        return int(self.stop_step)
