"""Decoding at corpus scale: lines/s, peak memory and the time to the first output line on disk of
`seqxduce decode RUN --input FILE -o OUT`, for inputs of several lengths, with one process or several, seqxduce's
search or CTranslate2.

    python bench/decode_scale.py --run runs/quickstart                       # 0.1M and 1M lines, 1 and 2 processes
    python bench/decode_scale.py --run runs/quickstart --lines 50000 500000 --modes one
    python bench/decode_scale.py --run runs/quickstart --lines 100000 --modes one threads1 two torchrun ct2
    python bench/decode_scale.py --run runs/quickstart --lines 100000 --code-at 958cbab   # also the code before

Each row is one real `seqxduce decode` process (with `--modes torchrun`: `torchrun --nproc_per_node 2`), timed
from its start to its end, model loading included. Sources are the quick-start task's: random symbol sequences of
1-12 symbols (numpy RandomState(1235)); the decoder is the recipe's unless --set gives another (greedy by default:
--set decode.name=greedy). Peak memory: the largest sum of the resident sets of the process and all its
descendants (the workers, torchrun's ranks), sampled every 0.1 s from /proc. First line: seconds from the start
until the output's partial file (OUT.partial) holds a byte (for --code-at, OUT itself).

Modes: one = this process alone with torch's default threads (`--processes 1`); threads1 = the same with
OMP_NUM_THREADS=1; two = `--processes 2` (two single-thread workers); torchrun = two ranks of one thread; ct2 =
`--engine ctranslate2`, one process; ct2two = `--engine ctranslate2 --processes 2` of an export folder.
--code-at COMMIT: the same input decoded by the code of that commit (checked out into a temporary worktree and
run with this interpreter), as the "before" figure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("one", "threads1", "two", "torchrun", "ct2", "ct2two")


def write_sources(path: Path, lines: int, seed: int = 1235) -> Path:
    """`lines` random quick-start sources (symbols 0-9 a-z, 1-12 of them), written in chunks."""
    import numpy as np

    rng = np.random.RandomState(seed)
    symbols = np.array(list("0123456789abcdefghijklmnopqrstuvwxyz"))
    with path.open("w") as out:
        for start in range(0, lines, 100_000):
            count = min(100_000, lines - start)
            lengths = rng.randint(1, 13, size=count)
            picks = rng.randint(0, len(symbols), size=(count, 12))
            out.write("".join(" ".join(symbols[row[:n]]) + "\n" for row, n in zip(picks, lengths)))
    return path


def tree_rss(pid: int) -> int:
    """Resident bytes of pid and all its descendants (from /proc; 0 once it is gone)."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    stack.extend(int(c) for c in children.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def measure(command: list[str], env: dict[str, str], first_file: Path, cwd: Path = REPO) -> dict:
    """Run command to its end; seconds, peak tree RSS (MB) and seconds to the first byte in first_file."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    peak, first = 0, None
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)
    reader.start()
    while process.poll() is None:
        peak = max(peak, tree_rss(process.pid))
        if first is None and first_file.exists() and first_file.stat().st_size > 0:
            first = time.perf_counter() - started
        time.sleep(0.1)
    seconds = time.perf_counter() - started
    reader.join()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{''.join(errors)[-3000:]}")
    return {"seconds": seconds, "peak_mb": peak / 2**20, "first_s": first if first is not None else seconds}


def command_for(mode: str, run: str, given: Path, out: Path, sets: list[str], export: Path | None,
                python: str = sys.executable) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ}
    base = ["decode", run, "--input", str(given), "-o", str(out), *[a for s in sets for a in ("--set", s)]]
    if mode == "one":
        return [python, "-m", "seqxduce", *base, "--processes", "1"], env
    if mode == "threads1":
        return [python, "-m", "seqxduce", *base, "--processes", "1"], {**env, "OMP_NUM_THREADS": "1"}
    if mode == "two":
        return [python, "-m", "seqxduce", *base, "--processes", "2"], env
    if mode == "torchrun":
        return ([python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "seqxduce",
                 *base], {**env, "OMP_NUM_THREADS": "1"})
    if mode == "ct2":
        return [python, "-m", "seqxduce", *base, "--engine", "ctranslate2", "--processes", "1"], env
    if mode == "ct2two":
        assert export is not None
        ct2 = ["decode", str(export), "--input", str(given), "-o", str(out), *[a for s in sets for a in ("--set", s)]]
        return [python, "-m", "seqxduce", *ct2, "--engine", "ctranslate2", "--processes", "2"], env
    raise SystemExit(f"unknown mode {mode}")


def before(commit: str, run: str, given: Path, out: Path, sets: list[str], work: Path) -> dict:
    """The same decode by the code of `commit` (a detached worktree, imported first on PYTHONPATH)."""
    tree = work / f"code-{commit}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
    code = ("import sys; sys.argv = ['seqxduce'] + sys.argv[1:]; from seqxduce.cli import main; main()")
    command = [sys.executable, "-c", code, "decode", run, "--input", str(given), "-o", str(out),
               *[a for s in sets for a in ("--set", s)]]
    # the built-in plugins are installed under other names (seqxduce_transformer is plugins/transformer): links
    # by those names put the old tree's plugins first on the path, before the installed ones
    shim = work / f"plugins-{commit}"
    shim.mkdir(exist_ok=True)
    for plugin in (tree / "plugins").iterdir():
        link = shim / f"seqxduce_{plugin.name}"
        if (plugin / "__init__.py").exists() and not link.exists():
            link.symlink_to(plugin)
    env = {**os.environ, "PYTHONPATH": f"{tree}:{shim}"}
    try:
        return measure(command, env, out, cwd=tree)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a trained run directory (e.g. runs/quickstart)")
    parser.add_argument("--lines", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=["one", "two"])
    parser.add_argument("--set", dest="sets", action="append", default=None,
                        help="recipe overrides for the decode (default: decode.name=greedy)")
    parser.add_argument("--code-at", help="also decode with the code of this commit (the figure before)")
    parser.add_argument("--work", type=Path, help="folder for inputs and outputs (default: a temporary one)")
    args = parser.parse_args(argv)
    sets = args.sets if args.sets is not None else ["decode.name=greedy"]
    work = args.work or Path(tempfile.mkdtemp(prefix="decode-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    export = None
    if "ct2two" in args.modes:
        export = work / "export"
        if not export.exists():
            subprocess.run([sys.executable, "-m", "seqxduce", "export", args.run, "-o", str(export)], check=True,
                           cwd=REPO, capture_output=True)
    print(f"{'lines':>9} {'mode':>9} {'seconds':>9} {'lines/s':>9} {'peak MB':>9} {'first s':>8}")
    for lines in args.lines:
        given = work / f"sources-{lines}.txt"
        if not given.exists():
            write_sources(given, lines)
        rows = [(mode, *command_for(mode, args.run, given, work / f"out-{mode}-{lines}.txt", sets, export))
                for mode in args.modes]
        outputs = {}
        for mode, command, env in rows:
            out = work / f"out-{mode}-{lines}.txt"
            out.unlink(missing_ok=True)
            figures = measure(command, env, out.with_name(out.name + ".partial"))
            outputs[mode] = out
            print(f"{lines:>9,} {mode:>9} {figures['seconds']:>9.1f} {lines / figures['seconds']:>9,.0f} "
                  f"{figures['peak_mb']:>9.0f} {figures['first_s']:>8.1f}", flush=True)
        if args.code_at:
            out = work / f"out-before-{lines}.txt"
            out.unlink(missing_ok=True)
            figures = before(args.code_at, args.run, given, out, sets, work)
            outputs["before"] = out
            print(f"{lines:>9,} {args.code_at[:9]:>9} {figures['seconds']:>9.1f} {lines / figures['seconds']:>9,.0f} "
                  f"{figures['peak_mb']:>9.0f} {figures['first_s']:>8.1f}", flush=True)
        native = [m for m in outputs if not m.startswith("ct2") and m != "before"]
        same = len({outputs[m].read_bytes() for m in native}) <= 1
        print(f"{'':>9} outputs of {', '.join(native)}: {'identical' if same else 'DIFFER'}", flush=True)
        if "before" in outputs and native:  # the code before sorted the whole input: other batches, same texts?
            ours, theirs = outputs[native[0]].read_text().splitlines(), outputs["before"].read_text().splitlines()
            equal = sum(a == b for a, b in zip(ours, theirs))
            print(f"{'':>9} {native[0]} against {args.code_at[:9]}: {equal:,} of {len(theirs):,} lines equal",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
