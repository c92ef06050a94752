"""Answers clients do not read are bounded (serving.connections): a client that reads too little of its answer in
--write-timeout-seconds is cut and its unsent answer dropped, and past --max-unread-bytes, all connections
together, the connection stalled the longest is cut; a client that reads gets its whole answer. A real server
process (uvicorn over the server's protocol, answers of 24 MB) and clients whose sockets take little at a time."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve.server_process import STARTUP_S, free_port

pytest.importorskip("uvicorn", reason="the serve extra is not installed (pip install -e '.[serve]')")

ROOT = Path(__file__).resolve().parents[2]
MEGABYTES = 24
BODY = MEGABYTES << 20


@contextlib.contextmanager
def unread_server(tmp_path: Path, write_timeout: float, max_unread: int) -> Iterator[tuple[int, Path]]:
    port, log = free_port(), tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "tests.serve.unread_app", str(port), str(MEGABYTES),
                                    str(write_timeout), str(max_unread)], cwd=ROOT, stdout=out, stderr=out,
                                   env=os.environ | {"PYTHONPATH": str(ROOT)})
    try:
        until(lambda: "listening" in log.read_text(), STARTUP_S, "the server listening", log)
        yield port, log
    finally:
        process.kill()
        process.wait()


def until(condition, seconds: float, what: str, log: Path) -> None:
    """Poll condition every 50 ms (a guard against a hang, not a timing: the test waits on what the server says)."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"never: {what}; the server's log:\n{log.read_text()}")
        time.sleep(0.05)


def ask(port: int) -> socket.socket:
    """A client that asks for the big answer and reads nothing yet: its socket takes a few KB at a time."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return sock


def read_all(sock: socket.socket) -> int:
    """Bytes received until the server ends the connection or the whole answer is in (headers included)."""
    sock.settimeout(120)
    received = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 20):
            received += len(chunk)
            if received > BODY:  # headers and the whole body
                break
    return received


def answered(log: Path) -> int:
    return log.read_text().count("answer written")


def cuts(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("cut a connection")]


def test_a_client_that_does_not_read_is_cut_after_the_write_timeout(tmp_path):
    with unread_server(tmp_path, write_timeout=1.0, max_unread=1 << 40) as (port, log):
        stalled = ask(port)
        until(lambda: cuts(log), 60, "the stalled connection cut", log)
        assert "--write-timeout-seconds 1" in cuts(log)[0]
        assert read_all(stalled) < BODY, "the rest of the answer was dropped"
        reader = ask(port)
        assert read_all(reader) > BODY, "a client that reads gets its whole answer"
        assert len(cuts(log)) == 1


def test_past_the_unread_bound_the_connection_stalled_longest_is_cut(tmp_path):
    # each stalled answer leaves over 16 MB unread in the server (24 MB less what the sockets hold): two pass 24 MB
    with unread_server(tmp_path, write_timeout=600.0, max_unread=24 << 20) as (port, log):
        first = ask(port)
        until(lambda: answered(log) == 1, 60, "the first answer written (and stalled)", log)
        second = ask(port)
        until(lambda: cuts(log), 60, "a connection cut past --max-unread-bytes", log)
        assert len(cuts(log)) == 1 and "--max-unread-bytes" in cuts(log)[0]
        assert read_all(first) < BODY, "the older stalled connection was cut"
        assert read_all(second) > BODY, "the newer one, read now, gets its whole answer"
