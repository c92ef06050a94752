"""The host's lower bound of the length limits, which lets a search skip the (N, V) length mask before any row
can be at its limit; and that skipping it changes no output."""

from __future__ import annotations

import pytest
import torch

from seqxduce.api import DecodeRequest
from seqxduce.decoding.search import beam_search, greedy_search, max_lengths, shortest_limit
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.testing import BOS, EOS, TableModel
from seqxduce.testing import table_request as request

PAD = 0


def padded(lengths: list[int], width: int) -> DecodeRequest:
    """Sources of these lengths (eos not counted) right-padded to `width` + 1 columns."""
    src = torch.full((len(lengths), width + 1), PAD, dtype=torch.long)
    for row, n in enumerate(lengths):
        src[row, :n] = 5
        src[row, n] = EOS
    return DecodeRequest(src, [""] * len(lengths), BOS, EOS, PAD)


@pytest.mark.parametrize("a", [0.0, 0.1, 0.7, 1.0, 1.3, 2.0, -0.5, -0.3])
@pytest.mark.parametrize("b", [0, 1, 3, 50])
def test_shortest_limit_is_a_lower_bound_of_every_rows_limit(a, b):
    lengths = [0, 1, 2, 3, 7, 9, 10, 13, 29]
    req = padded(lengths, max(lengths))
    limits = max_lengths(req, a, b)
    assert shortest_limit(req, a, b) <= int(limits.min())
    if a >= 0:  # and tight where a source is empty
        assert shortest_limit(req, a, b) == int(limits.min())


@pytest.mark.parametrize("settings", [
    BeamSettings(beam=3, alpha=0.6, max_len_a=1.0, max_len_b=2, nbest=2),
    BeamSettings(beam=2, alpha=0.0, max_len_a=0.5, max_len_b=1, min_len=1),
    SearchSettings(max_len_a=1.5, max_len_b=1),
])
def test_rows_still_stop_at_their_own_limits(settings):
    """Sources of different lengths: each output ends at its own limit, found from the same length rule."""
    table = torch.randn(12, 9, 9)
    table[:, :, EOS] = -30.0  # eos only when forced
    model = TableModel(table)
    req = request([3, 5, 1, 7, 2])
    search = beam_search if isinstance(settings, BeamSettings) else greedy_search
    hyps = search(model, req, settings)
    limits = max_lengths(req, settings.max_len_a, settings.max_len_b).tolist()
    assert [len(h[0].tokens) for h in hyps] == limits
