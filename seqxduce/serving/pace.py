"""How long a request will take to decode on this machine, so that what the server admits finishes within its
deadline: the pace of the engine's search, measured at start-up by decoding probe batches of forced length, and a
request's time estimated from it before it is queued.

A search step's time grows with the rows searched (sources x beam) and with the output position (the cached
self-attention reads every earlier position), so three probes are decoded: one source for a short and a long
output, and several sources for the short one. A batch of `rows` rows decoding `steps` steps is then estimated at
(fixed + per_row x rows) x (steps + growth x steps^2 / 2) seconds. The estimate is a model of a measurement, not a
promise: the server admits a request only within --admit-share of its deadline, and a request that still runs past
the deadline gets its 504 and its batch stops, as before. No torch, no starlette here: the probe decodes through
the function it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from seqxduce.serving.limits import Limits, RequestError

# the probes' forced output lengths (steps): long enough to see a step grow, short enough to start fast
SHORT, LONG = 8, 32
MAX_GROWTH = 1.0  # a step twice as slow per position: what a long probe past (LONG/SHORT)^2 the short one is taken as
WIDE_SOURCES = 8  # sources in the wide probe (fewer when the server's batch limits take fewer)

# decode(sources, steps): decode a batch of sources with every output forced to exactly `steps` tokens
Probe = Callable[[Sequence[str], int], None]


@dataclass(frozen=True)
class Pace:
    """The seconds a batch step takes: (fixed + per_row x rows) at the first output position, growing by `growth`
    of that per position further (the attention over the outputs so far)."""

    fixed: float
    per_row: float
    growth: float
    rows_probed: int  # rows of the narrow probe: per_row is measured from it to the wide one

    def batch_seconds(self, rows: int, steps: int) -> float:
        """A batch of `rows` hypotheses decoding `steps` steps."""
        return (self.fixed + self.per_row * rows) * (steps + self.growth * steps * steps / 2)

    def request_seconds(self, tokens: Sequence[int], longest: Sequence[int], rows: int, max_batch_tokens: int,
                        max_batch_sources: int) -> float:
        """A request's sources (tokens: each one's length; longest: each one's output limit in steps) packed in
        order into batches as the batcher packs them (padded source tokens and sources per batch), each batch as
        long as its longest output."""
        total, batch_rows, batch_steps, batch_longest, count = 0.0, 0, 0, 0, 0
        for n, steps in zip(tokens, longest):
            grown = max(batch_longest, n)
            if count and (grown * (count + 1) > max_batch_tokens or count >= max_batch_sources):
                total += self.batch_seconds(batch_rows, batch_steps)
                batch_rows, batch_steps, grown, count = 0, 0, n, 0
            batch_rows, batch_steps, batch_longest, count = batch_rows + rows, max(batch_steps, steps), grown, count + 1
        return total + (self.batch_seconds(batch_rows, batch_steps) if count else 0.0)

    def described(self) -> str:
        """The log line's account of it."""
        return (f"{1000 * self.fixed:.2f} ms a step + {1000 * self.per_row:.3f} ms a row, {100 * self.growth:.2f}% "
                "more a step per output position")


def measure(probe: Probe, source: str, rows: int, wide_sources: int, repeat: int = 2,
            clock: Callable[[], float] = time.perf_counter) -> Pace:
    """The pace of `probe`'s search: `source` (a probe sentence) decoded alone for SHORT and LONG steps and as
    `wide_sources` copies for SHORT steps, each the fastest of `repeat` runs (after one warm-up) so that a moment
    of contention does not inflate it. rows: hypotheses per source of the search probed (its beam); clock: the
    tests' own."""
    probe([source], 2)  # warm-up: the first call allocates what later ones reuse

    def fastest(sources: list[str], steps: int) -> float:
        times = []
        for _ in range(repeat):
            start = clock()
            probe(sources, steps)
            times.append(clock() - start)
        return min(times)

    short, long = fastest([source], SHORT), fastest([source], LONG)
    wide = fastest([source] * wide_sources, SHORT) if wide_sources > 1 else short
    # short = s (SHORT + g SHORT^2 / 2), long = s (LONG + g LONG^2 / 2): solved for s (seconds a step at the first
    # position, at `rows` rows) and g; g is kept >= 0 (a faster long probe is noise, not a shrinking step)
    ratio = long / max(short, 1e-9)
    room = LONG * LONG - ratio * SHORT * SHORT  # <= 0 only when the long probe took (LONG/SHORT)^2 the short one
    growth = max(0.0, 2 * (ratio * SHORT - LONG) / room) if room > 0 else MAX_GROWTH
    span = SHORT + growth * SHORT * SHORT / 2
    step, wide_step = short / span, wide / span
    extra_rows = rows * (wide_sources - 1)
    per_row = max(0.0, (wide_step - step) / extra_rows) if extra_rows else 0.0
    return Pace(fixed=max(step - per_row * rows, 0.0), per_row=per_row, growth=growth, rows_probed=rows)


def check_time(seconds: float, limits: Limits) -> None:
    """413 when a request's estimated decode time is more than --admit-share of --max-request-seconds: admitted,
    it would hold the worker to its deadline and end in a 504."""
    allowed = limits.admit_share * limits.max_request_seconds
    if seconds > allowed:
        raise RequestError(413, f"inputs: an estimated {seconds:.1f} s to decode on this server (its start-up "
                                f"probe's pace), more than --admit-share {limits.admit_share:g} of its "
                                f"--max-request-seconds {limits.max_request_seconds:g} ({allowed:.1f} s); send "
                                "fewer sources, a smaller beam or shorter outputs")
