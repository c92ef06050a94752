"""Distillation with a multilingual teacher (issue #77, item 5): a teacher of two pairs decodes each training source
of a student of the same two pairs as its direction (the tag in the source, or the target's tag forced as its first
token and kept in the target, as the student's targets have it), the student trains on both corpora, and a teacher
that tags otherwise, or does not know a student's language, is refused in one line before anything is decoded."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_multilingual import ONE_PAIR, RECIPE, WORDY, write_data

from seqxduce import engine
from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.corpus import binarized
from seqxduce.corpus.distilled import DistilledSet

STUDENT = ["train.validate_every=0", "train.max_steps=2", "train.checkpoint_every=2"]
PAIRS = 240


@pytest.fixture(scope="module")
def teachers(tmp_path_factory) -> dict[str, Path]:
    """A teacher of en→de and en→fr tagged each way, trained once for the module."""
    root = tmp_path_factory.mktemp("ml_distill")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQXDUCE_CACHE", str(root / "cache"))
        write_data(root / "data", {"train": PAIRS, "valid": 12, "test": 12})
        trained = {}
        for tag in ("source", "target"):
            (root / f"{tag}.toml").write_text(RECIPE.format(tag=tag), encoding="utf-8")
            trained[tag] = engine.train(root / f"{tag}.toml", root / f"teacher-{tag}", overrides=WORDY).run_dir
        yield trained


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("tag", ["source", "target"])
def test_the_teacher_decodes_each_source_as_its_direction_and_the_student_trains_on_both_corpora(teachers, cache,
                                                                                                tag):
    teacher = teachers[tag]
    student = teacher.parent / f"{tag}.toml"  # the teacher's recipe: the student takes its tokenizer files
    result = engine.distill(teacher, student, cache.parent / "student", overrides=STUDENT)
    assert result.step == 2
    (made,) = (DistilledSet(p) for p in cache.glob("distilled-*"))
    assert made.complete
    assert made.corpora.read_text().splitlines() == ["en-de"] * PAIRS + ["en-fr"] * PAIRS
    sources = made.sources.read_text().splitlines()
    targets = made.targets.read_text().splitlines()
    plain = (teacher.parent / "data" / "train.en").read_text().splitlines()
    # the teacher's outputs are what `decode --tgt-lang-column --as-targets` writes for the untagged sources, each
    # line in its direction
    column = cache.parent / "column.tsv"
    column.write_text("".join(f"{lang}\t{line}\n" for lang in ("de", "fr") for line in plain), encoding="utf-8")
    decoded = cache.parent / "decoded.txt"
    by_decode = CliRunner().invoke(add_plugin_commands(), ["decode", str(teacher), "--input", str(column),
                                                           "--tgt-lang-column", "--as-targets", "-o", str(decoded)])
    assert by_decode.exit_code == 0, by_decode.output
    assert made.targets.read_text() == decoded.read_text()
    for lang, part in (("de", slice(0, PAIRS)), ("fr", slice(PAIRS, 2 * PAIRS))):
        label = f"<2{lang}>"
        if tag == "source":
            assert sources[part] == [f"{label} {line}" for line in plain]  # the tag already in the source
            assert not made.prefixes.exists()
            assert not any(t.startswith("<2") for t in targets[part])
        else:
            assert sources[part] == plain  # untagged; the tag forced as the first target token and kept there
            assert made.prefixes.read_text().splitlines()[part] == [label] * PAIRS
            assert all(t == label or t.startswith(label + " ") for t in targets[part])
    # the student drew its batches across the two corpora: its prepared data hold both, each in its place
    metas = [binarized.read_meta(p) for p in cache.iterdir() if binarized.exists(p)]
    assert metas and all(m["corpora"] == [["en-de", PAIRS], ["en-fr", PAIRS]] for m in metas)


@pytest.mark.parametrize("teacher_tag, student, message", [
    ("source", "target", 'the teacher writes the target language as a tag at the start of the source (lang_tag = '
                         '"source") but the student forces the target language\'s tag as the first target token'),
    ("target", "source", 'give the student [task] lang_tag = "target"'),
    ("source", "one pair", 'give the student [task] lang_tag = "source" with its pairs as [[task.corpus]] tables'),
    ("source", "cs", "distill: the student's en-cs pairs: target language 'cs': the run never saw it; it writes de, "
                     "fr"),
])
def test_a_teacher_that_cannot_read_the_students_sources_is_refused_in_one_line(teachers, cache, teacher_tag,
                                                                                 student, message):
    folder = teachers[teacher_tag].parent
    recipe = cache.parent / "student.toml"
    if student == "one pair":
        text = ONE_PAIR
    elif student == "cs":  # a direction whose data do not even exist: refused before any is read
        text = RECIPE.format(tag="source").replace('tgt_lang = "fr"', 'tgt_lang = "cs"')
    else:
        text = RECIPE.format(tag=student)
    recipe.write_text(text.replace('data_dir = "data"', f'data_dir = "{folder / "data"}"'), encoding="utf-8")
    with pytest.raises(UserError) as err:
        engine.distill(teachers[teacher_tag], recipe, cache.parent / "student", overrides=STUDENT)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not list(cache.glob("distilled-*")) and not (cache.parent / "student").exists()


def test_a_direction_of_known_languages_is_distilled_zero_shot_with_a_notice():
    """The check alone (no model): a student direction the teacher never trained but whose languages it knows is a
    notice; a one-pair teacher and student tag nothing and pass as before; a student of another task passes."""
    from seqxduce_translation import build_translation_task
    from seqxduce_translation.settings import TranslationSettings

    def task(lang_tag: str = "none", *pairs: tuple[str, str], **one):
        corpus = [{"src_lang": s, "tgt_lang": t} for s, t in pairs]
        return build_translation_task(TranslationSettings(lang_tag=lang_tag, corpus=corpus, **one))

    teacher = task("source", ("en", "de"), ("en", "fr"))
    assert teacher.as_teacher_of(task("source", ("en", "de"), ("en", "fr"))) == ""
    notice = teacher.as_teacher_of(task("source", ("en", "de"), ("fr", "de")))
    assert notice == "fr→de was never trained (the run's directions: en→de, en→fr): decoded zero-shot, of unknown " \
                     "quality"
    with pytest.raises(UserError, match="source language 'cs': the run never saw it; it knows de, en, fr"):
        teacher.as_teacher_of(task("source", ("cs", "de")))
    one = task(src_lang="en", tgt_lang="de")
    assert one.as_teacher_of(task(src_lang="en", tgt_lang="de")) == ""
    from seqxduce.api import Task

    assert teacher.as_teacher_of(Task.__new__(type("Other", (Task,), {"examples": None, "score": None}))) == ""
