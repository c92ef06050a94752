"""Decoded texts compared across batchings (one source alone or with others, a server's batch or decode's): the
batch around a source moves its scores by their last bits (a batch of another shape or padding sums in another
order), so a search may choose otherwise only at a near-tie, two outputs scoring that close. Texts are compared
exactly; one that differs passes only when both outputs score within TIE of each other under the run (scored
together, teacher-forced), which a misrouted or wrong output does not."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from seqxduce import engine

# last-bit differences of float32 log-probs summed over a short output are ~1e-6; 1e-4 is the bound the searches'
# parity check (tests/search_identity.py) allows a score
TIE = 1e-4


def assert_same_texts(run: Path, sources: Sequence[str], expected: Sequence[str], got: Sequence[str],
                      overrides: Sequence[str] = (), tie: float = TIE) -> None:
    """got[i] == expected[i] for each source, unless the two are a near-tie (their normalized scores, the beam's
    score, within tie); overrides: the decode settings both were decoded with (alpha counts in the score); tie:
    wider than TIE only for another engine's kernels, with the reason where it is given."""
    assert len(got) == len(expected) == len(sources), (got, expected)
    differ = [i for i, (want, have) in enumerate(zip(expected, got)) if want != have]
    if not differ:
        return
    scores = engine.score(run, [sources[i] for i in differ] * 2, [expected[i] for i in differ] +
                          [got[i] for i in differ], overrides=overrides)
    for k, i in enumerate(differ):
        want, have = scores[k].normalized, scores[len(differ) + k].normalized
        assert abs(want - have) < tie, (f"source {i} {sources[i]!r}: {got[i]!r} (score {have:.6f}) instead of "
                                        f"{expected[i]!r} (score {want:.6f}), not a near-tie")
