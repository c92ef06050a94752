"""Connection limits uvicorn does not have, as a subclass of its h11 protocol: at most --max-connections open
(one more is answered 503 and closed as soon as it is accepted), a request's headers must arrive within
--read-timeout-seconds of the connection opening or of the previous answer (else the connection is closed), and
answers that clients do not read are bounded in time and in memory: a connection whose client has taken nothing of
its answer for --write-timeout-seconds is cut, and past --max-unread-bytes of unread answers, all connections
together, the one stalled the longest is cut. An answer is written to the socket at once and what the client has
not taken waits in its transport's buffer: cutting (abort) frees that buffer, which nothing else would until the
client reads.

uvicorn's own settings cover the rest and are used for it (command.py): timeout_keep_alive closes an idle kept-alive
connection, timeout_graceful_shutdown cuts requests still running after SIGTERM's grace, limit_concurrency would
answer 503 but keeps the connection (and its file descriptor) open, and nothing of uvicorn's times a client that
opens a connection and sends nothing, or half its headers: 130 such sockets exhausted a 128-descriptor limit. The
body's own timeout is the app's (app.read_body). The h11 protocol is always the one used, whatever else is
installed, so that these limits hold everywhere.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("seqxduce.serve")
TOO_MANY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


def guarded_protocol(max_connections: int, read_timeout_s: float, write_timeout_s: float = 20.0,
                     max_unread_bytes: int = 256 << 20) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a cap on open connections, a timeout on reading a request's headers, and the
    bounds on unread answers (time and bytes)."""
    stalled: dict[Any, float] = {}  # connections whose client stopped reading -> since when (loop time)

    class GuardedH11Protocol(H11Protocol):
        headers_timer: asyncio.TimerHandle | None = None
        write_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                body = (b'{"error":"busy: this server holds its --max-connections %d open connections; retry after '
                        b'1 s"}' % max_connections)
                transport.write(TOO_MANY % (len(body), body))
                transport.close()
                return
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
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            """The transport's buffer passed its high-water mark: the client reads slower than we write."""
            super().pause_writing()
            stalled[self] = self.loop.time()
            # a client that reads its buffer down to the low-water mark resumes writing and disarms this
            self.write_timer = self.loop.call_later(write_timeout_s, self._cut, "read too little of its answer in "
                                                    f"--write-timeout-seconds {write_timeout_s:g}")
            unread = sum(p.transport.get_write_buffer_size() for p in stalled)
            while unread > max_unread_bytes and stalled:
                oldest = min(stalled, key=stalled.get)
                unread -= oldest.transport.get_write_buffer_size()
                oldest._cut(f"stalled the longest while unread answers passed --max-unread-bytes {max_unread_bytes}")

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
            if not self.transport.is_closing():
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
