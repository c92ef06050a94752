"""A fault campaign on a cluster of two nodes on one machine: two torchrun launchers (`--nnodes 2`, one process
each, a c10d rendezvous on 127.0.0.1, `--max-restarts 1`) train the tiny recipe with `--auto-resume`, and at a
random moment a random rank (its worker process) or launcher gets SIGKILL or SIGTERM. Each trial is then read:
finished (its weights must equal the uninterrupted run's), or stopped (its newest checkpoint must be readable and
the same command line must then finish the run with weights equal to the uninterrupted run's). Prints a table.

    python bench/cluster_faults.py --trials 30 --seed 1

Each step is made to last STEADY_SECONDS more (the fault tests' injection, tests.faults.slowed steady), so that a
tiny run lasts long enough for a random moment to land in its start, its steps, its saves and its end.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "fixtures" / "tiny.toml"
STEPS = 40
SETTINGS = ["--set", f"train.max_steps={STEPS}", "--set", "train.checkpoint_every=5", "--set", "train.log_every=5",
            "--set", "train.validate_every=0", "--set", "train.valid_decode_examples=0",
            "--set", 'train.device="cpu"', "--set", "train.collective_timeout=20"]
GRACE_S = 10  # a survivor whose peer launcher is gone waits in the rendezvous: ended as a scheduler would
HANG_S = 300


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(cache: Path) -> dict[str, str]:
    # no TORCH_DISABLE_SHARE_RDZV_TCP_STORE: a restart needs no setting of torchrun's (seqxduce.torchrun)
    environ = {k: v for k, v in os.environ.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
    return {**environ, "OMP_NUM_THREADS": "1", "SEQXDUCE_CACHE": str(cache), "STEADY_SECONDS": "0.15"}


def _launchers(out: Path, cache: Path, logs: Path) -> list[subprocess.Popen]:
    port = _free_port()
    found = []
    for node in (0, 1):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                   "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                   "--rdzv-id", "faults", "--max-restarts", "1", "--monitor-interval", "0.1",
                   "-m", "tests.faults.slowed", "steady", "train", str(TINY), "--out", str(out), "--auto-resume",
                   *SETTINGS]
        found.append(subprocess.Popen(command, stdout=(logs / f"node{node}.log").open("a"),
                                      stderr=subprocess.STDOUT, cwd=REPO, env=_env(cache)))
    return found


def _workers(launcher: subprocess.Popen) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == launcher.pid and b"tests.faults.slowed" in command:
            found.append(int(entry.name))
    return found


def _end(launchers: list[subprocess.Popen]) -> None:
    """Wait for both launchers; one left waiting for a peer that is gone gets SIGTERM after GRACE_S."""
    deadline = time.monotonic() + HANG_S
    first_end = None
    while any(p.poll() is None for p in launchers):
        if first_end is None and any(p.poll() is not None for p in launchers):
            first_end = time.monotonic()
        if first_end is not None and time.monotonic() - first_end > GRACE_S:
            for p in launchers:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            first_end = float("inf")
        if time.monotonic() > deadline:
            for p in launchers:
                p.kill()
            raise RuntimeError("a trial hung")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int]) -> int:
    """How many of pids were still running once the launchers had ended; waits for them (a hang is an error)."""
    left = [pid for pid in pids if _alive(pid)]
    deadline = time.monotonic() + HANG_S
    while any(_alive(pid) for pid in left):
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker processes {left} outlived their launchers by {HANG_S} s")
        time.sleep(0.1)
    return len(left)


def _run(out: Path, cache: Path, logs: Path) -> None:
    launchers = _launchers(out, cache, logs)
    _end(launchers)
    codes = [p.returncode for p in launchers]
    if codes != [0, 0]:
        raise RuntimeError(f"a run to the end failed ({codes}); see {logs}")


def _final(out: Path) -> dict[str, torch.Tensor] | None:
    path = out / "checkpoints" / f"step_{STEPS:08d}.pt"
    return torch.load(path, weights_only=True)["model"] if path.is_file() else None


def _newest_step(out: Path) -> int:
    found = sorted((out / "checkpoints").glob("step_*.pt")) if (out / "checkpoints").is_dir() else []
    if not found:
        return 0
    return int(torch.load(found[-1], weights_only=True)["step"])


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def trial(number: int, rng: random.Random, root: Path, cache: Path, reference: dict) -> dict:
    out, logs = root / f"trial{number}", root / f"trial{number}-logs"
    logs.mkdir()
    target = rng.choice(["rank worker", "launcher"])
    node = rng.randrange(2)
    signum = rng.choice([signal.SIGKILL, signal.SIGTERM])
    delay = rng.uniform(6.0, 24.0)
    started = time.monotonic()
    launchers = _launchers(out, cache, logs)
    time.sleep(delay)
    workers = _workers(launchers[0]) + _workers(launchers[1])
    victims = _workers(launchers[node]) if target == "rank worker" else [launchers[node].pid]
    for pid in victims:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    _end(launchers)
    # a launcher killed outright leaves its worker behind: it must end by itself (its peers gone) before the run
    # folder is read or trained again
    orphans = _wait_gone(workers)
    saved = _newest_step(out)
    after = "finished" if _final(out) is not None else f"stopped, step {saved} saved" if saved else \
        "stopped before its first checkpoint"
    if _final(out) is None:
        _run(out, cache, logs)  # the same command line, as a requeue runs it
    text = "".join(p.read_text() for p in sorted(logs.glob("*.log")))
    return {"trial": number, "fault": f"{signal.Signals(signum).name} {target} of node {node}",
            "at_s": delay, "hit": bool(victims), "after": after, "orphans": orphans,
            "restarts": text.count("resumed from"),
            "equal": _equal(_final(out), reference), "seconds": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the trials' folders (printed)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cluster-faults-"))
    cache = root / "cache"
    (root / "reference-logs").mkdir()
    _run(root / "reference", cache, root / "reference-logs")
    reference = _final(root / "reference")
    rng = random.Random(args.seed)
    rows = []
    print("| trial | fault | at (s) | after the fault | workers left by a launcher | resumes | equal to "
          "uninterrupted | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for number in range(1, args.trials + 1):
        row = trial(number, rng, root, cache, reference)
        rows.append(row)
        print(f"| {row['trial']} | {row['fault']}{'' if row['hit'] else ' (nothing to hit)'} | {row['at_s']:.1f} | "
              f"{row['after']} | {row['orphans']} | {row['restarts']} | {'yes' if row['equal'] else 'NO'} | "
              f"{row['seconds']:.0f} |",
              flush=True)
    datasets = [p.name for p in cache.iterdir() if not p.name.startswith(".")]
    print(f"\n{sum(r['equal'] for r in rows)} of {len(rows)} trials ended equal to the uninterrupted run; "
          f"{sum(r['after'] == 'finished' for r in rows)} finished by themselves (torchrun's restart), the others "
          f"stopped with their last step saved and were finished by the same command line; datasets in the cache: "
          f"{len(datasets)}")
    if args.keep:
        print(f"kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
