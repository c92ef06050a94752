"""Per-position ponder counts of a trained run: how many depth steps each source position took.

The core knows nothing of ACT: the transformer plugin adds `seqxduce ponder` (commands.py), which loads a run
with the core's seqxduce.decoding.load_run and asks the model itself through its ponder_counts(src) method.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from seqxduce.api import UserError
from seqxduce.data import encode_source, pad_sources
from seqxduce.decoding import LoadedRun


def ponder_counts(run: LoadedRun, sources: Sequence[str], batch_size: int = 64) -> list[list[int]]:
    """Depth steps per encoder position of each source (its tokens, then eos), in input order."""
    model = run.model
    if not hasattr(model, "ponder_counts"):
        raise UserError(f"{run.run_dir}: model [model] name = {run.recipe.model.core.name!r} has no ponder "
                        "counts; train a universal_transformer (act = true for adaptive counts)")
    encoded = [encode_source(run.tokenizers.src, s) for s in sources]
    order = sorted(range(len(sources)), key=lambda i: len(encoded[i]))  # similar lengths waste little padding
    counts: list[list[int]] = [[] for _ in sources]
    model.eval()
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            src = pad_sources([encoded[i] for i in chunk], run.tokenizers.src.pad_id).to(run.device)  # (B, S)
            steps = model.ponder_counts(src).round().long().cpu()  # (B, S), 0 at padding
            for row, i in enumerate(chunk):
                counts[i] = steps[row, : len(encoded[i])].tolist()
    return counts


def format_counts(counts: Sequence[Sequence[int]]) -> list[str]:
    """One line per source: its counts space-separated."""
    return [" ".join(str(n) for n in row) for row in counts]
