"""The HTTP routes (Starlette): /v1/decode, /v1/attention, /health, /ready, /v1/info and the page at /.

Every client mistake is a RequestError, answered as a 4xx with {"error": "..."} naming the field, in one line of
ASCII JSON; a full queue, a request queued past its deadline and a server that is stopping answer 503 with
Retry-After, a request decoded past its deadline 504. A request whose client goes away, or whose deadline passes,
leaves the queue, and a batch nobody waits for any more stops at its next step. No client's mistake reaches the
catch-all 500, which logs one traceback for a bug of ours.

`Guard` wraps the application: the number of headers, the Host check, Content-Type on POST and strict framing,
before any route runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from seqxduce.serving.batching import Batcher, Dropped, QueueFull
from seqxduce.serving.connections import MAX_HEAD_BYTES, MAX_HEADERS, TOO_LONG_HEAD
from seqxduce.serving.limits import (
    Limits,
    Prefixed,
    RequestError,
    check_cost,
    check_source,
    parse_decode,
    parse_json,
    shown,
    source_text,
)
from seqxduce.serving.pace import Pace, check_time
from seqxduce.serving.service import Service

log = logging.getLogger("seqxduce.serve")
RETRY_AFTER_S = 1
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
STOPPING = "stopping: the server is shutting down; retry on another"


def error(status: int, message: str, headers: dict[str, str] | None = None, close: bool = False) -> Response:
    """The one shape of every error answer: {"error": "..."} in one line of ASCII (whatever a client sent, the
    answer encodes); close: the connection ends after it (the request's body may be unread)."""
    headers = dict(headers or {})
    if close:
        headers["Connection"] = "close"  # h11 then closes once the answer is sent, unread body and all
    body = json.dumps({"error": message}, ensure_ascii=True, separators=(",", ":"))
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def busy(message: str) -> RequestError:
    return RequestError(503, f"{message}; retry after {RETRY_AFTER_S} s", headers={"Retry-After": str(RETRY_AFTER_S)})


async def read_body(request: Request, limits: Limits) -> bytes:
    """The request body, refused (413, connection closed) as soon as it passes --max-request-bytes, whatever
    Content-Length says, and (408, closed) when it has not all arrived within --read-timeout-seconds."""
    limit = limits.max_request_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"body: {declared} bytes, more than this server's --max-request-bytes {limit}",
                           close=True)
    chunks: list[bytes] = []

    async def read() -> None:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"body: more than this server's --max-request-bytes {limit}", close=True)
            chunks.append(chunk)

    try:  # wait_for, not asyncio.timeout: Python 3.10 is supported
        await asyncio.wait_for(read(), limits.read_timeout_seconds)
    except asyncio.TimeoutError:
        raise RequestError(408, f"body: {sum(map(len, chunks))} bytes received in this server's "
                                f"--read-timeout-seconds {limits.read_timeout_seconds:g}; send the request at once",
                           close=True) from None
    return b"".join(chunks)


async def until_answered(request: Request, batcher: Batcher, future: asyncio.Future, deadline: float,
                         limits: Limits) -> Any:
    """The future's result; None if the client disconnects first. Past the deadline the request leaves the
    queue (503: it was never decoded) or its batch (504: it was being decoded); either way the batch stops at its
    next step once nobody of it waits."""
    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({future, watch}, timeout=max(0.0, deadline - time.monotonic()),
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if future.done():
        return future.result()
    started = future.job.started  # type: ignore[attr-defined]
    batcher.cancel(future)
    if watch.done() and not watch.cancelled():
        log.info("a client went away: its request left the queue")
        return None
    flag = f"this server's --max-request-seconds {limits.max_request_seconds:g}"
    if started:
        raise RequestError(504, f"deadline: not decoded within {flag}; ask for less (fewer sources, a smaller beam, "
                                "shorter outputs)")
    raise busy(f"busy: queued past {flag}")


def client_of(request: Request) -> str | None:
    """Who asks, for fairness between clients: the peer's address (a trusted proxy's X-Forwarded-For, with
    --forwarded-allow-ips)."""
    return request.client.host if request.client else None


def handler(function: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Turns RequestError, QueueFull and Dropped into their answers, a client that left into one log line, and
    anything else into a 500 with one traceback in the log."""
    async def handle(request: Request) -> Response:
        try:
            return await function(request)
        except RequestError as err:
            return error(err.status, err.message, err.headers, close=err.close)
        except QueueFull as err:
            return error(503, f"busy: {err}; retry after {RETRY_AFTER_S} s",
                         headers={"Retry-After": str(RETRY_AFTER_S)})
        except Dropped:
            return error(503, STOPPING, headers={"Retry-After": str(RETRY_AFTER_S)}, close=True)
        except ClientDisconnect:
            log.info("a client went away while sending %s %s", request.method, request.url.path)
            return Response(status_code=499)  # nobody reads it
        except Exception:  # a bug of ours: one traceback, here (Starlette's handler would log a second)
            log.exception("internal error on %s %s", request.method, request.url.path)
            return error(500, "internal error; the server log has the traceback")
    return handle


class Guard:
    """ASGI middleware checking what no route should see: at most MAX_HEADERS headers (431), a Host header among
    --allowed-hosts (a web page cannot reach a developer's local server through DNS rebinding), Content-Type:
    application/json on POST (a cross-site form or `simple` fetch cannot POST), and Content-Length together with
    Transfer-Encoding (h11 reads the body as chunked; a proxy in front may read it by its length: refused rather
    than guessed). Each refusal is one JSON line, and the connection closes. Starlette's TrustedHostMiddleware
    answers in plain text and checks none of the others, hence this.

    After SIGTERM's grace uvicorn cancels the requests still running (a client still sending its body): that is
    answered 503 and logged in one line here, instead of a traceback per request."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str], batcher: Batcher):
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.hosts = {h.lower().strip("[]") for h in allowed_hosts if not h.startswith("*")}
        self.suffixes = tuple(h.lower()[1:] for h in allowed_hosts if h.startswith("*."))
        self.batcher = batcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if not self.batcher.aborting:
                raise
            log.info("cut %s %s after the shutdown grace", scope["method"], scope["path"])
            with contextlib.suppress(Exception):  # the answer may have begun: then the connection just ends
                await error(503, STOPPING, close=True)(scope, receive, send)

    def refusal(self, scope: Scope) -> Response | None:
        """The answer to a request refused before routing, or None."""
        if len(scope["headers"]) > MAX_HEADERS:
            return error(431, f"headers: {len(scope['headers'])} in one request, more than this server's "
                              f"{MAX_HEADERS}; send fewer", close=True)
        # a head that came in pieces is refused past MAX_HEAD_BYTES by h11 (connections.py); one read at once is
        # parsed whole, and measured here (its request line and header lines, as sent)
        head = len(scope["method"]) + len(scope["raw_path"]) + len(scope["query_string"]) + 12 + sum(
            len(name) + len(value) + 4 for name, value in scope["headers"])
        if head > MAX_HEAD_BYTES:
            return error(431, TOO_LONG_HEAD, close=True)
        headers: dict[bytes, list[bytes]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, []).append(value)
        host = b",".join(headers.get(b"host", [])).decode("latin-1")
        if not self.host_allowed(host):
            return error(400, f"Host: {shown(host) or 'missing'} is not a name this server answers to; start it "
                              "with --allowed-hosts NAME (the name clients use)", close=True)
        if scope["method"] == "POST":
            if b"content-length" in headers and b"transfer-encoding" in headers:
                return error(400, "Transfer-Encoding: sent with Content-Length; send one of them", close=True)
            kind = b",".join(headers.get(b"content-type", [])).decode("latin-1")
            if kind.split(";")[0].strip().lower() != "application/json":
                return error(415, f"Content-Type: {shown(kind) or 'missing'}; send application/json", close=True)
        return None

    def host_allowed(self, host: str) -> bool:
        if self.any_host:
            return True
        name = host.lower()
        if name.startswith("["):  # [::1]:8000
            name = name[1:name.find("]")] if "]" in name else ""
        elif name.count(":") == 1:  # name:port (an IPv6 address without brackets has several colons)
            name = name.split(":")[0]
        return bool(name) and (name in self.hosts or name.endswith(self.suffixes))


def create_app(service: Service, batcher: Batcher, limits: Limits, info: dict[str, Any],
               allowed_hosts: Iterable[str] = LOOPBACK_HOSTS, pace: Pace | None = None) -> ASGIApp:
    """The application over a loaded service and its batcher (started and stopped with the app's lifespan).
    pace: the engine's, measured at start-up (serving.pace); a request estimated to take longer than
    --admit-share of its deadline is refused. None: requests are bounded by --max-work alone."""
    decode_keys = service.decode_keys()

    def check_cost_and_time(key: Any, tokens: list[int], changes: dict[str, Any],
                            prefixes: list[int] | None = None, phrases: list[int] | None = None) -> None:
        cost = check_cost(service.lengths(key), tokens, changes, limits, prefixes, phrases)
        if pace is not None:
            check_time(pace.request_seconds(tokens, cost.longest, cost.rows, limits.max_batch_tokens,
                                            batcher.max_batch_sources), limits)
    page = resources.files("seqxduce.serving").joinpath("page.html").read_text(encoding="utf-8")

    def checked_source(source: Any, where: str) -> tuple[str, int]:
        text = check_source(source, where)
        tokens = service.source_tokens(text)
        if tokens > limits.max_source_tokens:
            raise RequestError(413, f"{where}: {tokens} tokens, longer than the {limits.max_source_tokens} this "
                                    "server takes (--max-source-tokens); split it")
        return text, tokens

    @handler
    async def decode(request: Request) -> Response:
        deadline = time.monotonic() + limits.max_request_seconds
        data = parse_json(await read_body(request, limits))
        ask = parse_decode(data, limits, decode_keys, service.default_nbest())
        inputs, notices = service.directed(ask)  # as the model reads them: a language's tag counted below
        tokens = [checked_source(source_text(s), f"inputs[{i}]")[1] for i, s in enumerate(inputs)]
        key = service.key_for(ask)
        prefixes = [service.target_tokens(s.prefix) - 1 if isinstance(s, Prefixed) else 0 for s in inputs]
        # phrases that must appear lengthen the output the search allows, as a prefix does: both are counted
        check_cost_and_time(key, tokens, ask.changes, prefixes, service.phrase_tokens(inputs, key))
        future = batcher.submit(inputs, tokens, key, client_of(request))
        answers = await until_answered(request, batcher, future, deadline, limits)
        if answers is None:
            return Response(status_code=499)  # nobody reads it: the client has gone
        return JSONResponse({"outputs": [a[:ask.nbest] for a in answers], **({"notices": notices} if notices else {})})

    @handler
    async def attention(request: Request) -> Response:
        deadline = time.monotonic() + limits.max_request_seconds
        data = parse_json(await read_body(request, limits))
        source, tokens = checked_source(data.get("input"), "input")
        target = data.get("target")
        if target is not None:
            target = check_source(target, "target")
            length = service.target_tokens(target)
            if length > limits.max_output_tokens:
                raise RequestError(413, f"target: {length} tokens, longer than this server's --max-output-tokens "
                                        f"{limits.max_output_tokens}; shorten it")
        rest = {k: v for k, v in data.items() if k not in ("input", "target")}
        if "inputs" in rest:  # else it would stand in for the checked source below
            raise RequestError(400, "inputs: not a key of /v1/attention; send one source as input")
        ask = parse_decode({"inputs": [source], **rest}, limits, decode_keys, service.default_nbest())
        if ask.tgt_lang or ask.src_lang:  # else it would be dropped: the maps are of the input as sent
            raise RequestError(400, "tgt_lang: not a key of /v1/attention; write the language as the model reads "
                                    "it (a multilingual run's tag) into input or target")
        key = service.key_for(ask)
        if target is None:  # the output is decoded: it costs what a decode of the source does
            check_cost_and_time(key, [tokens], ask.changes)
        future = batcher.call(lambda stop: service.attention(source, target, key, stop), client_of(request))
        answer = await until_answered(request, batcher, future, deadline, limits)
        return Response(status_code=499) if answer is None else JSONResponse(answer)

    def readiness() -> tuple[bool, float]:
        waited = batcher.new_client_wait()
        return not batcher.aborting and waited <= limits.busy_after_seconds, waited

    async def health(request: Request) -> Response:
        counters = batcher.counters
        ready, waited = readiness()
        return JSONResponse({"status": "ok", "ready": ready, "stopping": batcher.aborting,
                             "queued": batcher.queued(), "oldest_wait_s": round(batcher.oldest_wait(), 3),
                             "new_client_wait_s": round(waited, 3),
                             "decoding": counters.decoding, "batches": counters.batches,
                             "decoded_sources": counters.decoded, "dropped_sources": counters.dropped,
                             "abandoned_sources": counters.abandoned})

    async def ready(request: Request) -> Response:
        ok, waited = readiness()
        if ok:
            return JSONResponse({"status": "ready", "new_client_wait_s": round(waited, 3)})
        why = STOPPING if batcher.aborting else (
            f"busy: a new client's request would wait {waited:.1f} s or more (the running batch, or clients not "
            f"served yet), more than this server's --busy-after-seconds {limits.busy_after_seconds:g}")
        return error(503, why, headers={"Retry-After": str(RETRY_AFTER_S)})

    async def run_info(request: Request) -> Response:
        return JSONResponse(info)

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        batcher.start()
        try:
            yield
        finally:
            batcher.abort()  # after the grace nothing is waited for: what is left gets 503, the batch stops
            # what the connections left of the grace, which runs once from the signal (a call that cannot be cut,
            # CTranslate2's, is waited for that long at most)
            left = batcher.grace_left(limits.shutdown_grace_seconds)
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop, left)

    routes = [Route("/", index), Route("/health", health), Route("/ready", ready), Route("/v1/info", run_info),
              Route("/v1/decode", decode, methods=["POST"]), Route("/v1/attention", attention, methods=["POST"])]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})
    return Guard(app, allowed_hosts, batcher)
