"""Every `seqxduce` command shown in README.md, CONTRIBUTING.md and docs/coming-from.md runs, so the documents
cannot drift from the CLI.

The fenced ```bash blocks of each document are read in order and their `seqxduce ...` commands (and `python -c`,
and `echo TEXT | seqxduce ...`) run in one temporary folder per document, where `recipes/` is the checkout's.
Training is made tiny: every `seqxduce train` gets --set overrides for a few steps of a small model (only those
keys its recipe has). A comment on the line before a block steers it:

    <!-- doc-test: skip (why) -->             the block is not run (a GPU, a download, an hour): say why
    <!-- doc-test: file NAME -->              the block (e.g. a recipe) is written to NAME instead of run
    <!-- doc-test: setup parallel-text DIR --> before the block, DIR gets tiny train/valid/test .en/.de files
    <!-- doc-test: setup treebank DIR -->     before the block, DIR gets tiny wsj_0001-0004.mrg treebank files
    <!-- doc-test: setup marian DIR -->       before the block, DIR gets a tiny Marian model in the Hugging Face
                                              format (as an OPUS-MT download), over the parallel-text words

`cat FILE... > OUT` lines run too (the back-translation section joins files with them); lines of other programs
(pip, ruff, pytest, torchrun) are not run.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce.recipe import load_recipe

REPOSITORY = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "CONTRIBUTING.md", "docs/coming-from.md")
MARKER = re.compile(r"<!--\s*doc-test:\s*(?P<kind>skip|file|setup)\b\s*(?P<rest>.*?)\s*-->")
MAX_SKIPS = 6  # a document that cannot run most of its commands has drifted from what a user can do

# a few steps of a small model, each applied only where the recipe declares the key
TINY_TRAIN = {
    "train.max_steps": "2", "train.checkpoint_every": "1", "train.keep_checkpoints": "2", "train.average_last": "2",
    "train.validate_every": "0", "train.valid_decode_examples": "4", "train.members": "1",
    "model.layers": "1", "model.d_model": "32", "model.d_ff": "64", "model.heads": "2",
    "tokenizer.vocab_size": "60", "decode.beam": "2",
    "task.train_size": "200", "task.valid_size": "10", "task.test_size": "10", "task.size": "100",
}
# an untrained model's outputs stay short (a tree needs room for each word, its tag and the brackets to close)
TINY_SEARCH = {"decode.max_len_a": "0", "decode.max_len_b": "4"}
TINY_TREES = {"decode.max_len_a": "3", "decode.max_len_b": "4"}


@dataclass
class Block:
    """One fenced block: where it is, its language, its text and the doc-test marker before it."""

    document: str
    line: int
    language: str
    text: str
    marker: str  # "" (none), "skip", "file" or "setup"
    argument: str

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def blocks(document: str) -> list[Block]:
    """The fenced blocks of a document with the doc-test marker on the last non-blank line before each."""
    lines = (REPOSITORY / document).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(before)
        found.append(Block(document, i + 1, fence.group(1), "\n".join(lines[i + 1:end]),
                           marker.group("kind") if marker else "", marker.group("rest") if marker else ""))
        i = end + 1
    return found


def commands(text: str) -> list[list[str]]:
    """The simple commands of a bash block: continuation lines joined, quotes kept together across lines,
    comments dropped, and split at `&&`, `;` and `|` (a pipe's commands stay together, `|` included)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        pending = f"{pending}\n{raw}" if pending else raw
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on on the next line
            continue
        logical.append(pending)
        pending = ""
    result: list[list[str]] = []
    for line in logical:
        current: list[str] = []
        for token in shlex.split(line, comments=True):
            if token in ("&&", ";"):
                result.append(current)
                current = []
            else:
                current.append(token)
        result.append(current)
    return [c for c in result if c]


def runnable(command: list[str]) -> bool:
    """Whether the test runs a command: seqxduce itself, `python -c`, or text piped into seqxduce."""
    if command[0] == "seqxduce":
        return True
    if command[0] in ("python", "python3") and command[1:2] == ["-c"]:
        return True
    if command[0] == "cat" and command[-2:-1] == [">"]:
        return True
    return command[0] == "echo" and "|" in command and command[command.index("|") + 1] == "seqxduce"


def tiny(args: list[str], cwd: Path) -> list[str]:
    """A `train`, `prepare` or `distill` command's arguments with the TINY_* overrides its recipe has keys for."""
    named = args[2] if args[0] == "distill" else args[1]  # distill TEACHER_RUN RECIPE
    recipe_file = Path(named) if Path(named).is_absolute() else cwd / named
    given = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--set"]
    recipe = load_recipe(recipe_file, given)
    sections = {"train": recipe.train, "model": recipe.model.settings, "tokenizer": recipe.tokenizer.settings,
                "decode": recipe.decode.settings, "task": recipe.task.settings}
    search = TINY_TREES if recipe.decode.component.name == "tree_beam" else TINY_SEARCH
    extra: list[str] = []
    tiny = dict(TINY_TRAIN)
    if any(g.startswith("train.patience=") for g in given):  # early stopping counts validations: keep some
        tiny["train.validate_every"] = "1"
    # fine-tuning a run with its own recipe (an import's): its architecture and vocabulary are already the run's
    init = args[args.index("--init-from") + 1] if "--init-from" in args[:-1] else None
    fine_tuning = init is not None and recipe_file.resolve().parent == (cwd / init).resolve()
    for key, value in {**tiny, **search}.items():
        section, name = key.split(".")
        if fine_tuning and section in ("model", "tokenizer"):
            continue
        if hasattr(sections[section], name) and not any(g.startswith(f"{key}=") for g in given):
            extra += ["--set", f"{key}={value}"]
    return args + extra


def setup(kind_and_dir: str, cwd: Path) -> None:
    """Write the tiny data a `setup` marker asks for."""
    kind, folder = kind_and_dir.split()
    where = cwd / folder
    where.mkdir(parents=True, exist_ok=True)
    nouns = [("cat", "Katze"), ("dog", "Hund"), ("man", "Mann"), ("woman", "Frau"), ("child", "Kind")]
    verbs = [("runs", "rennt"), ("sleeps", "schläft"), ("eats", "isst"), ("sings", "singt")]
    pairs = [(f"The {n} {v} .", f"Die {m} {w} .") for n, m in nouns for v, w in verbs]
    if kind == "marian":
        from seqxduce_marian.testing import build_tiny_marian

        build_tiny_marian(where, text=[s for pair in pairs for s in pair], pieces=50, train_steps=30)
    elif kind == "parallel-text":
        for split, chosen in (("train", pairs * 3), ("valid", pairs[:6]), ("test", pairs[6:12])):
            (where / f"{split}.en").write_text("".join(s + "\n" for s, _ in chosen), encoding="utf-8")
            (where / f"{split}.de").write_text("".join(t + "\n" for _, t in chosen), encoding="utf-8")
        # German text without translations, for the back-translation section
        (where / "mono.de").write_text("".join(t + "\n" for _, t in reversed(pairs)), encoding="utf-8")
    elif kind == "treebank":
        trees = ["(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))",
                 "(S (NP (DT A) (NN dog)) (VP (VBD ran)) (. .))",
                 "(S (NP (PRP He)) (VP (VBD saw) (NP (DT the) (NN dog))) (. .))"]
        for number in range(1, 5):
            (where / f"wsj_{number:04d}.mrg").write_text("".join(f"( {t} )\n" for t in trees), encoding="utf-8")
    else:
        raise AssertionError(f"unknown doc-test setup {kind!r}")


def run(command: list[str], cwd: Path, where: Block) -> None:
    """Run one command of a block in cwd; a non-zero exit fails the test, naming the block and the command."""
    text = shlex.join(command)
    stdin = None
    if command[0] == "echo":
        bar = command.index("|")
        stdin = " ".join(command[1:bar]) + "\n"
        command = command[bar + 1:]
    command = [os.path.expandvars(a.replace("$PWD", str(cwd))) for a in command]
    from seqxduce.cli import add_plugin_commands

    args = command[1:]
    if command[0] == "seqxduce" and args and args[0] in ("train", "prepare", "distill"):  # prepare: the tokenizer
        args = tiny(args, cwd)
    if command[0] == "cat":  # `cat A B > C`, as the shell would
        out = cwd / command[-1]
        out.write_bytes(b"".join((cwd / name).read_bytes() for name in command[1:-2]))
        return
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        if command[0] in ("python", "python3"):  # `python -c CODE`, run here: torch is imported once
            exec(compile(args[1], f"{where} python -c", "exec"), {"__name__": "__main__"})
            return
        result = CliRunner().invoke(add_plugin_commands(), args, input=stdin, catch_exceptions=True)
    finally:
        os.chdir(previous)
    assert result.exit_code == 0, f"{where}: {text}\n{result.output}\n{result.exception!r}"


def document_blocks() -> list[Block]:
    return [b for d in DOCUMENTS for b in blocks(d)]


def test_every_skip_says_why_and_they_are_few():
    skips = [b for b in document_blocks() if b.marker == "skip"]
    for block in skips:
        reason = re.fullmatch(r"\((.+)\)", block.argument)
        assert reason and len(reason.group(1).split()) >= 2, f"{block}: a skip says why: <!-- doc-test: skip (why) -->"
    assert len(skips) <= MAX_SKIPS, f"{len(skips)} blocks skipped: {', '.join(map(str, skips))}"


def test_the_documents_show_commands_the_test_runs():
    """The parser finds what it should: without any runnable block the other test would pass vacuously."""
    runnable_blocks = [b for b in document_blocks() if b.language == "bash" and b.marker != "skip"
                       and any(runnable(c) for c in commands(b.text))]
    assert {b.document for b in runnable_blocks} == set(DOCUMENTS)


def test_commands_are_split_as_bash_splits_them():
    text = 'seqxduce a && seqxduce b --x "1 2" # note\nseqxduce c \\\n  --y 3\npython -c "\nprint(1)"'
    assert commands(text) == [["seqxduce", "a"], ["seqxduce", "b", "--x", "1 2"], ["seqxduce", "c", "--y", "3"],
                              ["python", "-c", "\nprint(1)"]]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_command_of_the_document_runs(document, tmp_path, monkeypatch):
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "recipes").symlink_to(REPOSITORY / "recipes")
    ran = 0
    for block in blocks(document):
        if block.marker == "skip":
            continue
        if block.marker == "file":
            (work / block.argument).write_text(block.text + "\n", encoding="utf-8")
            continue
        if block.language != "bash":
            continue
        if block.marker == "setup":
            setup(block.argument, work)
        for command in commands(block.text):
            if runnable(command):
                run(command, work, block)
                ran += 1
    assert ran > 0
