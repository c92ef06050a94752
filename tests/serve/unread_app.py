"""A server of big answers over seqxduce serve's connection protocol (serving.connections), for the tests of
unread answers: `python -m tests.serve.unread_app PORT MEGABYTES WRITE_TIMEOUT_S MAX_UNREAD_BYTES [KEEP_ALIVE_S]`.
GET / answers MEGABYTES of bytes at once, as the server's routes answer (one body, written whole)."""

from __future__ import annotations

import logging
import socket
import sys

import uvicorn

from seqxduce.serving.connections import guarded_protocol


def main() -> None:
    port, megabytes, write_timeout, max_unread = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), \
        int(sys.argv[4])
    keep_alive = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    body = b"x" * (megabytes << 20)

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        print("answer written", file=sys.stderr, flush=True)  # the tests wait on it: the socket took what it could

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    # a small kernel send buffer (accepted sockets inherit it): what a client leaves unread waits in the
    # transport's buffer, as the bounds assume, whatever the host's tcp_wmem lets the kernel hold
    listening = socket.socket()
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    listening.bind(("127.0.0.1", port))
    listening.listen(64)
    print("listening", file=sys.stderr, flush=True)  # the tests wait on it: a connection now waits in the backlog
    config = uvicorn.Config(app, log_level="info", lifespan="off", timeout_keep_alive=keep_alive,  # type: ignore[arg-type]
                            http=guarded_protocol(64, 20.0, write_timeout, max_unread))
    uvicorn.Server(config).run(sockets=[listening])


if __name__ == "__main__":
    main()
