"""`seqxduce distill` with a parsing teacher: its outputs are kept as the task's training targets are written (the
linearized tree with the source's words, not the tree `decode` prints), so the student learns the targets its
constrained search writes, and its outputs are trees over the source's words; `decode --as-targets` writes the
same lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from nltk.tree import Tree

from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.decode import decode_lines, load_run
from seqxduce.testing import repository_root

RECIPE = repository_root(Path(__file__)) / "recipes" / "ptb_sample.toml"
STUDENT = RECIPE.with_name("ptb_sample_student.toml")
SETTINGS = ["task.train_files=0001-0003", "task.valid_files=0160", "task.test_files=0160", "model.layers=1",
            "model.d_model=32", "model.d_ff=64", "model.heads=2", "train.max_steps=20", "train.max_tokens=1024",
            "train.warmup_steps=4", "train.validate_every=0", "train.checkpoint_every=20", "train.average_last=1",
            "train.members=1", "decode.beam=2"]
BRACKETS = ("(", ")")


def invoke(*args: object, env: dict | None = None):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args], env=env)


def with_settings(args: list[str], ptb_sample: Path, *more: str) -> list[str]:
    for setting in [*SETTINGS, f"task.data_dir={ptb_sample}", *more]:
        args += ["--set", setting]
    return args


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, ptb_sample) -> tuple[Path, Path, Path]:
    """A tiny parsing teacher, the shipped student recipe's student of one decoder layer distilled from it alone
    (no original pairs), and the distilled set's folder."""
    root = tmp_path_factory.mktemp("parse_distill")
    teacher, student, cache = root / "teacher", root / "student", root / "cache"
    result = invoke(*with_settings(["train", str(RECIPE), "--out", str(teacher)], ptb_sample))
    assert result.exit_code == 0, result.output
    # any teacher (the recipe's own is refused: its files are cut to three here and its model made tiny), distilled
    # pairs only
    args = with_settings(["distill", str(teacher), str(STUDENT), "--out", str(student)], ptb_sample,
                         "distill.teacher=", "distill.original_ratio=0.0", "model.encoder_layers=2",
                         "model.decoder_layers=1")
    result = invoke(*args, env={"SEQXDUCE_CACHE": str(cache)})
    assert result.exit_code == 0, result.output
    (folder,) = cache.glob("distilled-*")
    return teacher, student, folder


def words_of(target: str) -> list[str]:
    """The words of a linearized target with words ahead: its tokens that are not brackets alternate word, tag,
    word, tag, ... (the first word, then each leaf's tag and the word after it)."""
    return [t for t in target.split() if not t.startswith(BRACKETS)][0::2]


def test_the_distilled_targets_are_linearized_trees_over_the_source_words(distilled):
    teacher, _, folder = distilled
    sources = (folder / "sources.txt").read_text(encoding="utf-8").splitlines()
    targets = (folder / "targets.txt").read_text(encoding="utf-8").splitlines()
    originals = (folder / "originals.txt").read_text(encoding="utf-8").splitlines()
    assert len(sources) == len(targets) == len(originals) > 20
    for source, target, original in zip(sources, targets, originals, strict=True):
        assert not target.startswith("("), "a tree as decode prints it, not a training target"
        assert words_of(target) == source.split() == words_of(original), "the source's words, each in its place"
        opened = [t for t in target.split() if t.startswith("(")]
        assert len(opened) == len([t for t in target.split() if t.startswith(")")]) > 0, "brackets unbalanced"
    loaded = load_run(teacher)
    printed = decode_lines(loaded, sources[:5])
    for output, target in zip(printed, targets[:5], strict=False):
        assert output.text.startswith("(")  # the tree decode prints: another form, the same parse
        assert Tree.fromstring(output.text).leaves() == output.source.split()
        assert loaded.task.training_target(output.nbest[0][0], output.source) == target


def test_decode_as_targets_writes_the_lines_the_distillation_kept(distilled, tmp_path: Path):
    teacher, _, folder = distilled
    sources = folder / "sources.txt"
    out = tmp_path / "targets.txt"
    result = invoke("decode", teacher, "--input", sources, "-o", out, "--as-targets", "--processes", "1")
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == (folder / "targets.txt").read_text(encoding="utf-8")
    plain = invoke("decode", teacher, "--input", sources, "--processes", "1")
    assert plain.exit_code == 0, plain.output
    assert plain.stdout.splitlines()[0].startswith("(")


def test_the_students_outputs_are_trees_over_the_source_words(distilled, ptb_sample: Path):
    _, student, _ = distilled
    loaded = load_run(student)
    sentences = ["The cat sat on the mat .", "Pierre Vinken will join the board ."]
    for output in decode_lines(loaded, sentences):
        tree = Tree.fromstring(output.text)
        assert tree.leaves() == output.source.split()
        assert output.figures.get("repairs", 0) == 0, "the constrained search wrote a tree that needed repairs"
