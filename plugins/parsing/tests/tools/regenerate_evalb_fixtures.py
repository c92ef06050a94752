"""Regenerate the expected outputs of plugins/parsing/tests/fixtures/evalb_adversarial/ from a real EVALB build.

    python plugins/parsing/tests/tools/regenerate_evalb_fixtures.py PATH/TO/EVALB  # folder with evalb.c, COLLINS.prm

The folder is copied to a temporary place and built twice with `make`: as distributed, and with its fixed
buffers enlarged (lines of 5000 bytes, 200 words, 200 brackets, words of 100 and labels of 30 bytes). For each
pair NAME.gold / NAME.test it writes what `evalb -p COLLINS.prm NAME.gold NAME.test` prints:

- NAME.evalb, NAME.stderr: the program as distributed (its stdout and stderr, byte for byte);
- NAME.no_error_limit.evalb / .stderr: where that run stopped without a summary, the same build with
  `-e 1000000` (MAX_ERROR lifted), when that run ends (a line EVALB cannot read makes it loop: no file then);
- NAME.big_buffers.evalb / .stderr: for the cases named limit_*, the build with enlarged buffers.

plugins/parsing/tests/test_parsing_evalb_adversarial.py compares the project's scorer with these files; it never
needs EVALB.
Run this only to add a case or to check the files against another build; commit what it writes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "evalb_adversarial"
# evalb.c's fixed sizes, and the larger ones of the big-buffer build
BIGGER = {"MAX_SENT_LEN": 100000, "MAX_WORD_IN_SENT": 2000, "MAX_BRACKET_IN_SENT": 2000, "MAX_WORD_LEN": 1000,
          "MAX_LABEL_LEN": 300}
TIMEOUT_S = 20


def build(source: Path, where: Path, big_buffers: bool) -> Path:
    """Copy the EVALB folder to `where` and run make there (with enlarged buffers if asked); the binary's path."""
    shutil.copytree(source, where)
    if big_buffers:
        code = (where / "evalb.c").read_text(encoding="latin-1")
        for name, size in BIGGER.items():
            code = re.sub(rf"#define {name}\s+\d+", f"#define {name} {size}", code)
        # main's line buffers, and calc_result's per-bracket flags, are literal sizes rather than the macros
        code = code.replace("buff[5000]", "buff[MAX_SENT_LEN]").replace("buff1[5000]", "buff1[MAX_SENT_LEN]")
        code = code.replace("fgets(buff,5000,", "fgets(buff,MAX_SENT_LEN,")
        code = code.replace("char match_j[200]", "char match_j[MAX_BRACKET_IN_SENT]")
        (where / "evalb.c").write_text(code, encoding="latin-1")
    subprocess.run(["make", "-s", "-C", str(where)], check=True, capture_output=True)
    return where / "evalb"


def run(binary: Path, gold: Path, test: Path, *extra: str) -> subprocess.CompletedProcess | None:
    """EVALB's stdout and stderr (bytes) on one pair, or None when it runs past the time limit."""
    # options after -p: the parameter file's MAX_ERROR would otherwise override an earlier -e
    command = [str(binary), "-p", str(binary.parent / "COLLINS.prm"), *extra, str(gold), str(test)]
    try:
        return subprocess.run(command, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None


def write(stem: Path, suffix: str, result: subprocess.CompletedProcess | None) -> None:
    """Store a run's stdout and stderr as STEM{suffix}.evalb / .stderr; remove them when there is no run."""
    out, err = stem.with_name(stem.name + suffix + ".evalb"), stem.with_name(stem.name + suffix + ".stderr")
    if result is None:
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
        return
    out.write_bytes(result.stdout)
    err.write_bytes(result.stderr)


def summarised(result: subprocess.CompletedProcess) -> bool:
    """Whether EVALB got to its summary (it stops with exit status 1 and no summary otherwise)."""
    return result.returncode == 0 and b"=== Summary ===" in result.stdout


def main(source: Path) -> None:
    """Rebuild EVALB from `source` and rewrite every expected output."""
    if not (source / "evalb.c").is_file():
        sys.exit(f"{source}: no evalb.c there; give the EVALB folder (e.g. ../shared/tools/EVALB)")
    with tempfile.TemporaryDirectory() as tmp:
        plain = build(source, Path(tmp) / "plain", big_buffers=False)
        big = build(source, Path(tmp) / "big", big_buffers=True)
        cases = sorted(FIXTURES.glob("*.gold"))
        for gold in cases:
            stem = gold.with_suffix("")
            test = stem.with_suffix(".test")
            result = run(plain, gold, test)
            if result is None:
                sys.exit(f"{stem.name}: EVALB ran for more than {TIMEOUT_S} s")
            write(stem, "", result)
            unlimited = None
            if not summarised(result):
                unlimited = run(plain, gold, test, "-e", "1000000")
                unlimited = unlimited if unlimited is not None and summarised(unlimited) else None
            write(stem, ".no_error_limit", unlimited)
            write(stem, ".big_buffers", run(big, gold, test) if stem.name.startswith("limit_") else None)
            print(f"{stem.name:40s} {'summary' if summarised(result) else 'stopped'}"
                  f"{' (summary with -e 1000000)' if unlimited else ''}")
    print(f"{len(cases)} cases written under {FIXTURES}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]).resolve())
