"""A target prefix on an imported model: `decode --prefix-file` with greedy, beam and sampling, refused in one
line when the target vocabulary cannot spell it; and `serve`'s per-input "prefix"."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands

SOURCES = ["the cat sat on the mat", "a big dog runs", "red house"]
PREFIXES = ["house", "", "cat red"]


def _decode(run: Path, tmp: Path, *extra: str):
    source, prefix = tmp / "in.txt", tmp / "prefix.txt"
    source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    prefix.write_text("\n".join(PREFIXES) + "\n", encoding="utf-8")
    return CliRunner().invoke(add_plugin_commands(), ["decode", str(run), "--input", str(source), "--prefix-file",
                                                      str(prefix), *extra])


@pytest.mark.parametrize("decoder", ["greedy", "beam", "sampling"])
def test_outputs_start_with_the_prefix(marian_run: Path, tmp_path: Path, decoder: str) -> None:
    result = _decode(marian_run, tmp_path, "--set", f"decode.name={decoder}", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "out").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("house") and lines[2].startswith("cat red")
    if decoder == "sampling":  # its samples depend on the batch they are drawn in
        return
    free = CliRunner().invoke(add_plugin_commands(), ["decode", str(marian_run), "--input", "-", "--set",
                                                      f"decode.name={decoder}"], input=SOURCES[1] + "\n")
    assert free.exit_code == 0 and free.output.strip().splitlines()[-1] == lines[1]  # no prefix: as without


def test_an_unspellable_prefix_is_refused_in_one_line(marian_run: Path, tmp_path: Path) -> None:
    PREFIXES[1] = "ẞ"
    try:
        result = _decode(marian_run, tmp_path)
    finally:
        PREFIXES[1] = ""
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]  # (after the line saying what decodes)
    assert last.startswith("Error: --prefix-file ") and "prefix.txt:2: the prefix 'ẞ'" in last
    assert "Traceback" not in result.output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _post(url: str, body: object) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_serve_takes_a_prefix_per_input(marian_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    expected = _decode(marian_run, tmp_path, "-o", str(tmp_path / "out"))
    assert expected.exit_code == 0, expected.output
    lines = (tmp_path / "out").read_text(encoding="utf-8").splitlines()
    port = _free_port()
    with open(tmp_path / "server.log", "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "seqxduce", "serve", str(marian_run), "--port", str(port),
                                   "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "the server never answered /health"
                time.sleep(0.2)
        inputs = [{"source": s, "prefix": p} if p else s for s, p in zip(SOURCES, PREFIXES)]
        status, answer = _post(f"http://127.0.0.1:{port}/v1/decode", {"inputs": inputs})
        assert status == 200, answer
        assert [hyps[0]["text"] for hyps in answer["outputs"]] == lines
        status, answer = _post(f"http://127.0.0.1:{port}/v1/decode", {"inputs": [{"source": "a", "prefix": "ẞ"}]})
        assert status == 422 and "cannot spell" in json.dumps(answer)
        status, answer = _post(f"http://127.0.0.1:{port}/v1/decode", {"inputs": [{"text": "a"}]})
        assert status == 400
    finally:
        server.kill()
        server.wait()
