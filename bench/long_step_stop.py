"""The long-step stop check of issue #57: two torchrun processes train a recipe whose step takes longer than the
grace (the base model on a CPU: over 40 s a step); once step 1 is saved and step 2 is under way, SIGTERM goes to
the launcher. Every process must be gone within --bound seconds with step 1 saved, and the same command line then
continues the run to its end.

    python bench/long_step_stop.py RECIPE --out RUN [--into-step 15] [--bound 30] [-- TRAIN OPTIONS]
    python bench/long_step_stop.py bench/long_step_base.toml --out /tmp/base --into-step 35   # the base model

RECIPE must save every step and log every step ([train] checkpoint_every = 1, log_every = 1) and end at step 2
([train] max_steps = 2); the command is `torchrun --standalone --nproc_per_node 2 -m seqxduce train RECIPE --out
RUN --auto-resume TRAIN OPTIONS`. Prints each moment and whether the check held.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import cpu_name, git_commit, load_average  # noqa: E402


def launch(recipe: str, out: str, extra: list[str], log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "seqxduce", "train", recipe, "--out", out, "--auto-resume", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def group_alive(pgid: int) -> bool:
    """Whether any process of the launcher's session is left (the launcher, its workers)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--out", required=True)
    parser.add_argument("--into-step", type=float, default=15.0, help="seconds into step 2 when SIGTERM is sent")
    parser.add_argument("--bound", type=float, default=30.0, help="seconds every process must be gone within")
    args, extra = parser.parse_known_args()  # the rest: more `seqxduce train` options (after --)
    args.extra = [a for a in extra if a != "--"]
    log = Path(args.out + ".log")
    sys.stdout.reconfigure(line_buffering=True)  # each moment as it comes, into a log file too
    print(f"# commit {git_commit()}; {cpu_name()}; load {load_average()}")
    started = time.monotonic()
    process = launch(args.recipe, args.out, args.extra, log)
    while not re.search(r"^(\[rank\d\]:? ?)?step 1 \|", log.read_text(), re.M):
        if process.poll() is not None:
            sys.exit(f"the launcher ended before step 1: {log.read_text()[-3000:]}")
        time.sleep(0.5)
    step_1 = time.monotonic()
    print(f"step 1 logged {step_1 - started:.1f} s after the launch")
    time.sleep(args.into_step)
    signalled = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)
    print(f"SIGTERM to the launcher {signalled - step_1:.1f} s after step 1 was logged")
    while process.poll() is None or group_alive(process.pid):  # poll: a launcher not reaped stays in the group
        time.sleep(0.1)
        if time.monotonic() - signalled > 600:
            sys.exit("still running 600 s after SIGTERM")
    gone = time.monotonic() - signalled
    said = [line for line in log.read_text().splitlines() if "SIGTERM" in line and "interrupted at step" in line]
    saved = sorted(p.name for p in (Path(args.out) / "checkpoints").glob("step_*.pt"))
    print(f"every process gone {gone:.1f} s after SIGTERM (bound {args.bound:g} s); launcher exit "
          f"{process.returncode}; checkpoints {saved}")
    for line in said:
        print(f"  {line}")
    resumed = launch(args.recipe, args.out, args.extra, Path(args.out + ".resume.log"))
    resumed.wait()
    ended = sorted(p.name for p in (Path(args.out) / "checkpoints").glob("step_*.pt"))
    print(f"the same command again: exit {resumed.returncode}; checkpoints {ended}")
    held = gone <= args.bound and "step_00000001.pt" in saved and resumed.returncode == 0 \
        and "step_00000002.pt" in ended
    print(f"check {'held' if held else 'FAILED'}")
    sys.exit(0 if held else 1)


if __name__ == "__main__":
    main()
