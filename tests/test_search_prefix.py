"""A target prefix (DecodeRequest.prefixes) starts every output of greedy and beam search, which then search
freely; its tokens count in the output's log-probability, and the length limit leaves room for it."""

from __future__ import annotations

import pytest
import torch

from seqxduce.search import beam_search, greedy_search
from seqxduce.search_settings import BeamSettings, SearchSettings
from seqxduce.testing import TableModel, table_request


def _model() -> TableModel:
    """Next-token scores by (position, last token), with eos (2) unlikely early: outputs several tokens long."""
    table = torch.randn(12, 12, 12, generator=torch.Generator().manual_seed(3)) * 2.0
    table[:4, :, 2] -= 6.0
    return TableModel(table)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_outputs_start_with_their_prefix_and_rows_without_one_are_unchanged(search: str) -> None:
    model = _model()
    plain = table_request([3, 5, 4])
    forced = table_request([3, 5, 4])
    forced.prefixes = [[7, 7, 9], [], [11]]

    def run(request):
        if search == "greedy":
            return greedy_search(model, request, SearchSettings(max_len_b=6))
        return beam_search(model, request, BeamSettings(beam=3, max_len_b=6))

    free, pinned = run(plain), run(forced)
    assert pinned[0][0].tokens[:3] == [7, 7, 9] and pinned[2][0].tokens[:1] == [11]
    assert pinned[1][0].tokens == free[1][0].tokens  # an empty prefix changes nothing
    hyp = pinned[0][0]
    assert len(hyp.positional_logprobs) == len(hyp.tokens) + 1
    assert abs(sum(hyp.positional_logprobs) - hyp.logprob) < 1e-5


def test_a_prefix_longer_than_the_length_limit_is_kept_whole() -> None:
    request = table_request([2])
    request.prefixes = [[5, 6, 7, 8, 9]]
    hyps = beam_search(_model(), request, BeamSettings(beam=2, max_len_a=0.0, max_len_b=2))
    assert hyps[0][0].tokens == [5, 6, 7, 8, 9]
