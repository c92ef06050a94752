"""Fault injection: the disk fills up while a checkpoint is written. The write fails in a real process, through
a file size limit (RLIMIT_FSIZE: every platform) and, where user namespaces allow a private mount, a small
tmpfs (a real ENOSPC). The previous checkpoint stays intact, the error is one line, and the run resumes."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from seqxduce import engine
from tests.fault_tools import HANG_GUARD_S, REPO, _user_namespaces, command, env, run
from tests.tiny import TINY_RECIPE as TINY

FAST = ["train.validate_every=0", "train.valid_decode_examples=0"]


@pytest.fixture
def two_steps(tmp_path):
    out = tmp_path / "run"
    engine.train(TINY, out, overrides=["train.max_steps=2", *FAST])
    return out


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def test_a_file_size_limit_hit_by_a_checkpoint_keeps_the_previous_one(two_steps):
    previous = two_steps / "checkpoints" / "step_00000002.pt"
    before = previous.read_bytes()
    limit = len(before) // 2  # room for the recipe and metrics, not for a checkpoint

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(command("train", TINY, "--out", two_steps, "--resume", "--set", "train.max_steps=4"),
                            capture_output=True, text=True, env=env(), cwd=REPO, timeout=HANG_GUARD_S,
                            preexec_fn=limited)
    assert result.returncode == 1
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "step_00000004.pt: not written (File too large)" in errors[0]
    assert f"the last checkpoint, {previous}, is intact" in errors[0] and "--resume" in errors[0]
    assert previous.read_bytes() == before
    assert [p.name for p in (two_steps / "checkpoints").iterdir()] == ["step_00000002.pt"]  # no half file
    resumed = run("train", TINY, "--out", two_steps, "--resume", "--set", "train.max_steps=4")
    assert resumed.returncode == 0 and "trained to step 4" in resumed.stdout, resumed.stderr


VERIFY = """
import json, sys, torch
from pathlib import Path
d = Path(sys.argv[1]) / "checkpoints"
state = torch.load(d / "step_00000002.pt", weights_only=True)
print(json.dumps({"files": sorted(p.name for p in d.iterdir()), "step": state["step"]}))
"""


@pytest.mark.skipif(not _user_namespaces(), reason="needs user namespaces (unshare -rm) to mount a private tmpfs")
def test_a_full_tmpfs_during_a_checkpoint_write_keeps_the_previous_one(two_steps, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    size_kb = (sum(p.stat().st_size for p in two_steps.rglob("*") if p.is_file()) // 1024) + 48
    # inside a private mount namespace: a tmpfs just big enough for the run, the failing resume, then a look
    script = ('mount -t tmpfs -o size="$1"k tmpfs "$2" && cp -r "$3"/. "$2" && '
              '"$4" -m seqxduce train "$5" --out "$2" --resume --set train.max_steps=4; echo "exit=$?"; '
              '"$4" -c "$6" "$2"')
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(size_kb), str(disk), str(two_steps),
                             sys.executable, str(TINY), VERIFY], capture_output=True, text=True, env=env(), cwd=REPO,
                            timeout=HANG_GUARD_S)
    assert "exit=1" in result.stdout, result.stdout + result.stderr
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "step_00000004.pt: not written (No space left on device)" in errors[0]
    assert "step_00000002.pt, is intact" in errors[0]
    after = json.loads(result.stdout.splitlines()[-1])
    assert after == {"files": ["step_00000002.pt"], "step": 2}  # intact, and no half-written file beside it
