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


def test_batches_start_fairly_between_clients():
    # client A queues three requests behind a batch of its own that holds the worker; client B then asks once:
    # B's request is decoded next, before A's backlog, and a new client's wait is the running batch's
    release, started = threading.Event(), threading.Event()
    order: list = []

    def decode(sources, key, stop=None):
        started.set()
        release.wait(10)
        order.extend(sources)
        return list(sources)

    batcher = Batcher(decode, max_queue=10, max_batch_tokens=100, max_batch_sources=1, max_wait_s=0.0)

    async def main():
        batcher.start()
        try:
            running = batcher.submit(["a0"], [1], "k", client="A")
            while not started.is_set():
                await asyncio.sleep(0.01)
            backlog = [batcher.submit([f"a{i}"], [1], "k", client="A") for i in (1, 2, 3)]
            b = batcher.submit(["b1"], [1], "k", client="B")
            release.set()
            return await asyncio.gather(running, b, *backlog)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    assert run(main()) == [["a0"], ["b1"], ["a1"], ["a2"], ["a3"]]
    assert order == ["a0", "b1", "a1", "a2", "a3"]


def test_a_client_waiting_for_each_answer_goes_before_another_clients_backlog():
    # B asks again only once answered: it has nothing queued then, so it counts as never served and goes before
    # A's backlog; each batch waits for a permit of the test's, so the order is the batcher's choice alone
    permits, starts = threading.Semaphore(0), []
    order: list = []

    def decode(sources, key, stop=None):
        starts.append(sources[0])
        permits.acquire(timeout=10)
        order.extend(sources)
        return list(sources)

    batcher = Batcher(decode, max_queue=10, max_batch_tokens=100, max_batch_sources=1, max_wait_s=0.0)

    async def started(count: int) -> None:
        while len(starts) < count:
            await asyncio.sleep(0.01)

    async def main():
        batcher.start()
        try:
            backlog = [batcher.submit([f"a{i}"], [1], "k", client="A") for i in range(4)]
            await started(1)
            first = batcher.submit(["b1"], [1], "k", client="B")
            permits.release()  # a0 ends: b1 starts
            await started(2)
            permits.release()  # b1 ends: a1 starts
            await first
            await started(3)
            second = batcher.submit(["b2"], [1], "k", client="B")
            for _ in range(4):
                permits.release()
            await asyncio.gather(second, *backlog)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    run(main())
    assert order == ["a0", "b1", "a1", "b2", "a2", "a3"]


def test_a_new_clients_wait_is_the_running_batchs_not_another_clients_backlog():
    release, started = threading.Event(), threading.Event()

    def decode(sources, key, stop=None):
        started.set()
        release.wait(10)
        return list(sources)

    batcher = Batcher(decode, max_queue=10, max_batch_tokens=100, max_batch_sources=1, max_wait_s=0.0)

    async def main():
        batcher.start()
        try:
            futures = [batcher.submit([f"a{i}"], [1], "k", client="A") for i in range(3)]
            while not started.is_set():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            # A's backlog has waited as long as its running batch: a new client waits for that batch alone
            running = batcher.new_client_wait()
            assert batcher.oldest_wait() >= 0.2 and running >= 0.2
            c = batcher.submit(["c"], [1], "k", client="C")  # C has not been served: its own wait counts too
            assert batcher.new_client_wait() >= running
            release.set()
            await asyncio.gather(*futures, c)
            assert batcher.new_client_wait() == 0.0
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    run(main())


def test_the_shutdown_grace_runs_once_from_the_signal():
    """The grace starts at the first request to abort (the signal handler's) and every stage of the shutdown gets
    what is left of it: the lifespan's wait for the worker is given the grace less what the connections took."""
    pytest.importorskip("starlette", reason="the serve extra is not installed (pip install -e '.[serve]')")
    from types import SimpleNamespace

    from seqxduce.serving.app import create_app

    given: list = []

    class Recording(Batcher):
        def stop(self, timeout=None):
            given.append(timeout)
            super().stop(timeout)

    batcher = Recording(lambda sources, key, stop: list(sources), max_queue=10, max_batch_tokens=10,
                        max_batch_sources=8, max_wait_s=0.0)
    assert batcher.grace_left(10.0) == 10.0  # no signal yet: all of it
    app = create_app(SimpleNamespace(decode_keys=dict), batcher, Limits(shutdown_grace_seconds=10.0), {})
    router = app.app.router  # Guard over Starlette

    async def main():
        async with router.lifespan_context(app.app):
            batcher.request_abort()  # the signal
            first = batcher.abort_requested_at
            batcher.abort_requested_at = first - 4.0  # as if the connections took 4 s of the grace
            batcher.request_abort()  # a later request to abort does not start it again
            assert batcher.abort_requested_at == first - 4.0
    run(main())
    assert len(given) == 1 and 0.0 <= given[0] <= 6.0, given  # the 6 s left of 10, not 10 again
    batcher.abort_requested_at -= 100.0
    assert batcher.grace_left(10.0) == 0.0  # past the grace: nothing more is waited for


def test_a_source_whose_output_may_pass_the_output_limit_is_refused_saying_which_limit_and_how_to_raise_it():
    """A 1,024-token source with the recipe's max_len_a 1 and max_len_b 50 may need 1,073 output tokens: refused
    naming --max-output-tokens, the settings and where they came from, the longest source they take, and the
    ways out (#81)."""
    from seqxduce.serving.limits import Lengths, check_cost

    limits = Limits(max_source_tokens=1024, max_output_tokens=1024)
    lengths = Lengths(max_len_a=1.0, max_len_b=50, min_len=1, rows=4, rows_key="beam")
    with pytest.raises(RequestError) as refused:
        check_cost(lengths, [1024], {}, limits)
    message = refused.value.message
    assert refused.value.status == 422 and message.startswith("inputs[0]: outputs may reach 1073 tokens"), message
    for part in ("max_len_a 1 x 1023 source tokens + max_len_b 50, the recipe's", "--max-output-tokens 1024",
                 "sources of at most 974 tokens", "a lower max_len_a or max_len_b", "a larger --max-output-tokens"):
        assert part in message, message
    assert check_cost(lengths, [975], {}, limits).longest == [1024]  # the longest source they take: served
    with pytest.raises(RequestError) as refused:
        check_cost(Lengths(2.0, 50, 1, 4, "beam"), [1024], {"max_len_a": 2.0}, limits)
    assert refused.value.message.startswith("max_len_a:") and "max_len_a as sent" in refused.value.message
