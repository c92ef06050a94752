"""One engine interface (seqxduce.decoding.engines): decode, score and serve reach seqxduce's own search and
CTranslate2 through it, each answering what that engine's own decode gives; what an engine lacks is declared and
refused in one line naming the engine and the feature, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.engines import FEATURES
from seqxduce.export.engine_choice import ENGINE_NAMES, engine_named
from tests.serve.test_serve import call, serving

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed (pip install -e '.[ctranslate2]')")

SOURCES = ["1 2 3", "4 5", "6", "3 1 2 4", "5 5 6"]
SCORE_TOLERANCE = 1e-3  # two engines' float32 forward passes over the same weights


def cli(*args: str | Path):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def written(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_decode_score_and_serve_through_each_engine_agree(tiny_run: Path, tmp_path: Path, name: str):
    outputs = seqxduce.decode(tiny_run, SOURCES, engine=name)
    assert len(outputs) == len(SOURCES) and all(o.nbest for o in outputs)
    texts = [o.text for o in outputs]
    # decode of a file: the same lines as the function gave (the command's stdout)
    given = written(tmp_path, "in.txt", SOURCES)
    result = cli("decode", tiny_run, "--input", given, "--engine", name)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == seqxduce.engine.format_outputs(outputs)
    # score: an output's log-probability is what its search reported for it
    scores = seqxduce.score(tiny_run, SOURCES, [text for text, _ in (o.nbest[0] for o in outputs)], engine=name)
    for output, score in zip(outputs, scores):
        assert score.logprob == pytest.approx(output.nbest[0][1].logprob, abs=SCORE_TOLERANCE)
    targets = written(tmp_path, "tgt.txt", [text for text, _ in (o.nbest[0] for o in outputs)])
    result = cli("score", tiny_run, "--source", given, "--target", targets, "--engine", name)
    assert result.exit_code == 0, result.output
    assert [float(line.split("\t")[0]) for line in result.stdout.splitlines()] == pytest.approx(
        [s.logprob for s in scores], abs=1e-4)
    # serve: the answers are the engine's decode
    with serving(tiny_run, tmp_path, "--engine", name, "--threads", "1") as server:
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES})
        assert status == 200, answer
        assert [hyps[0]["text"] for hyps in answer["outputs"]] == texts


def test_the_two_engines_score_the_same_pairs_alike(tiny_run: Path):
    targets = ["3 2 1", "5", "6 6", "4 2", "6"]
    ours, theirs = (seqxduce.score(tiny_run, SOURCES, targets, engine=name) for name in ENGINE_NAMES)
    assert [s.logprob for s in theirs] == pytest.approx([s.logprob for s in ours], abs=SCORE_TOLERANCE)
    assert [s.length for s in theirs] == [s.length for s in ours]


def test_capabilities_are_declared_not_probed():
    ours, theirs = (engine_named(name) for name in ENGINE_NAMES)
    assert ours.capabilities == frozenset(FEATURES) and ours.honoured is None
    assert {"prefixes", "nbest", "scoring"} <= theirs.capabilities
    assert not {"ensemble", "checkpoint", "annotations", "alignments", "attention"} & theirs.capabilities
    assert "beam" in theirs.honoured and "batch_tokens" not in theirs.honoured


def test_a_feature_or_setting_an_engine_lacks_is_refused_in_one_line_before_any_work(tiny_run: Path,
                                                                                     tmp_path: Path):
    with pytest.raises(seqxduce.UserError, match=r"^decode --engine ctranslate2: --annotations is not supported "
                                                 r"there \(the model's per-position figures\)"):
        seqxduce.decode(tiny_run, SOURCES, annotate=True, engine="ctranslate2")
    with pytest.raises(seqxduce.UserError, match="score --engine ctranslate2: --ensemble is not supported there"):
        seqxduce.score(tiny_run, SOURCES, SOURCES, ensemble=[tiny_run], engine="ctranslate2")
    with pytest.raises(seqxduce.UserError, match="no such engine; give one of seqxduce, ctranslate2"):
        seqxduce.decode(tiny_run, SOURCES, engine="marian")
    given = written(tmp_path, "in.txt", SOURCES)
    out = tmp_path / "out.txt"
    result = cli("decode", tiny_run, "--input", given, "-o", out, "--engine", "ctranslate2", "--batch-tokens", "64")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and ("--batch-tokens: the ctranslate2 engine does not read [decode] "
                                               "batch_tokens") in result.output
    result = cli("decode", tiny_run, "--input", given, "-o", out, "--engine", "ctranslate2", "--set",
                 "decode.early_stop=true")
    assert result.exit_code == 1 and "the ctranslate2 engine does not read [decode] early_stop" in result.output
    assert "decoding with" not in result.output and not list(tmp_path.glob("out.txt*"))
    # what the engine does anyway is no refusal: the eos at the limit scored, as seqxduce's default
    result = cli("decode", tiny_run, "--input", given, "--engine", "ctranslate2", "--set", "decode.limit_eos=scored")
    assert result.exit_code == 0, result.output
