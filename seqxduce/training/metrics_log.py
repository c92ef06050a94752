"""The run's figures appended to metrics.jsonl, one JSON object per line, and mirrored to TensorBoard if asked."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from seqxduce.api import UserError


class MetricsLog:
    """Appends one JSON object per line, and mirrors the figures to TensorBoard when given a folder; rank 0 only."""

    def __init__(self, path: Path | None, tensorboard: Path | None = None):
        self.path = Path(path) if path else None
        self.board = None
        if tensorboard is not None:
            from seqxduce.training.tensorboard_log import TensorBoardLog

            self.board = TensorBoardLog(tensorboard)

    def write(self, kind: str, **figures: Any) -> None:
        if self.path is None:
            return
        record = {"kind": kind, "time": round(time.time(), 3), **{k: _plain(v) for k, v in figures.items()}}
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        except OSError as err:
            raise UserError(f"{self.path}: cannot append the metrics ({err.strerror or err}); free disk space "
                            "and continue with --resume") from None
        if self.board is not None:
            self.board.write(kind, record)

    def close(self) -> None:
        """Close the TensorBoard writer, if any (the JSONL file is opened per record)."""
        if self.board is not None:
            self.board.close()


def _plain(value: Any) -> Any:
    # JSON has no inf or nan: written as strings, so that a diverged run's log still parses
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
