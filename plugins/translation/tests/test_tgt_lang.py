"""Choosing the language where a multilingual model is used (issue #77, item 3): `decode --tgt-lang`, a file's
column of languages, `score --tgt-lang` and the Python functions, written as training wrote its examples (the
tag in the source, or a target prefix forced and left out of the output); an unknown language refused in one line,
a zero-shot direction decoded with a notice, and a one-pair run that knows its own target only."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from seqxduce_translation import build_translation_task
from seqxduce_translation.settings import TranslationSettings
from test_multilingual import ONE_PAIR, RECIPE, WORDY, write_data

import seqxduce
from seqxduce import engine
from seqxduce.api import Direction, Example, UserError
from seqxduce.cli import add_plugin_commands

SOURCES = ["a cat sees a dog", "a red house", "a big tree sees a cat", "a dog"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two pairs (en→de, en→fr) tagged each way, and one pair without tags, trained once for the module."""
    root = tmp_path_factory.mktemp("tgt_lang")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQXDUCE_CACHE", str(root / "cache"))
        write_data(root / "data", {"train": 240, "valid": 12, "test": 12})
        trained = {}
        for name, text in (("source", RECIPE.format(tag="source")), ("target", RECIPE.format(tag="target")),
                           ("one", ONE_PAIR)):
            (root / f"{name}.toml").write_text(text, encoding="utf-8")
            trained[name] = engine.train(root / f"{name}.toml", root / name, overrides=WORDY).run_dir
        yield trained


def run_cli(*args: str):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def texts(run: Path, sources: list[str], **options) -> list[str]:
    return [o.text for o in seqxduce.decode(run, sources, **options)]


# ---------------------------------------------------------------- the task's side, no model


def test_a_chosen_language_is_written_as_training_writes_its_examples(tmp_path):
    write_data(tmp_path, {"train": 5, "valid": 2, "test": 2})
    for lang_tag in ("source", "target"):
        task = build_translation_task(TranslationSettings(lang_tag=lang_tag, dataset="files", corpus=[
            {"src_lang": "en", "tgt_lang": "de"}, {"src_lang": "en", "tgt_lang": "fr"}]))
        trained = task.examples("train", tmp_path)
        raw = {lang: (tmp_path / f"train.{lang}").read_text().splitlines() for lang in ("en", "de", "fr")}
        for lang, first in (("de", 0), ("fr", 5)):
            given = Example(raw["en"][0], raw[lang][0], reference=raw[lang][0], corpus=f"en-{lang}")
            chosen = task.directed(given, Direction(lang))
            assert chosen.example == trained[first] and chosen.notice == ""
        decoded = task.directed(Example("a cat", ""), Direction("fr")).example
        assert (decoded.source, decoded.prefix) == (("<2fr> a cat", "") if lang_tag == "source" else ("a cat", "<2fr>"))


@pytest.mark.parametrize("direction, message", [
    (Direction("es"), "target language 'es': the run never saw it; it writes de, fr"),
    (Direction("en"), "target language 'en': the run saw it only as a source; it writes de, fr"),
    (Direction("de", "cs"), "source language 'cs': the run never saw it; it knows de, en, fr"),
])
def test_a_language_the_run_never_wrote_is_refused_naming_those_it_knows(direction, message):
    task = build_translation_task(TranslationSettings(lang_tag="target", corpus=[
        {"src_lang": "en", "tgt_lang": "de"}, {"src_lang": "en", "tgt_lang": "fr"}]))
    with pytest.raises(UserError) as err:
        task.directed(Example("a cat", ""), direction)
    assert str(err.value) == message


def test_a_one_pair_task_knows_its_own_target_only():
    task = build_translation_task(TranslationSettings(src_lang="en", tgt_lang="de"))
    same = task.directed(Example("a cat", ""), Direction("de", "en"))
    assert same.example == Example("a cat", "") and same.notice == ""
    with pytest.raises(UserError, match=r"this run translates en→de only .*; choose de or leave the language out"):
        task.directed(Example("a cat", ""), Direction("fr"))


def test_a_tag_is_spelt_as_lang_tag_format_says(tmp_path):
    """Marian's >>fr<< instead of <2fr>: in training's examples, in a chosen language and in what the tokenizer
    keeps whole."""
    write_data(tmp_path, {"train": 3, "valid": 2, "test": 2})
    task = build_translation_task(TranslationSettings(lang_tag="source", lang_tag_format=">>{lang}<<",
                                                      dataset="files", corpus=[{"src_lang": "en", "tgt_lang": "de"},
                                                                               {"src_lang": "en", "tgt_lang": "fr"}]))
    assert task.examples("train", tmp_path)[3].source.startswith(">>fr<< ")
    assert task.directed(Example("a cat", ""), Direction("de")).example.source == ">>de<< a cat"
    assert task.reserved_symbols() == (">>de<<", ">>en<<", ">>fr<<")


def test_a_model_whose_targets_tgt_langs_lists_takes_one_of_them():
    """An imported multilingual Marian model's recipe: its targets listed, its sources unknown."""
    task = build_translation_task(TranslationSettings(lang_tag="source", lang_tag_format=">>{lang}<<",
                                                      tgt_langs=["fra", "por", "zho_Hans"]))
    chosen = task.directed(Example("a cat", ""), Direction("zho_Hans", "eng"))
    assert chosen.example.source == ">>zho_Hans<< a cat" and chosen.notice == ""
    with pytest.raises(UserError) as err:
        task.directed(Example("a cat", ""), Direction("deu"))
    assert str(err.value) == "target language 'deu': the model has no tag >>deu<<; it writes fra, por, zho_Hans"


@pytest.mark.parametrize("values, message", [
    ({"lang_tag_format": "<2lang>"}, "[task] lang_tag_format = '<2lang>': write the tag with {lang} once"),
    ({"lang_tag_format": "{lang}"}, "[task] lang_tag_format = '{lang}'"),
    ({"lang_tag_format": "<2 {lang}>"}, "no spaces or other braces"),
    ({"tgt_langs": ["fra"]}, "[task] tgt_langs = ['fra'] are chosen by a tag: set [task] lang_tag"),
    ({"tgt_langs": ["fra", "fra"], "lang_tag": "source"}, "[task] tgt_langs names 'fra' twice"),
    ({"tgt_langs": ["fr a"], "lang_tag": "source"}, "[task] tgt_langs: 'fr a' is not a language code"),
    ({"tgt_langs": ["fra"], "lang_tag": "source", "corpus": [{"src_lang": "en", "tgt_lang": "de"}]},
     "with corpora their tgt_lang are the targets: remove tgt_langs"),
])
def test_a_tag_format_or_target_list_that_cannot_work_is_refused_in_one_line(values, message):
    with pytest.raises(UserError) as err:
        TranslationSettings(**values)
    assert message in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------- a trained run


@pytest.mark.parametrize("tag", ["source", "target"])
def test_decode_tgt_lang_is_the_tag_written_by_hand(runs, tmp_path, tag):
    run = runs[tag]
    given = tmp_path / "in.txt"
    given.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    by_lang = {}
    for lang in ("de", "fr"):
        result = run_cli("decode", run, "--input", given, "--tgt-lang", lang)
        assert result.exit_code == 0, result.output
        by_lang[lang] = result.stdout.splitlines()
        if tag == "source":  # the tag at the start of the source, as a user of Marian's >>fr<< writes it
            assert by_lang[lang] == texts(run, [f"<2{lang}> {s}" for s in SOURCES])
        else:  # forced as the decoder's first token, and not in the output
            assert by_lang[lang] == texts(run, SOURCES, prefixes=[f"<2{lang}>"] * len(SOURCES))
            assert not any(line.startswith("<2") for line in by_lang[lang])
        assert texts(run, SOURCES, tgt_lang=lang) == by_lang[lang]  # the Python function

    # each line its own language (an empty one is --tgt-lang's), carried to worker processes; n-best lines show
    # it where one-best texts of so small a model may not: their scores, and with a target tag their texts
    langs = ["de", "fr", "", "fr"]
    per_line = tmp_path / "column.txt"
    per_line.write_text("".join(f"{lang}\t{s}\n" for s, lang in zip(SOURCES, langs)), encoding="utf-8")
    nbest = {}
    for lang in ("de", "fr"):
        result = run_cli("decode", run, "--input", given, "--tgt-lang", lang, "--nbest", "2")
        assert result.exit_code == 0, result.output
        nbest[lang] = [line.split("\t") for line in result.stdout.splitlines()]
    expected = [line for i, lang in enumerate(lang or "de" for lang in langs) for line in nbest[lang]
                if line[0] == str(i)]
    if tag == "target":
        assert all(text.startswith(f"<2{langs[int(i)] or 'de'}>") for i, _, text in expected)
    for extra in ([], ["--processes", "2", "--buffer-size", "2"]):
        out = tmp_path / f"out{len(extra)}.txt"
        result = run_cli("decode", run, "--input", per_line, "--tgt-lang-column", "--tgt-lang", "de", "--nbest", "2",
                         "-o", out, *extra)
        assert result.exit_code == 0, result.output
        got = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
        assert [(i, text) for i, _, text in got] == [(i, text) for i, _, text in expected]
        # worker processes of one thread each: the sums' last bits may differ from this process's threads
        assert all(abs(float(a[1]) - float(b[1])) < 1e-3 for a, b in zip(got, expected))
    outputs = seqxduce.decode(run, SOURCES, tgt_lang=["de", "fr", "de", "fr"])
    assert [o.text for o in outputs] == [by_lang[lang][i] for i, lang in enumerate(["de", "fr", "de", "fr"])]
    assert [o.source for o in outputs] == SOURCES  # as given, not as the model read them


def test_a_resume_with_another_language_is_refused(runs, tmp_path):
    given = tmp_path / "in.txt"
    given.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    out = tmp_path / "out.txt"
    assert run_cli("decode", runs["target"], "--input", given, "--tgt-lang", "de", "-o", out).exit_code == 0
    again = run_cli("decode", runs["target"], "--input", given, "--tgt-lang", "de", "-o", out, "--resume")
    assert again.exit_code == 0 and "is complete already" in again.output
    other = run_cli("decode", runs["target"], "--input", given, "--tgt-lang", "fr", "-o", out, "--resume")
    assert other.exit_code == 1 and "tgt_lang: 'de' then, 'fr' now" in other.output, other.output
    record = {"done": 0, "sizes": {"output": 0}, "job": {"tgt_lang": "de"}}  # a stopped job of another language
    out.unlink()
    (tmp_path / "out.txt.partial").write_text("")
    (tmp_path / "out.txt.resume.json").write_text(json.dumps(record))
    other = run_cli("decode", runs["target"], "--input", given, "--tgt-lang", "fr", "-o", out, "--resume")
    assert other.exit_code == 1 and "tgt_lang: 'de' then, 'fr' now" in other.output, other.output


@pytest.mark.parametrize("tag", ["source", "target"])
def test_score_tgt_lang_scores_the_pair_as_training_wrote_it(runs, tmp_path, tag):
    run = runs[tag]
    targets = texts(run, SOURCES, tgt_lang="fr")
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for t in targets), encoding="utf-8")
    result = run_cli("score", run, "--source", src, "--target", tgt, "--tgt-lang", "fr")
    assert result.exit_code == 0, result.output
    if tag == "source":
        by_hand = seqxduce.score(run, [f"<2fr> {s}" for s in SOURCES], targets)
    else:
        by_hand = seqxduce.score(run, SOURCES, [f"<2fr> {t}" for t in targets])
    assert result.stdout.splitlines() == seqxduce.engine.format_scores(by_hand)
    assert seqxduce.score(run, SOURCES, targets, tgt_lang="fr") == by_hand
    column = tmp_path / "column.txt"
    column.write_text("".join(f"fr\t{s}\n" for s in SOURCES), encoding="utf-8")
    result = run_cli("score", run, "--source", column, "--target", tgt, "--tgt-lang-column")
    assert result.exit_code == 0 and result.stdout.splitlines() == seqxduce.engine.format_scores(by_hand)


def test_an_unknown_language_is_refused_in_one_line_and_zero_shot_decodes_with_a_notice(runs, tmp_path):
    run = runs["target"]
    given = tmp_path / "in.txt"
    given.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    result = run_cli("decode", run, "--input", given, "--tgt-lang", "es")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: --tgt-lang: target language 'es': the run never saw it; it writes de, fr"
    column = tmp_path / "column.txt"
    column.write_text("de\ta cat\nxx\ta dog\n", encoding="utf-8")
    result = run_cli("decode", run, "--input", column, "--tgt-lang-column")
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert f"--tgt-lang-column {column}: target language 'xx'" in result.output
    with pytest.raises(UserError, match=r"tgt_lang\[1\]: target language 'es'"):
        seqxduce.decode(run, SOURCES[:2], tgt_lang=["de", "es"])

    result = run_cli("decode", run, "--input", given, "--tgt-lang", "de", "--src-lang", "fr")
    assert result.exit_code == 0, result.output
    notices = [line for line in result.stderr.splitlines() if line.startswith("notice:")]
    assert notices == ["notice: fr→de was never trained (the run's directions: en→de, en→fr): decoded zero-shot, of "
                       "unknown quality"]
    assert len(result.stdout.splitlines()) == len(SOURCES)
    result = run_cli("decode", run, "--input", given, "--src-lang", "fr")
    assert result.exit_code == 1 and "give the target too" in result.output


def test_a_one_pair_run_takes_its_own_target_silently_and_refuses_another(runs, tmp_path):
    run = runs["one"]
    given = tmp_path / "in.txt"
    given.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    plain = run_cli("decode", run, "--input", given)
    chosen = run_cli("decode", run, "--input", given, "--tgt-lang", "de", "--src-lang", "en")
    assert chosen.exit_code == 0 and chosen.stdout == plain.stdout and "notice" not in chosen.stderr
    other = run_cli("decode", run, "--input", given, "--tgt-lang", "fr")
    assert other.exit_code == 1 and other.output.strip() == (
        "Error: --tgt-lang: target language 'fr': this run translates en→de only (one language pair); choose de or "
        "leave the language out")


def test_a_split_decode_takes_no_language():
    with pytest.raises(UserError, match="a split's examples carry their own languages"):
        engine.decode_file("run", split="test", tgt_lang="de")
    assert dataclasses.is_dataclass(Direction)
