"""The batcher alone (no model, no HTTP): batches form by settings and token budget, outputs go back in order."""

from __future__ import annotations

import asyncio
import threading

import pytest

from seqxduce.serving.batching import Batcher, QueueFull
from seqxduce.serving.limits import Limits, RequestError, parse_decode, parse_json


def run(coroutine):
    return asyncio.run(coroutine)


def recording_batcher(**options) -> tuple[Batcher, list]:
    batches: list = []

    def decode(sources, key, stop=None):
        batches.append((key, list(sources)))
        return [f"{key}:{s}" for s in sources]

    settings = {"max_queue": 100, "max_batch_tokens": 12, "max_batch_sources": 64, "max_wait_s": 0.2} | options
    return Batcher(decode, **settings), batches


def test_concurrent_requests_share_batches_by_settings_within_the_token_budget():
    batcher, batches = recording_batcher()

    async def main():
        batcher.start()
        try:
            futures = [batcher.submit(["a", "b"], [3, 3], "k1"), batcher.submit(["c"], [3], "k2"),
                       batcher.submit(["d", "e"], [3, 3], "k1")]
            return await asyncio.gather(*futures)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    answers = run(main())
    assert answers == [["k1:a", "k1:b"], ["k2:c"], ["k1:d", "k1:e"]]
    # 4 sources of 3 tokens fill the 12-token budget of k1's batch; k2's waits for its own
    assert batches == [("k1", ["a", "b", "d", "e"]), ("k2", ["c"])]


def test_a_long_source_goes_alone_and_a_full_queue_refuses():
    batcher, batches = recording_batcher(max_queue=3, max_wait_s=0.0)

    async def main():
        first = batcher.submit(["long", "x"], [10, 3], "k")  # 2 * 10 padded tokens > 12: two batches
        with pytest.raises(QueueFull):
            batcher.submit(["y", "z"], [1, 1], "k")
        batcher.start()
        try:
            return await first
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    assert run(main()) == ["k:long", "k:x"]
    assert batches == [("k", ["long"]), ("k", ["x"])]


def test_an_error_for_one_source_fails_its_request_only():
    def decode(sources, key, stop=None):
        return [RequestError(422, "inputs: bad") if s == "bad" else s.upper() for s in sources]

    batcher = Batcher(decode, max_queue=10, max_batch_tokens=100, max_batch_sources=64, max_wait_s=0.05)

    async def main():
        batcher.start()
        try:
            bad = batcher.submit(["ok", "bad"], [1, 1], None)
            good = batcher.submit(["fine"], [1], None)
            with pytest.raises(RequestError, match="inputs: bad"):
                await bad
            return await good
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    assert run(main()) == ["FINE"]


def test_a_cancelled_request_leaves_the_queue_undecoded():
    release = threading.Event()
    decoded: list = []

    def decode(sources, key, stop=None):
        release.wait(10)
        decoded.extend(sources)
        return list(sources)

    batcher = Batcher(decode, max_queue=10, max_batch_tokens=1, max_batch_sources=1, max_wait_s=0.0)

    async def main():
        batcher.start()
        try:
            first = batcher.submit(["first"], [1], None)
            while batcher.counters.decoding == 0:
                await asyncio.sleep(0.01)
            gone = batcher.submit(["gone"], [1], None)
            batcher.cancel(gone)
            release.set()
            return await first
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    assert run(main()) == ["first"]
    assert decoded == ["first"] and batcher.counters.dropped == 1


def test_request_checks_name_the_field():
    limits = Limits(max_inputs=2)
    keys = {"beam": 4, "alpha": 0.6, "early_stop": False}
    assert parse_decode({"inputs": ["a"], "alpha": 1}, limits, keys, 1).changes == {"alpha": 1.0}
    for body, message in [({"inputs": ["a"], "early_stop": 1}, "early_stop: a boolean expected"),
                          ({"inputs": ["a", "b", "c"]}, "inputs: 3 sentences"),
                          ({"inputs": ["a"], "nbest": 99}, "nbest: 99 is out of range")]:
        with pytest.raises(RequestError, match=message):
            parse_decode(body, limits, keys, 1)
    with pytest.raises(RequestError, match="body: not JSON"):
        parse_json(b"{")
