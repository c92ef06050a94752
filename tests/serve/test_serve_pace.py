"""A request's decode time, estimated from the pace measured at start-up: the measurement recovers a search whose
step time is known (a fake probe on a fake clock), a request's sources are packed into batches as the batcher packs
them, and a request estimated past --admit-share of the deadline is refused 413 before it is queued."""

from __future__ import annotations

import pytest

from seqxduce.serving.limits import Limits, RequestError
from seqxduce.serving.pace import Pace, check_time, measure

KNOWN = Pace(fixed=0.004, per_row=0.0005, growth=0.01, rows_probed=4)


class FakeSearch:
    """A probe whose batches take exactly what KNOWN says, on a clock of its own."""

    def __init__(self, pace: Pace, rows: int):
        self.now, self.pace, self.rows, self.calls = 0.0, pace, rows, []

    def clock(self) -> float:
        return self.now

    def probe(self, sources: list[str], steps: int) -> None:
        self.calls.append((len(sources), steps))
        self.now += self.pace.batch_seconds(self.rows * len(sources), steps)


def test_the_probe_recovers_a_known_pace():
    search = FakeSearch(KNOWN, rows=4)
    found = measure(search.probe, "a a a", rows=4, wide_sources=8, clock=search.clock)
    assert found.fixed == pytest.approx(KNOWN.fixed, rel=1e-6)
    assert found.per_row == pytest.approx(KNOWN.per_row, rel=1e-6)
    assert found.growth == pytest.approx(KNOWN.growth, rel=1e-6)
    assert search.calls[0] == (1, 2), "a warm-up first"
    assert {sources for sources, _ in search.calls} == {1, 8}


def test_a_long_probe_faster_than_the_short_one_is_noise_not_a_shrinking_step():
    search = FakeSearch(Pace(fixed=0.004, per_row=0.0, growth=0.0, rows_probed=1), rows=1)
    real = search.probe

    def noisy(sources, steps):  # the long probe ran in a quiet moment
        real(sources, steps)
        if steps == 32:
            search.now -= 0.05
    found = measure(noisy, "a", rows=1, wide_sources=1, clock=search.clock)
    assert found.growth == 0.0 and found.per_row == 0.0 and found.fixed > 0


def test_a_requests_sources_are_estimated_in_the_batches_the_batcher_packs():
    pace = Pace(fixed=0.01, per_row=0.001, growth=0.0, rows_probed=1)
    # three sources of 10 tokens, beam 2, outputs of 20, 30 and 40 steps; batches of at most 20 padded tokens:
    # [10, 10] (rows 4, 30 steps) then [10] (rows 2, 40 steps)
    seconds = pace.request_seconds([10, 10, 10], [20, 30, 40], rows=2, max_batch_tokens=20, max_batch_sources=64)
    assert seconds == pytest.approx(pace.batch_seconds(4, 30) + pace.batch_seconds(2, 40))
    # one batch when the limits take them all; at most 1 source a batch: three batches
    assert pace.request_seconds([10] * 3, [20, 30, 40], 2, 1000, 64) == pytest.approx(pace.batch_seconds(6, 40))
    assert pace.request_seconds([10] * 3, [20, 30, 40], 2, 1000, 1) == pytest.approx(
        sum(pace.batch_seconds(2, s) for s in (20, 30, 40)))


def test_a_request_estimated_past_the_share_of_its_deadline_is_refused_413():
    limits = Limits(max_request_seconds=60.0, admit_share=0.5)
    check_time(29.9, limits)
    with pytest.raises(RequestError) as refused:
        check_time(45.0, limits)
    assert refused.value.status == 413
    assert "estimated 45.0 s" in refused.value.message and "--admit-share 0.5" in refused.value.message
