"""Connection limits uvicorn does not have, as a subclass of its h11 protocol: at most --max-connections open
(one more is answered 503 and closed as soon as it is accepted), at most --max-connections-per-client from one
address (one more is answered 429 and closed: idle connections from one address cannot deny the others; a trusted
proxy's address, --forwarded-allow-ips, is exempt, since every client comes through it), a request's headers must
arrive within --read-timeout-seconds of the connection opening or of the previous answer (else the connection is
closed), and answers that clients do not read are bounded in time and in memory: a connection whose client has
taken nothing of its answer for --write-timeout-seconds is cut, and past --max-unread-bytes of unread answers, all
connections together, the one that has taken nothing the longest is cut. An answer is written to the socket at
once and what the client has not taken waits in its transport's buffer: cutting (abort) frees that buffer, which
nothing else would until the client reads. A client takes something whenever that buffer shrinks: it is polled
while the buffer is over its high-water mark, so a client reading a big answer slowly but steadily is never cut,
however long the whole answer takes. Every cut is one log line.

A request head (request line and headers) that passes MAX_HEAD_BYTES before it is complete is answered 431, and
any other malformed request 400, in the server's one JSON line (uvicorn would answer in plain text); the app
refuses a complete head past MAX_HEAD_BYTES, or of more than MAX_HEADERS headers, the same way (app.Guard).

uvicorn's own settings cover the rest and are used for it (command.py): timeout_keep_alive closes an idle kept-alive
connection, timeout_graceful_shutdown cuts requests still running after SIGTERM's grace, limit_concurrency would
answer 503 but keeps the connection (and its file descriptor) open, and nothing of uvicorn's times a client that
opens a connection and sends nothing, or half its headers: 130 such sockets exhausted a 128-descriptor limit. The
body's own timeout is the app's (app.read_body). The h11 protocol is always the one used, whatever else is
installed, so that these limits hold everywhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("seqxduce.serve")
REFUSED = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n%sconnection: close\r\ncontent-length: %d\r\n"
           b"\r\n%s")
MAX_HEAD_BYTES = 16 << 10  # a request line and headers longer than this are refused 431 (h11's own default)
MAX_HEADERS = 100  # headers in one request (431 beyond); Apache's LimitRequestFields
TOO_LONG_HEAD = (f"headers: the request line and headers pass this server's {MAX_HEAD_BYTES} bytes; send fewer "
                 "or shorter headers")
POLLS_PER_TIMEOUT = 4  # polls of a stalled client per --write-timeout-seconds (one a second at least)


def refusal(status: int, reason: bytes, message: str, retry: bool = False) -> bytes:
    """A whole answer, closing the connection, in the server's one JSON line {"error": ...}: written before (or
    instead of) anything h11 would write."""
    body = json.dumps({"error": message}, ensure_ascii=True, separators=(",", ":")).encode()
    return REFUSED % (status, reason, b"retry-after: 1\r\n" if retry else b"", len(body), body)


def trusted(addresses: str | None) -> Callable[[str], bool]:
    """Whether an address is among --forwarded-allow-ips (addresses or networks, comma-separated; * all): a trusted
    proxy, whose connections carry every client's requests."""
    names = {a.strip() for a in (addresses or "").split(",") if a.strip()}
    if "*" in names:
        return lambda host: True
    networks = []
    for name in names:
        try:
            networks.append(ipaddress.ip_network(name, strict=False))
        except ValueError:
            pass  # a name, or a unix socket's path: compared as it is

    def check(host: str) -> bool:
        if host in names:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in networks)
    return check


def guarded_protocol(max_connections: int, read_timeout_s: float, write_timeout_s: float = 20.0,
                     max_unread_bytes: int = 256 << 20, max_per_client: int | None = None,
                     exempt: Callable[[str], bool] = lambda host: False) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a cap on open connections, in all and per client address (exempt: the addresses
    not capped, a trusted proxy's), a timeout on reading a request's headers, a bound on its head, and the bounds on
    unread answers (time and bytes)."""
    # connections whose client has not read its answer down to the low-water mark -> when it last took something
    stalled: dict[Any, float] = {}
    per_client: dict[str, int] = {}  # open connections per client address (those capped)
    poll_s = min(1.0, write_timeout_s / POLLS_PER_TIMEOUT)

    class RecordingConnection(h11.Connection):
        """h11's connection, keeping the protocol error it raised (uvicorn's handler only says "invalid")."""

        error: h11.RemoteProtocolError | None = None

        def next_event(self) -> Any:
            try:
                return super().next_event()
            except h11.RemoteProtocolError as err:
                self.error = err
                raise

    class GuardedH11Protocol(H11Protocol):
        headers_timer: asyncio.TimerHandle | None = None
        write_timer: asyncio.TimerHandle | None = None
        unsent = 0  # the transport's buffer when last polled, while stalled
        counted: str | None = None  # the client address this connection counts against

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.conn = RecordingConnection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(refusal(503, b"Service Unavailable", f"busy: this server holds its "
                                        f"--max-connections {max_connections} open connections; retry after 1 s",
                                        retry=True))
                transport.close()
                return
            host = self.client[0] if self.client else None
            if max_per_client is not None and host is not None and not exempt(host):
                if per_client.get(host, 0) >= max_per_client:
                    transport.write(refusal(429, b"Too Many Requests", f"connections: this address holds "
                                            f"--max-connections-per-client {max_per_client} open connections to this "
                                            "server; use one of them, or close one", retry=True))
                    transport.close()
                    return
                per_client[host] = per_client.get(host, 0) + 1
                self.counted = host
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._reading_headers():
                return
            self._disarm()  # a request's headers are in: from here the app times its body

        def on_response_complete(self) -> None:
            self._arm()  # the next request's headers have their time from here (a pipelined one is in already)
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._unstalled()
            if self.counted is not None:
                per_client[self.counted] -= 1
                if not per_client[self.counted]:
                    del per_client[self.counted]
                self.counted = None
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to a request h11 could not parse: 431 for a head past MAX_HEAD_BYTES (h11's hint),
            else 400, in one JSON line; the connection closes."""
            err = getattr(self.conn, "error", None)
            if err is not None and err.error_status_hint == 431:
                answer = refusal(431, b"Request Header Fields Too Large", TOO_LONG_HEAD)
            else:
                answer = refusal(400, b"Bad Request", f"request: not HTTP/1.1 this server reads"
                                 f"{f' ({err})' if err is not None else ''}")
            self.transport.write(answer)
            self.transport.close()

        def pause_writing(self) -> None:
            """The transport's buffer passed its high-water mark: the client reads slower than we write. From here
            the buffer is polled: each time it shrank the client took something, and it is cut only once it has
            taken nothing for --write-timeout-seconds; reading it down to the low-water mark resumes writing and
            ends the polling."""
            super().pause_writing()
            stalled[self] = self.loop.time()
            self.unsent = self.transport.get_write_buffer_size()
            self._poll_later()
            unread = sum(p.transport.get_write_buffer_size() for p in stalled)
            while unread > max_unread_bytes and stalled:
                oldest = min(stalled, key=stalled.get)
                unread -= oldest.transport.get_write_buffer_size()
                oldest._cut(f"took nothing the longest while unread answers passed --max-unread-bytes "
                            f"{max_unread_bytes}")

        def _poll_later(self) -> None:
            """Poll in poll_s, or at the write timeout if that comes first (a client is never cut early)."""
            when = min(self.loop.time() + poll_s, stalled[self] + write_timeout_s)
            self.write_timer = self.loop.call_at(when, self._poll)

        def _poll(self) -> None:
            self.write_timer = None
            if self not in stalled:
                return
            now, unsent = self.loop.time(), self.transport.get_write_buffer_size()
            if unsent < self.unsent:
                stalled[self] = now  # it took something since the last poll
            self.unsent = unsent
            if now - stalled[self] >= write_timeout_s:
                self._cut(f"took nothing of its answer for --write-timeout-seconds {write_timeout_s:g}")
            else:
                self._poll_later()

        def resume_writing(self) -> None:
            self._unstalled()
            super().resume_writing()

        def _unstalled(self) -> None:
            stalled.pop(self, None)
            if self.write_timer is not None:
                self.write_timer.cancel()
                self.write_timer = None

        def _cut(self, why: str) -> None:
            """Drop the connection and its unsent answer (abort, not close: close would wait to send it)."""
            unsent = self.transport.get_write_buffer_size()
            self._unstalled()
            # logged even when the transport is closing already (uvicorn's keep-alive timer closes a connection
            # whose answer was written whole, while it still waits to be sent)
            log.info("cut a connection whose client %s (%d bytes unsent)", why, unsent)
            self.transport.abort()

        def _reading_headers(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self.headers_timer = self.loop.call_later(read_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self.headers_timer is not None:
                self.headers_timer.cancel()
                self.headers_timer = None

        def _headers_too_slow(self) -> None:
            self.headers_timer = None
            if self._reading_headers() and not self.transport.is_closing():
                log.info("closed a connection that sent no complete request in --read-timeout-seconds %g",
                         read_timeout_s)
                self.transport.close()

    return GuardedH11Protocol
