"""Early stopping and the best checkpoint: `[train] patience` validations in a row without a better one end the
run, and best.pt holds the model of the best validation so far.

Kept beside validation, out of the trainer, as Joey NMT and fairseq keep theirs. Its record (the best value, its
step and the validations since) lives in the train state (TrainState.best_value, best_step, bad_validations), so
a checkpoint carries it and --resume continues it exactly.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from seqxduce import checkpoint as ckpt
from seqxduce.training.distributed import World
from seqxduce.training.state import TrainState


def improves(value: float, best: float | None, higher_is_better: bool) -> bool:
    """Whether a validation value beats the best so far (any value beats none; NaN never does)."""
    if best is None:
        return value == value
    return value > best if higher_is_better else value < best


class EarlyStopping:
    """Follows one figure over validations (the task's primary metric, else the valid loss, as Validator.watched
    says); writes best.pt at each improvement when the run has a folder (best_file None: in memory, no file)."""

    def __init__(self, patience: int, best_file: Path | None, run_id: str):
        self.patience, self.best_file, self.run_id = patience, best_file, run_id

    def spent(self, state: TrainState) -> bool:
        """Whether `patience` validations in a row brought no better one (then training stops)."""
        return bool(self.patience) and state.bad_validations >= self.patience

    def record(self, state: TrainState, name: str, value: float, higher_is_better: bool,
               model: torch.nn.Module) -> bool:
        """Take a validation's figure into the record (rank 0): True, and best.pt written, when it beats the best
        so far."""
        if not improves(value, state.best_value, higher_is_better):
            state.bad_validations += 1
            return False
        state.best_value, state.best_step, state.bad_validations = value, state.step, 0
        if self.best_file is not None:
            best = {"model": model.state_dict(), "step": state.step, "metric": name, "value": value,
                    "run_id": self.run_id}
            ckpt.atomic_save(best, self.best_file)
        return True

    def share(self, state: TrainState, world: World) -> None:
        """Every rank takes rank 0's record (all ranks must stop at the same validation)."""
        if world.world_size == 1:
            return
        record = torch.tensor([state.best_value if state.best_value is not None else math.nan,
                               state.best_step, state.bad_validations], dtype=torch.float64)
        record = world.all_reduce_sum(record if world.rank == 0 else torch.zeros_like(record))
        state.best_value = None if torch.isnan(record[0]) else float(record[0])
        state.best_step, state.bad_validations = int(record[1]), int(record[2])

    def stopped_line(self, state: TrainState) -> str:
        """What the run says when it stops early."""
        return (f"early stop at step {state.step}: {self.patience} validations without a better one; the best "
                f"(step {state.best_step}) is in best.pt")

    def ended_line(self, state: TrainState, run_dir: Path) -> str:
        """What a --resume of a run that early stopping ended says."""
        return (f"{run_dir}: early stopping ended the run at step {state.step} (patience = {self.patience}); "
                "nothing to train: raise patience with --set to go on")
