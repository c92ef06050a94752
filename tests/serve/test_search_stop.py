"""What the server relies on in the searches (issue 37): a stop check between steps, and a length-penalty table
that follows the steps taken, not the length limit asked for."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from seqxduce.decoding.search import SearchStopped, _Penalties, beam_search, greedy_search, length_penalty, stop_when
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.testing import EOS, TableModel
from seqxduce.testing import table_request as request

A = 3


def endless_model() -> TableModel:
    """eos is never wanted: a search ends only at its length limit."""
    probs = torch.full((1, 5, 5), 1e-9)
    probs[0, :, A] = 1.0
    probs[0, :, EOS] = 1e-6
    return TableModel(probs.log())


def steps_then_stop(steps: int) -> tuple[list[int], Callable[[], bool]]:
    calls = [0]

    def check() -> bool:
        calls[0] += 1
        return calls[0] > steps

    return calls, check


@pytest.mark.parametrize("search, settings", [
    (greedy_search, SearchSettings(max_len_a=0, max_len_b=1_000_000)),
    (beam_search, BeamSettings(beam=4, alpha=0.6, max_len_a=0, max_len_b=1_000_000, min_len=1_000_000)),
])
def test_a_search_asked_to_stop_ends_at_its_next_step(search, settings):
    calls, check = steps_then_stop(25)
    with stop_when(check), pytest.raises(SearchStopped):
        search(endless_model(), request([3, 2]), settings)
    assert calls[0] == 26  # checked once per step, and stopped at the first step after it said so
    # outside the block nothing checks: a short search ends as always
    assert len(search(endless_model(), request([3]), type(settings)(max_len_a=0, max_len_b=4))[0][0].tokens) == 4


def test_the_penalty_table_grows_with_the_steps_taken_and_holds_the_same_doubles():
    penalties = _Penalties(request([3]), 1.0, 1_000_000, 0.6)
    assert penalties.at(5).item() == length_penalty(5, 0.6)
    assert penalties.table.numel() == _Penalties.FIRST  # not a million values for a search of a few steps
    for n in range(201):  # as a search asks: one length more per step; the table doubles
        assert penalties.at(n).item() == length_penalty(n, 0.6)
    assert penalties.table.numel() == 256
    assert penalties.table.tolist() == [length_penalty(n, 0.6) for n in range(256)]
    short = _Penalties(request([3]), 1.0, 2, 0.6)  # never longer than the longest length the limit allows, + 3
    assert short.at(7).item() == length_penalty(7, 0.6) and short.table.numel() == 1 + 3 + 2 + 3
