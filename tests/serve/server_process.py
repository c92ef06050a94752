"""A `seqxduce serve` process for tests, and a client that sends exactly the bytes a test writes (http.client and
urllib add or refuse headers a hostile client would send)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STARTUP_S = 120  # a loaded machine imports torch slowly
# a guard against a hang, not a measure of speed: the bound for a server to end after SIGTERM
EXIT_WITHIN_S = 15


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def poll_health(health: Callable[[], dict], what: str, condition: Callable[[dict], bool], tries: int) -> dict:
    """Poll a server's /health (health()) every 50 ms until condition holds; fail naming `what` after `tries`."""
    for _ in range(tries):
        answer = health()
        if condition(answer):
            return answer
        time.sleep(0.05)
    raise AssertionError(f"the server never reached: {what}; last /health {answer}")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool  # the server closed the connection after the answer

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Server:
    port: int
    process: subprocess.Popen
    log: Path

    def rss_kib(self) -> int:
        """The server's resident memory now (Linux /proc)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def connect(self, timeout: float = 60) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def send(self, raw: bytes, timeout: float = 60) -> Answer:
        """Send raw bytes on a new connection; the answer, and whether the server closed the connection then."""
        with self.connect(timeout) as sock:
            sock.sendall(raw)
            return read_answer(sock)

    def post(self, path: str, body: bytes | dict, headers: dict[str, str] | None = None) -> Answer:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = {"Host": f"127.0.0.1:{self.port}", "Content-Type": "application/json",
                "Content-Length": str(len(data))} | (headers or {})
        return self.send(request_bytes("POST", path, head) + data)

    def get(self, path: str) -> Answer:
        return self.send(request_bytes("GET", path, {"Host": f"127.0.0.1:{self.port}"}))

    def health(self) -> dict:
        answer = self.get("/health")
        assert answer.status == 200, answer
        return answer.json()

    def wait_for(self, what: str, condition) -> dict:
        """Poll /health until condition(health) holds (the server's own counters, not a timing)."""
        return poll_health(self.health, what, condition, tries=1200)

    def exit_status(self) -> int:
        """The process's exit status, failing if it has not ended within EXIT_WITHIN_S."""
        try:
            return self.process.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {EXIT_WITHIN_S} s after SIGTERM: {self.log.read_text()}") from None


def request_bytes(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def read_answer(sock: socket.socket) -> Answer:
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = response.read()
    closed = response.will_close
    if closed:
        sock.settimeout(30)
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
    return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, body, closed)


def env() -> dict[str, str]:
    """One thread per process, so that a server and the tests beside it do not starve each other."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@contextlib.contextmanager
def serve_process(run: Path, tmp: Path, *options: str, log_level: str = "info",
                  environment: dict[str, str] | None = None) -> Iterator[tuple[int, subprocess.Popen, Path]]:
    """(port, process, log file) of a `seqxduce serve` process on a free port, once it answers /health 200;
    killed at the end if still running."""
    port = free_port()
    log = tmp / f"server-{port}.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "seqxduce", "serve", str(run), "--port", str(port),
                                    "--log-level", log_level, *options], stdout=out, stderr=subprocess.STDOUT,
                                   env=environment)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert process.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no /health after {STARTUP_S} s: {log.read_text()}"
            time.sleep(0.2)
        yield port, process, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@contextlib.contextmanager
def serving(run: Path, tmp: Path, *options: str) -> Iterator[Server]:
    """A `seqxduce serve` process (one thread) on a free port, answering /health; killed at the end."""
    with serve_process(run, tmp, *options, environment=env()) as (port, process, log):
        yield Server(port, process, log)
