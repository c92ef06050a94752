"""A target prefix (DecodeRequest.prefixes) starts every output of greedy and beam search, which then search
freely; its tokens count in the output's log-probability but not in its score (what follows the prefix is ranked,
its length penalised), and the length limit leaves room for it."""

from __future__ import annotations

import pytest
import torch

from seqxduce.search import beam_search, greedy_search, length_penalty
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


@pytest.mark.parametrize("form", ["gnmt", "power"])
def test_the_score_counts_only_what_follows_the_prefix(form: str) -> None:
    request = table_request([3, 5])
    request.prefixes = [[7, 9], [11]]
    settings = BeamSettings(beam=3, max_len_b=6, alpha=1.0, length_penalty=form, nbest=3)
    for hyps, prefix in zip(beam_search(_model(), request, settings), request.prefixes):
        for hyp in hyps:
            after = hyp.positional_logprobs[len(prefix):]  # the tokens after the prefix and eos
            assert hyp.score == pytest.approx(sum(after) / length_penalty(len(after), 1.0, form), abs=1e-5)
            assert hyp.logprob == pytest.approx(sum(hyp.positional_logprobs), abs=1e-5)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_an_unlikely_prefix_does_not_lengthen_the_output() -> None:
    """The prefix's cost is the same for every hypothesis, so it changes no ranking: the continuation chosen after
    a forced token is the one chosen when the search reaches that token at no cost (the same table row)."""
    table = torch.full((12, 12, 12), -4.0)
    table[1:, :, 2] = -0.5  # eos likely after the first token
    table[0, 1, 7] = -30.0  # the prefix's token is very unlikely after bos
    table[0, 1, 8] = -0.1
    request = table_request([3])
    request.prefixes = [[7]]
    hyp = beam_search(TableModel(table), request, BeamSettings(beam=3, max_len_b=8, alpha=1.0,
                                                              length_penalty="power"))[0][0]
    assert hyp.tokens == [7]
