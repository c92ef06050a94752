"""`seqxduce translate` and `seqxduce parse`: the core's prompt loop over a pipe and under a pseudo-terminal."""

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from seqxduce_parsing.commands import show_tree

from seqxduce import engine
from seqxduce.cli import add_plugin_commands
from seqxduce.testing import tiny_recipe
from tests.near_ties import assert_same_texts

PAIRS = [("a b c", "x y z"), ("a b", "x y"), ("b c", "y z"), ("c a", "z x"), ("a", "x"), ("b", "y"), ("c", "z"),
         ("c b a", "z y x")]
TREES = ["(S (NP (DT the) (NN cat)) (VP (VBD sat)) (. .))",
         "(S (NP (DT a) (NN dog)) (VP (VBD ran)) (. .))",
         "(S (NP (NNP Kim)) (VP (VBD saw) (NP (DT the) (NN dog))) (. .))",
         "(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (NNP Kim))) (. .))"]
TRAIN = {"max_tokens": 400, "max_steps": 4, "warmup_steps": 2, "log_every": 2, "validate_every": 0,
         "valid_decode_examples": 4}


def train(recipe: Path, out: Path) -> Path:
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(recipe), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory) -> Path:
    """A translation run on a few parallel lines (the `files` data set), trained 4 steps."""
    root = tmp_path_factory.mktemp("translation")
    for split in ("train", "valid", "test"):
        (root / f"{split}.en").write_text("".join(s + "\n" for s, _ in PAIRS))
        (root / f"{split}.de").write_text("".join(t + "\n" for _, t in PAIRS))
    recipe = root / "recipe.toml"
    recipe.write_text(tiny_recipe({"name": "translation", "dataset": "files", "data_dir": str(root)}, {"name": "word"},
                                  TRAIN, {"name": "beam", "beam": 2}))
    return train(recipe, root / "run")


@pytest.fixture(scope="module")
def parse_run(tmp_path_factory) -> Path:
    """A parsing run on four hand-written trees (one .mrg file per split), trained 4 steps."""
    root = tmp_path_factory.mktemp("parsing")
    for number in (1, 2, 3):
        (root / f"wsj_{number:04d}.mrg").write_text("".join(f"( {tree} )\n" for tree in TREES))
    recipe = root / "recipe.toml"
    recipe.write_text(tiny_recipe({"name": "ptb", "data_dir": str(root), "layout": "flat", "train_files": "0001",
                                   "valid_files": "0002", "test_files": "0003", "keep_pos_tags": True},
                                  {"name": "word", "shared": False}, TRAIN,
                                  {"name": "tree_beam", "beam": 3, "max_len_b": 40}))
    return train(recipe, root / "run")


def invoke(*args, input=None):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args], input=input)


def test_translate_over_a_pipe_answers_each_line(translation_run, tmp_path):
    result = invoke("translate", translation_run, "--history", tmp_path / "h", input="a b c\n\nb c\n")
    assert result.exit_code == 0, result.output
    expected = [o.text for o in engine.decode(translation_run, ["a b c", "b c"])]
    # one answer per line, an empty line for an empty line, no prompt in the answers; each line decoded alone,
    # expected in one batch: the same texts but for a near-tie (tests/near_ties.py)
    answers = result.stdout.splitlines()
    assert len(answers) == 3 and answers[1] == "", answers
    assert_same_texts(translation_run, ["a b c", "b c"], expected, [answers[0], answers[2]])
    assert not (tmp_path / "h").exists()  # no history over a pipe


def test_translate_nbest_shows_scores(translation_run):
    result = invoke("translate", translation_run, "--nbest", "2", input="a b\n")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line]
    assert len(lines) == 2
    scores = [float(line.split("\t")[0]) for line in lines]
    assert scores == sorted(scores, reverse=True)
    best = engine.decode(translation_run, ["a b"], overrides=["decode.nbest=2"])[0]
    assert [line.split("\t")[1] for line in lines] == [text for text, _ in best.nbest]


def test_nbest_wider_than_the_beam_widens_it(translation_run):
    result = invoke("translate", translation_run, "--nbest", "3", input="a b\n")
    assert result.exit_code == 0, result.output
    assert "beam 2 -> 3" in result.stderr
    assert len([line for line in result.stdout.splitlines() if line]) == 3


def test_nbest_with_a_decoder_that_gives_one_output_is_an_error(translation_run):
    result = invoke("translate", translation_run, "--nbest", "2", "--set", "decode.name=greedy", input="a\n")
    assert result.exit_code != 0
    assert "decoder 'greedy' gives one output per source" in result.output
    assert "Traceback" not in result.output


def test_parse_draws_trees_of_treebank_tokens(parse_run):
    result = invoke("parse", parse_run, input="the dog saw Kim.\n")
    assert result.exit_code == 0, result.output
    # "Kim." is split as the treebank writes it; the tree is drawn with the words along its bottom line
    drawing = result.stdout.rstrip("\n").splitlines()
    assert drawing[-1].split() == ["the", "dog", "saw", "Kim", "."]
    assert len(drawing) > 3 and any("_" in line for line in drawing)  # nltk draws branches with underscores
    flat = invoke("parse", parse_run, "--flat", input="the dog saw Kim.\n")
    tree = flat.stdout.strip()
    assert tree.startswith("(") and tree.endswith(")") and "\n" not in tree
    assert flat.stdout.strip() == engine.decode(parse_run, ["the dog saw Kim ."])[0].text


def test_parse_pretokenized_and_nbest(parse_run):
    result = invoke("parse", parse_run, "--pretokenized", "--flat", "--nbest", "2", input="the cat sat .\n")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line]
    assert len(lines) == 2 and all(line.split("\t")[1].startswith("(") for line in lines)
    drawn = invoke("parse", parse_run, "--pretokenized", "--nbest", "2", input="the cat sat .\n")
    assert drawn.stdout.count("score") == 2 and "#1 score" in drawn.stdout and "#2 score" in drawn.stdout


class Terminal:
    """`seqxduce ARGS` run under a pseudo-terminal, as a person at a keyboard would run it."""

    def __init__(self, args: list[str], tmp_path: Path):
        self.controller, terminal = pty.openpty()
        env = {**os.environ, "TERM": "dumb", "XDG_STATE_HOME": str(tmp_path / "state")}
        self.child = subprocess.Popen([sys.executable, "-m", "seqxduce", *args], stdin=terminal, stdout=terminal,
                                      stderr=terminal, env=env, close_fds=True)
        os.close(terminal)
        self.shown = b""  # everything the terminal showed
        self.read_to = 0  # how far expect() has matched

    def expect(self, wanted: str, timeout: float = 120.0) -> None:
        """Wait until `wanted` appears after what was matched before (failing after timeout seconds)."""
        deadline = time.monotonic() + timeout
        while (found := self.shown.find(wanted.encode(), self.read_to)) < 0:
            ready, _, _ = select.select([self.controller], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no {wanted!r} on the terminal; it showed {self.shown[-500:]!r}"
            try:
                self.shown += os.read(self.controller, 4096)
            except OSError:  # the child closed the terminal
                raise AssertionError(f"the command ended before {wanted!r}: {self.shown[-500:]!r}") from None
        self.read_to = found + len(wanted)

    def type(self, keys: bytes) -> None:
        os.write(self.controller, keys)

    def close(self) -> int:
        """Wait for the command to end; returns its exit code."""
        try:
            return self.child.wait(timeout=60)
        finally:
            if self.child.poll() is None:
                self.child.kill()
            os.close(self.controller)


def run_in_terminal(args: list[str], lines: list[str], answers: list[str] | None, tmp_path: Path
                    ) -> tuple[bytes, int]:
    """Type each line at the command's prompt, wait for its answer (None: whatever it is) and the next prompt,
    then press Ctrl-D."""
    terminal = Terminal(args, tmp_path)
    prompt = f"{args[0]}> "
    terminal.expect(prompt)
    for k, line in enumerate(lines):
        terminal.type(line.encode() + b"\n")
        if answers is not None:
            terminal.expect(answers[k])
        terminal.expect(prompt)
    terminal.type(b"\x04")  # Ctrl-D
    code = terminal.close()
    return terminal.shown, code


def test_translate_at_a_terminal_prompts_keeps_history_and_leaves_on_ctrl_d(translation_run, tmp_path):
    lines = ["a b c", "c a"]
    shown, code = run_in_terminal(["translate", str(translation_run)], lines, None, tmp_path)
    assert code == 0, shown
    # after each prompt: the line typed, echoed, then its answer (decoded alone in another process: decode's
    # but for a near-tie, tests/near_ties.py)
    after_prompts = shown.decode().replace("\r", "").split("translate> ")[1:1 + len(lines)]
    assert [part.split("\n")[0] for part in after_prompts] == lines, shown
    expected = [o.text for o in engine.decode(translation_run, lines)]
    assert_same_texts(translation_run, lines, expected, [part.split("\n")[1] for part in after_prompts])
    assert b"Ctrl-D to leave" in shown and b"translate> " in shown
    history = tmp_path / "state" / "seqxduce" / "translate_history"
    assert history.read_text().splitlines()[-2:] == ["a b c", "c a"]


def test_parse_at_a_terminal_draws_the_tree(parse_run, tmp_path):
    drawing = show_tree(engine.decode(parse_run, ["the cat sat ."])[0].text)
    bottom = drawing.splitlines()[-1].rstrip()  # the words, spaced out under their branches
    assert bottom.split() == ["the", "cat", "sat", "."]
    shown, code = run_in_terminal(["parse", str(parse_run), "--history", str(tmp_path / "h")], ["the cat sat."],
                                  [bottom], tmp_path)
    assert code == 0, shown
    assert (tmp_path / "h").read_text().splitlines()[-1] == "the cat sat."
