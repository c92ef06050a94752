"""The HTTP routes (Starlette): /v1/decode, /v1/attention, /health, /v1/info and the page at /.

Every client mistake is a RequestError, answered as a 4xx with {"error": "..."} naming the field; a full queue is
a 503 with Retry-After. A request whose client goes away while it waits is taken out of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from seqxduce.serving.batching import Batcher, QueueFull
from seqxduce.serving.limits import Limits, RequestError, check_source, parse_decode, parse_json
from seqxduce.serving.service import Service

log = logging.getLogger("seqxduce.serve")
RETRY_AFTER_S = 1


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one shape of every error answer."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it passes `limit` bytes, whatever Content-Length says."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"body: {declared} bytes, more than this server's --max-request-bytes {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"body: more than this server's --max-request-bytes {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


async def until_answered(request: Request, batcher: Batcher, future: asyncio.Future) -> Any:
    """The future's result; if the client disconnects first, its sources leave the queue (None is returned)."""
    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({future, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not future.done():
        batcher.cancel(future)
        log.info("a client went away: its request left the queue")
        return None
    return future.result()


def handler(function: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Turns RequestError and QueueFull into their answers."""
    async def handle(request: Request) -> Response:
        try:
            return await function(request)
        except RequestError as err:
            return error(err.status, err.message, err.headers)
        except QueueFull as err:
            return error(503, f"busy: {err}; retry after {RETRY_AFTER_S} s",
                         headers={"Retry-After": str(RETRY_AFTER_S)})
    return handle


def create_app(service: Service, batcher: Batcher, limits: Limits, info: dict[str, Any]) -> Starlette:
    """The application over a loaded service and its batcher (started and stopped with the app's lifespan)."""
    decode_keys = service.decode_keys()
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
        data = parse_json(await read_body(request, limits.max_request_bytes))
        ask = parse_decode(data, limits, decode_keys, service.default_nbest())
        tokens = [checked_source(getattr(s, "text", s), f"inputs[{i}]")[1] for i, s in enumerate(ask.inputs)]
        key = service.key_for(ask)
        answers = await until_answered(request, batcher, batcher.submit(ask.inputs, tokens, key))
        if answers is None:
            return Response(status_code=499)  # nobody reads it: the client has gone
        return JSONResponse({"outputs": [a[:ask.nbest] for a in answers]})

    @handler
    async def attention(request: Request) -> Response:
        data = parse_json(await read_body(request, limits.max_request_bytes))
        source, _ = checked_source(data.get("input"), "input")
        target = data.get("target")
        if target is not None:
            target = check_source(target, "target")
        rest = {k: v for k, v in data.items() if k not in ("input", "target")}
        ask = parse_decode({"inputs": [source], **rest}, limits, decode_keys, service.default_nbest())
        key = service.key_for(ask)
        answer = await until_answered(request, batcher, batcher.call(lambda: service.attention(source, target, key)))
        return Response(status_code=499) if answer is None else JSONResponse(answer)

    async def health(request: Request) -> Response:
        counters = batcher.counters
        return JSONResponse({"status": "ok", "queued": batcher.queued(), "decoding": counters.decoding,
                             "batches": counters.batches,
                             "decoded_sources": counters.decoded, "dropped_sources": counters.dropped})

    async def run_info(request: Request) -> Response:
        return JSONResponse(info)

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error(500, f"internal error: {type(exc).__name__}; the server log has the traceback")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        batcher.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    routes = [Route("/", index), Route("/health", health), Route("/v1/info", run_info),
              Route("/v1/decode", decode, methods=["POST"]), Route("/v1/attention", attention, methods=["POST"])]
    return Starlette(routes=routes, lifespan=lifespan,
                     exception_handlers={HTTPException: http_error, Exception: server_error})
