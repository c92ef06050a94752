"""TensorBoard event files beside metrics.jsonl, when a recipe sets [train] tensorboard = true.

The tensorboard package is an optional extra; asking for it without it installed fails before training starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqxduce.api import UserError

TENSORBOARD_DIR = "tensorboard"
NOT_FIGURES = {"step", "epoch", "time"}


def summary_writer_class() -> Any:
    """torch's SummaryWriter, or one UserError saying how to get it (checked before a run folder is touched)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError("[train] tensorboard = true needs the tensorboard package: pip install -e "
                        "'.[tensorboard]' in the seqxduce checkout, or set tensorboard = false") from None
    return SummaryWriter


class TensorBoardLog:
    """Writes each metrics record's numbers as scalars named kind/figure (train/loss, valid/valid_bleu)."""

    def __init__(self, directory: Path):
        SummaryWriter = summary_writer_class()
        self.directory = Path(directory)
        self.writer = SummaryWriter(log_dir=str(self.directory))

    def write(self, kind: str, record: dict[str, Any]) -> None:
        """Add one record's figures at its step and wall time, and flush so that a live TensorBoard sees them."""
        step, walltime = record.get("step"), record.get("time")
        for name, value in record.items():
            if name in NOT_FIGURES or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            self.writer.add_scalar(f"{kind}/{name}", value, global_step=step, walltime=walltime)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
