"""Tools of the fault-injection tests: the CLI in a real process, waiting on what it writes, and a folder that
cannot be written even by root."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# no validation: a fault test is about the run directory, not the model
QUIET = ("--set", "train.validate_every=0", "--set", "train.valid_decode_examples=0")
# a guard against a hang, not a measure of speed: every wait below ends much sooner when the code is right
HANG_GUARD_S = 300


def env() -> dict[str, str]:
    """The environment of a CLI process: one thread, so that parallel processes do not starve each other."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "SEQXDUCE_STRICT_PLUGINS": ""}


def command(*args: object, module: tuple[str, ...] = ("seqxduce",)) -> list[str]:
    """`python -m MODULE ARGS`: the CLI, or the fault tests' injection around it (tests.faults.slowed WHAT)."""
    return [sys.executable, "-m", *module, *(str(a) for a in args)]


def run(*args: object, prefix: tuple[str, ...] = (), extra_env: dict[str, str] | None = None,
        **kwargs) -> subprocess.CompletedProcess:
    """`seqxduce ARGS` to the end, in a real process (under prefix, e.g. a read-only mount); extra_env added to
    the environment."""
    return subprocess.run([*prefix, *command(*args)], capture_output=True, text=True,
                          env={**env(), **(extra_env or {})}, cwd=REPO, timeout=HANG_GUARD_S, **kwargs)


def start(*args: object, log: Path, module: tuple[str, ...] = ("seqxduce",), extra_env: dict[str, str] | None = None,
          **kwargs) -> subprocess.Popen:
    """`seqxduce ARGS` (or `python -m MODULE ARGS`) started in a real process, its stderr and stdout going to log;
    extra_env added to the environment."""
    handle = log.open("w")
    return subprocess.Popen(command(*args, module=module), stdout=handle, stderr=subprocess.STDOUT, text=True,
                            env={**env(), **(extra_env or {})}, cwd=REPO, **kwargs)


def wait_for(condition: Callable[[], bool], process: subprocess.Popen | None = None) -> None:
    """Poll until condition holds; fail if the process ends first or the hang guard runs out."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        if process is not None and process.poll() is not None:
            pytest.fail(f"the process ended (exit {process.returncode}) before the awaited moment")
        if time.monotonic() > deadline:
            pytest.fail("waited past the hang guard")
        time.sleep(0.05)


def train_lines(run_dir: Path) -> int:
    """How many training log lines metrics.jsonl holds so far."""
    metrics = run_dir / "metrics.jsonl"
    return metrics.read_text().count('"kind": "train"') if metrics.is_file() else 0


@functools.cache
def _user_namespaces() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[tuple[str, ...]]:
    """A command prefix under which folder cannot be written. Permission bits do not stop root, so as root the
    command runs in its own mount namespace with folder bind-mounted read-only (a real EROFS)."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield ()
        finally:
            folder.chmod(mode)
        return
    if not _user_namespaces():
        pytest.skip("running as root without user namespaces (unshare -rm): nothing can make a folder read-only "
                    "for root here")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    yield ("unshare", "-rm", "sh", "-c", script, str(folder))
