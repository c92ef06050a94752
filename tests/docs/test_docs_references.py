"""The documents name only what exists: every repository path and core module in README, CONTRIBUTING,
ARCHITECTURE, docs/ and RESULTS; every commit RESULTS cites is in the history; RESULTS is one page; the
checkout's root holds only what ARCHITECTURE's layout names."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "RESULTS.md"
DOCUMENTS = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "ARCHITECTURE.md", RESULTS,
             *sorted((REPO / "docs").glob("*.md"))]
# a path the reader's own run, data or machine holds, not the repository
NOT_OURS = ("runs/", "data/", "mine", "my", "/", "~", "$", "..", "RUN", "DIR", "<", "path/", "shared/", "own",
            "docs-check/", "qs", "tmp", "mydata", "out")
TOP = {p.name for p in REPO.iterdir()}
PATH = re.compile(r"(?<![\w./~$<-])((?:[\w.-]+/)+[\w.-]*)")
MODULE = re.compile(r"\bseqxduce(?:\.[a-z_][a-z0-9_]*)+")
COMMIT = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")


def _paths(text: str) -> set[str]:
    """Paths relative to the repository's root: those that start with one of its top-level entries."""
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".,:;)")
        if text[match.end():match.end() + 1] in "*{<[":  # a pattern (recipes/ut_*.toml), not a path
            continue
        if path.split("/")[0] in TOP and not path.startswith(NOT_OURS) and not re.search(r"[*{<]|\bN\b|X", path):
            found.add(path)
    return found


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_repository_path_a_document_names_exists(document):
    missing = sorted(p for p in _paths(document.read_text(encoding="utf-8")) if not (REPO / p).exists())
    assert not missing, f"{document.relative_to(REPO)} names paths that do not exist: {missing}"


def _module_exists(dotted: str) -> bool:
    """A core module, or an attribute of one (seqxduce.score, seqxduce.testing.HostReads)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a name inside a module, not a submodule
            spec = None
        if spec is not None:
            obj = importlib.import_module(name)
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return False
            return True
    return False


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_core_module_a_document_names_exists(document):
    named = set(MODULE.findall(document.read_text(encoding="utf-8")))
    missing = sorted(m for m in named if not _module_exists(m))
    assert not missing, f"{document.relative_to(REPO)} names modules that do not exist: {missing}"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def test_every_commit_results_cites_is_in_the_history():
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("not a full git checkout: the history is not here to look commits up in")
    cited = {c for c in COMMIT.findall(RESULTS.read_text(encoding="utf-8")) if re.search(r"[a-f]", c)
             and re.search(r"\d", c)}
    assert cited
    missing = sorted(c for c in cited if _git("cat-file", "-e", f"{c}^{{commit}}").returncode != 0)
    assert not missing, f"bench/RESULTS.md cites commits that are not in the history: {missing}"


def test_results_is_one_page():
    lines = len(RESULTS.read_text(encoding="utf-8").splitlines())
    assert lines < 400, f"bench/RESULTS.md has {lines} lines: move what is not current to bench/log/"


def test_the_root_holds_only_what_the_layout_names():
    listed = _git("ls-files")
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    tracked = {line.split("/")[0] for line in listed.stdout.splitlines()}
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    layout = text[text.index("## The parts"):text.index("### Borders")]
    unnamed = sorted(name for name in tracked if not re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", layout))
    assert not unnamed, f"the root holds files ARCHITECTURE.md's layout does not name: {unnamed}"


def test_the_checks_see_a_path_a_module_or_a_commit_that_is_not_there():
    assert _paths("see seqxduce/training/no_such.py and runs/mine/x.pt, recipes/ut_*.toml") == {
        "seqxduce/training/no_such.py"}
    assert not _module_exists("seqxduce.training.no_such") and _module_exists("seqxduce.corpus.prepare")
    assert not _module_exists("seqxduce.testing.NoSuchHelper") and _module_exists("seqxduce.testing.HostReads")
    assert _git("cat-file", "-e", "DECff2a38a^{commit}").returncode != 0
