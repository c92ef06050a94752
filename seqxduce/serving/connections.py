"""Connection limits uvicorn does not have, as a subclass of its h11 protocol: at most --max-connections open
(one more is answered 503 and closed as soon as it is accepted), and a request's headers must arrive within
--read-timeout-seconds of the connection opening or of the previous answer (else the connection is closed).

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


def guarded_protocol(max_connections: int, read_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a cap on open connections and a timeout on reading a request's headers."""

    class GuardedH11Protocol(H11Protocol):
        headers_timer: asyncio.TimerHandle | None = None

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
            super().connection_lost(exc)

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
