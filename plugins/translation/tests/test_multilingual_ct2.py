"""A multilingual run exported to CTranslate2 (issue #77, item 5): the language tags are entries of the export's
vocabulary, and `decode --engine ctranslate2 --tgt-lang`, the Python functions with engine= and `decode --split`
give what seqxduce's own engine gives, with the tag a source token (lang_tag = "source") or CTranslate2's
target_prefix (lang_tag = "target"), at the parity of a one-pair export (tests/test_export_parity.py: fp32, greedy
and beam)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_multilingual import RECIPE, WORDY, write_data

import seqxduce
from seqxduce import engine
from seqxduce.cli import add_plugin_commands

pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install -e '.[ctranslate2]')")

SOURCES = ["a cat sees a dog", "a red house", "a big tree sees a cat", "a dog", "a house sees a big red tree"]
# enough steps that the outputs are words and depend on the tag, few enough for seconds on one core
SEARCHES = {
    "greedy": ["decode.name=greedy"],
    "beam 4": ["decode.name=beam", "decode.beam=4", "decode.alpha=0"],
    "beam 3, 2-best, alpha 0.6": ["decode.name=beam", "decode.beam=3", "decode.alpha=0.6", "decode.nbest=2"],
}
TIE = 1e-3  # two outputs of scores this close are a tie that float rounding decides (bench/export_parity.py)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """en→de and en→fr tagged each way, trained once for the module, and each run's export (float32)."""
    root = tmp_path_factory.mktemp("multilingual_ct2")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQXDUCE_CACHE", str(root / "cache"))
        patch.chdir(root)
        write_data(root / "data", {"train": 240, "valid": 12, "test": 12})
        runs = {}
        for tag in ("source", "target"):
            (root / f"{tag}.toml").write_text(RECIPE.format(tag=tag), encoding="utf-8")
            run = engine.train(root / f"{tag}.toml", root / tag, overrides=WORDY).run_dir
            runs[tag] = (run, seqxduce.export_run(run, root / f"{tag}-ct2").directory)
        yield runs


def run_cli(*args: object):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def assert_parity(ours, theirs, what: str) -> None:
    """The same best output for every source, or a tie; the scores of equal outputs within TIE."""
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        (text_a, hyp_a), (text_b, hyp_b) = a.nbest[0], b.nbest[0]
        assert abs(hyp_a.score - hyp_b.score) <= TIE, (what, a.source, text_a, text_b, hyp_a.score, hyp_b.score)
        assert hyp_a.tokens == hyp_b.tokens or abs(hyp_a.score - hyp_b.score) < TIE, (what, text_a, text_b)
        assert len(a.nbest) == len(b.nbest)


@pytest.mark.parametrize("tag", ["source", "target"])
def test_the_tags_are_entries_of_the_exported_vocabulary(exported, tag):
    _, export = exported[tag]
    vocabularies = sorted(export.glob("*vocabulary*.json"))
    assert vocabularies
    for path in vocabularies:  # a tag is one entry, so one token in CTranslate2 as in seqxduce
        entries = json.loads(path.read_text(encoding="utf-8"))
        assert {"<2de>", "<2fr>", "<2en>"} <= set(entries), path.name


@pytest.mark.parametrize("tag", ["source", "target"])
def test_tgt_lang_decodes_alike_with_ctranslate2(exported, tag):
    run, export = exported[tag]
    by_lang, scores = {}, {}
    for name, overrides in SEARCHES.items():
        for lang in ("de", "fr"):
            ours = seqxduce.decode(run, SOURCES, overrides=overrides, tgt_lang=lang)
            theirs = seqxduce.decode(export, SOURCES, overrides=overrides, tgt_lang=lang, engine="ctranslate2")
            assert_parity(ours, theirs, f"{name}, {lang}")
            assert [o.source for o in theirs] == SOURCES
            if tag == "target":  # the forced tag starts each hypothesis, and not the output
                assert all(text.startswith(f"<2{lang}>") for o in theirs for text, _ in o.nbest)
                assert not any(o.text.startswith("<2") for o in theirs)
            by_lang[name, lang] = [o.text for o in theirs]
            scores[lang] = [o.nbest[0][1].score for o in theirs]
        assert scores["de"] != scores["fr"]  # the tag reached the model (so small a model may write alike)
    # a run directory exported on the fly, and each input its own language
    mixed = seqxduce.decode(run, SOURCES[:2], tgt_lang=["fr", "de"], engine="ctranslate2",
                            overrides=SEARCHES["greedy"])
    assert [o.text for o in mixed] == [by_lang["greedy", "fr"][0], by_lang["greedy", "de"][1]]


@pytest.mark.parametrize("tag", ["source", "target"])
def test_the_commands_take_tgt_lang_with_ctranslate2(exported, tmp_path, tag):
    run, export = exported[tag]
    given = tmp_path / "in.txt"
    given.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    result = run_cli("decode", export, "--input", given, "--tgt-lang", "fr", "--engine", "ctranslate2")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [o.text for o in seqxduce.decode(export, SOURCES, tgt_lang="fr",
                                                                          engine="ctranslate2")]
    column = tmp_path / "column.txt"
    column.write_text("".join(f"{lang}\t{s}\n" for s, lang in zip(SOURCES, ["de", "fr", "", "fr", "de"])),
                      encoding="utf-8")
    result = run_cli("decode", export, "--input", column, "--tgt-lang-column", "--tgt-lang", "de", "--engine",
                     "ctranslate2", "--processes", "2", "--buffer-size", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [o.text for o in seqxduce.decode(
        export, SOURCES, tgt_lang=["de", "fr", "de", "fr", "de"], engine="ctranslate2")]

    targets = [o.text for o in seqxduce.decode(export, SOURCES, tgt_lang="de", engine="ctranslate2")]
    ours = seqxduce.score(run, SOURCES, targets, tgt_lang="de")
    theirs = seqxduce.score(export, SOURCES, targets, tgt_lang="de", engine="ctranslate2")
    assert all(abs(a.logprob - b.logprob) < TIE and a.length == b.length for a, b in zip(ours, theirs))

    result = run_cli("decode", export, "--input", given, "--tgt-lang", "es", "--engine", "ctranslate2")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: --tgt-lang: target language 'es': the run never saw it; it writes de, fr"


@pytest.mark.parametrize("tag", ["source", "target"])
def test_a_split_of_directions_decodes_alike_with_ctranslate2(exported, tmp_path, tag):
    """decode --split: every example tagged as training tagged it (with "target", its prefix forced), scored per
    direction; the command's streamed decode (either engine) writes what the function gives."""
    run, export = exported[tag]
    for overrides in (SEARCHES["greedy"], SEARCHES["beam 4"]):
        ours, report = seqxduce.decode_split(run, "test", overrides=overrides)
        theirs, their_report = seqxduce.decode_split(export, "test", overrides=overrides, engine="ctranslate2")
        assert_parity(ours, theirs, str(overrides))
        if [o.text for o in ours] == [o.text for o in theirs]:
            assert their_report.metrics == report.metrics
        assert {"bleu[en-de]", "bleu[en-fr]"} <= set(their_report.metrics)
    for name, path, options in (("ours", run, []), ("theirs", export, ["--engine", "ctranslate2"])):
        out = tmp_path / f"{name}.txt"
        sets = [arg for key in SEARCHES["beam 4"] for arg in ("--set", key)]  # the search `ours` last ran
        result = run_cli("decode", path, "--split", "test", "-o", out, *sets, *options)
        assert result.exit_code == 0, result.output
        expected = ours if name == "ours" else theirs
        assert out.read_text(encoding="utf-8").splitlines() == [o.text for o in expected], name
