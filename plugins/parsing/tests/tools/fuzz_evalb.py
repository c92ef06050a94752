"""Compare the project's EVALB with the original on randomly damaged trees (a differential fuzzer).

    python plugins/parsing/tests/tools/fuzz_evalb.py PATH/TO/EVALB GOLD_FILE
        [--rounds 200] [--lines 30] [--seed 0] [--rate 0.5]

Builds EVALB from PATH/TO/EVALB (a copy, with `make`), then for each round writes GOLD_FILE's lines, randomly
damaged (deleted or inserted characters and brackets, tags changed to punctuation, TOP, -NONE- or nothing,
labels with '-' and '=', no-break spaces, NUL bytes, extra lines...), as a gold and a test file, and checks
that the project prints what EVALB prints: the whole output where EVALB gets to its summary (or does with
`-e 1000000`), else the rows before it stops and the line where it stops. Rounds with a line beyond EVALB's
fixed buffers, or on which its behaviour is undefined, are passed over. Prints each disagreement (the files are
kept under --keep) and counts at the end; exits 1 if any.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from seqxduce_parsing import evalb
from seqxduce_parsing.evalb_read import file_lines

TAGS = [b",", b".", b":", b"``", b"''", b"TOP", b"-NONE-", b"", b"NN", b"PRT", b"ADVP", b"XX", b"-LRB-"]
LABELS = [b"-LRB-", b"TOP", b"", b"NP-SBJ=2", b"ADVP", b"PRT", b".", b"-NONE-", b"S-1", b"=X", b"ROOT"]
NOISE = [b"(", b")", b" ", b"\t", b"\xc2\xa0", b"\x00", b"x", b"-", b"=", b"\r", b"\xe9"]


def mutate(line: bytes, rng: random.Random) -> bytes:
    """One random damage to a tree line."""
    kind = rng.randrange(9)
    if not line:
        return rng.choice([b"", b"(S (NN x))", b"x"])
    i = rng.randrange(len(line))
    if kind == 0:
        return line[:i] + line[i + 1:]
    if kind == 1:
        return line[:i] + rng.choice(NOISE) + line[i:]
    if kind in (2, 3):  # a tag: the label of a '(' followed by a label, a space and a word
        spots = [j for j in range(len(line)) if line[j:j + 1] == b"(" and b"(" not in line[j + 1:j + 30].split(b")")[0]]
        if spots:
            j = rng.choice(spots)
            end = line.index(b" ", j) if b" " in line[j:] else j + 1
            return line[:j + 1] + rng.choice(TAGS) + line[end:]
    if kind == 4:  # a phrase label
        spots = [j for j in range(len(line) - 1) if line[j:j + 2] == b"((" or line[j:j + 1] == b"(" and
                 b"(" in line[j + 1:j + 30].split(b")")[0]]
        if spots:
            j = rng.choice(spots)
            end = j + 1
            while end < len(line) and line[end:end + 1] not in (b" ", b"(", b")"):
                end += 1
            return line[:j + 1] + rng.choice(LABELS) + line[end:]
    if kind == 5:  # drop a preterminal (a word and its tag)
        spots = [j for j in range(len(line)) if line[j:j + 1] == b"(" and b"(" not in line[j + 1:].split(b")")[0]]
        if spots:
            j = rng.choice(spots)
            close = line.find(b")", j)
            return line[:j] + (line[close + 1:] if close >= 0 else b"")
    if kind == 6:
        return line + rng.choice([b")", b"))", b" (S (NN y))", b"("])
    if kind == 7:
        return line.replace(b" ", rng.choice([b"\xc2\xa0", b"\t", b"  "]), 1)
    return line.replace(b"(", b"", 1) if rng.random() < 0.5 else line[:i] + b")" + line[i:]


def damaged(lines: list[bytes], rng: random.Random, rate: float) -> list[bytes]:
    out = []
    for line in lines:
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3]) if rng.random() < rate else 0):
            line = mutate(line, rng)
        out.append(line)
    if rng.random() < 0.1:
        out.append(b"")
    if rng.random() < 0.05 and out:
        out.pop(rng.randrange(len(out)))
    return out


def run(binary: Path, gold: Path, test: Path, *extra: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run([str(binary), "-p", str(binary.parent / "COLLINS.prm"), *extra, str(gold), str(test)],
                              capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return None


def disagreement(binary: Path, gold: Path, test: Path) -> tuple[str, str | None]:
    """How one pair of files was compared (whole, up to the stop, passed over), and why the project's output
    differs from EVALB's (None when it does not)."""
    ev = evalb.score_lines(file_lines(gold.read_bytes()), file_lines(test.read_bytes()))
    if ev.beyond_limits or ev.undefined:
        return "passed over", None
    plain = run(binary, gold, test)
    if plain is None:
        return "passed over", "EVALB ran past its time limit"
    ours = evalb.format_report(ev.scores)
    messages = "".join(f"{m}\n" for m in ev.messages)
    looping = plain.stderr.rstrip().endswith(b"Reading sentence")  # it would loop a million times: not worth it
    lifted = None if looping else run(binary, gold, test, "-e", "1000000")
    result = plain if b"=== Summary ===" in plain.stdout else lifted
    if result is not None and b"=== Summary ===" in result.stdout:
        if ours != result.stdout.decode("ascii"):
            return "whole", "stdout differs"
        if messages != result.stderr.decode("utf-8", errors="backslashreplace"):
            return "whole", "messages differ"
        if result is plain and ev.stop_line is not None:
            return "whole", f"the project says EVALB stops at line {ev.stop_line}; it does not"
        return "whole", None
    stop = int(plain.stderr.decode("utf-8", errors="backslashreplace").splitlines()[-1].split(" : ")[0])
    if ev.stop_line != stop:
        return "up to the stop", f"EVALB stops at line {stop}, the project says {ev.stop_line}"
    if evalb.format_table(ev.scores[:stop - 1]) != plain.stdout.decode("ascii"):
        return "up to the stop", "rows before the stop differ"
    return "up to the stop", None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evalb_dir", type=Path)
    parser.add_argument("gold", type=Path)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--lines", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.5, help="share of test lines damaged (gold: a fifth)")
    parser.add_argument("--keep", type=Path, default=Path("fuzz_disagreements"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    source = file_lines(args.gold.read_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(args.evalb_dir, Path(tmp) / "evalb")
        subprocess.run(["make", "-s", "-C", str(Path(tmp) / "evalb")], check=True, capture_output=True)
        binary = Path(tmp) / "evalb" / "evalb"
        failures = 0
        compared: Counter[str] = Counter()
        for round_ in range(args.rounds):
            start = rng.randrange(max(1, len(source) - args.lines))
            lines = [line.rstrip(b"\n") for line in source[start:start + args.lines]]
            gold, test = Path(tmp) / "gold", Path(tmp) / "test"
            gold.write_bytes(b"".join(x + b"\n" for x in damaged(lines, rng, args.rate / 5)))
            test.write_bytes(b"".join(x + b"\n" for x in damaged(lines, rng, args.rate)))
            how, why = disagreement(binary, gold, test)
            compared[how] += 1
            if why:
                failures += 1
                keep = args.keep / f"round{round_}"
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(gold, keep / "gold")
                shutil.copy(test, keep / "test")
                print(f"round {round_}: {why} (files in {keep})")
    print(f"{args.rounds} rounds of {args.lines} lines ({', '.join(f'{n} {how}' for how, n in compared.items())}): "
          f"{failures} disagreements")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
