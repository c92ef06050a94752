"""Answers clients do not read are bounded (serving.connections): a client that takes nothing of its answer for
--write-timeout-seconds is cut, its unsent answer dropped and the cut logged (also once uvicorn's keep-alive timer
has begun to close the connection), and past --max-unread-bytes, all connections together, the connection that
has taken nothing the longest is cut; a client that reads gets its whole answer, also one reading slowly but
steadily for many times the timeout. A real server process (uvicorn over the server's protocol, answers of 24 MB)
and clients whose sockets take little at a time."""

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
def unread_server(tmp_path: Path, write_timeout: float, max_unread: int, megabytes: int = MEGABYTES,
                  keep_alive: float = 5.0) -> Iterator[tuple[int, Path]]:
    port, log = free_port(), tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "tests.serve.unread_app", str(port), str(megabytes),
                                    str(write_timeout), str(max_unread), str(keep_alive)], cwd=ROOT, stdout=out,
                                   stderr=out,
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


def read_all(sock: socket.socket, body: int = BODY, chunk_bytes: int = 1 << 20, pause_s: float = 0.0) -> int:
    """Bytes received until the server ends the connection or the whole answer is in (headers included), taking
    at most chunk_bytes at a time with pause_s between."""
    sock.settimeout(120)
    received = 0
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(chunk_bytes):
            received += len(chunk)
            if received > body:  # headers and the whole body
                break
            time.sleep(pause_s)
    return received


def answered(log: Path) -> int:
    return log.read_text().count("answer written")


def cuts(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("cut a connection")]


def test_a_client_that_does_not_read_is_cut_after_the_write_timeout(tmp_path):
    with unread_server(tmp_path, write_timeout=1.0, max_unread=1 << 40) as (port, log):
        stalled = ask(port)
        until(lambda: cuts(log), 60, "the stalled connection cut", log)
        assert "took nothing of its answer for --write-timeout-seconds 1" in cuts(log)[0]
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


def test_a_client_reading_slowly_but_steadily_gets_its_whole_answer(tmp_path):
    """8 KB every 50 ms (160 KB/s at most, less on a loaded machine): the 1 MB answer takes several times the
    write timeout of 3 s, which the client never stops reading for (its pauses are 1/60 of it)."""
    with unread_server(tmp_path, write_timeout=3.0, max_unread=1 << 40, megabytes=1) as (port, log):
        reader = ask(port)
        assert read_all(reader, 1 << 20, chunk_bytes=8 << 10, pause_s=0.05) > 1 << 20, log.read_text()
        assert not cuts(log)


def test_a_cut_is_logged_after_the_keep_alive_timer_began_closing(tmp_path):
    """The answer is written whole at once, so uvicorn's keep-alive timer (1 s here) starts at once and closes the
    connection (which then waits to send its buffer) before the write timeout cuts it: the cut is logged all the
    same."""
    with unread_server(tmp_path, write_timeout=3.0, max_unread=1 << 40, keep_alive=1.0) as (port, log):
        stalled = ask(port)
        until(lambda: cuts(log), 60, "the stalled connection cut", log)
        assert "--write-timeout-seconds 3" in cuts(log)[0]
        assert read_all(stalled) < BODY, "the rest of the answer was dropped"
