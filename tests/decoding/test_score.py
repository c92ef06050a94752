"""`seqxduce score`: the log-probability of given pairs, equal to what decode reported for its own outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import seqxduce.engine as engine
from seqxduce.cli import add_plugin_commands
from seqxduce.data import encode_source
from seqxduce.decoding.decode import load_run
from seqxduce.decoding.scoring import score_ids, score_pairs, scores_of
from seqxduce.decoding.search import length_penalty

SOURCES = ["1 2 3", "4 5", "6 7 8 9 1", "2"]
# beam 4 with all four kept and room to grow: hypotheses of several lengths, not only the empty one
NBEST = ["decode.beam=4", "decode.nbest=4", "decode.max_len_b=5"]


def invoke(*args) -> object:
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_the_score_of_each_decoded_hypothesis_is_the_one_decode_reported(tiny_run: Path):
    run = load_run(tiny_run, NBEST)
    outputs = engine.decode(tiny_run, SOURCES, overrides=NBEST)
    hyps = [(o.source, hyp) for o in outputs for _, hyp in o.nbest]
    assert len({len(h.tokens) for _, h in hyps}) > 1  # several lengths, so the length penalty is exercised
    src = [encode_source(run.tokenizers.src, s) for s, _ in hyps]
    positional = score_ids(run.model, run.tokenizers.tgt, src, [h.tokens for _, h in hyps], run.device,
                           batch_size=3)
    alpha = run.recipe.decode.settings.alpha
    assert alpha > 0
    for (_, hyp), values, scored in zip(hyps, positional, scores_of(positional, alpha)):
        assert len(values) == len(hyp.tokens) + 1  # the eos counted, as the search counts it
        torch.testing.assert_close(values, hyp.positional_logprobs, rtol=0, atol=1e-4)
        assert scored.logprob == pytest.approx(hyp.logprob, abs=1e-4)
        # beam's score is the total over the GNMT penalty of the length with eos
        assert scored.normalized == pytest.approx(hyp.score, abs=1e-4)
        assert hyp.score == pytest.approx(hyp.logprob / length_penalty(len(hyp.tokens) + 1, alpha), abs=1e-5)


def test_a_pair_scores_the_same_alone_and_in_a_padded_batch(tiny_run: Path):
    run = load_run(tiny_run)
    targets = ["3 2 1", "5 4", "1 9 8 7 6", ""]
    together = score_pairs(run, SOURCES, targets)
    for source, target, expected in zip(SOURCES, targets, together):
        alone = score_pairs(run, [source], [target])[0]
        assert alone.logprob == pytest.approx(expected.logprob, abs=1e-5)
        assert alone.length == len(target.split()) + 1
    assert together[3].length == 1  # an empty target: its eos alone


def test_score_command_prints_decodes_own_scores(tiny_run: Path, tmp_path: Path):
    sources = write(tmp_path / "src.txt", SOURCES)
    decoded = invoke("decode", tiny_run, "--input", sources, "--output", tmp_path / "nbest.txt",
                     *[f"--set={o}" for o in NBEST])
    assert decoded.exit_code == 0, decoded.output
    rows = [line.split("\t") for line in (tmp_path / "nbest.txt").read_text().splitlines()]
    run = load_run(tiny_run)
    for _, _, text in rows:  # the text re-encodes to the ids decode chose (a word vocabulary)
        assert run.tokenizers.tgt.decode(run.tokenizers.tgt.encode(text)) == text
    write(tmp_path / "s.txt", [SOURCES[int(i)] for i, _, _ in rows])
    write(tmp_path / "t.txt", [text for _, _, text in rows])
    result = invoke("score", tiny_run, "--source", tmp_path / "s.txt", "--target", tmp_path / "t.txt",
                    "--normalize", "-o", tmp_path / "scores.txt", *[f"--set={o}" for o in NBEST])
    assert result.exit_code == 0, result.output
    scores = [line.split("\t") for line in (tmp_path / "scores.txt").read_text().splitlines()]
    assert len(scores) == len(rows)
    for (_, reported, text), (total, per_token, normalized) in zip(rows, scores):
        assert float(normalized) == pytest.approx(float(reported), abs=2e-4)
        length = len(text.split()) + 1
        assert float(per_token) == pytest.approx(float(total) / length, abs=2e-4)


def test_without_normalize_two_columns_and_alpha_zero_leaves_the_total(tiny_run: Path, tmp_path: Path):
    src = write(tmp_path / "s.txt", SOURCES[:2])
    tgt = write(tmp_path / "t.txt", ["3 2 1", "5 4"])
    plain = invoke("score", tiny_run, "--source", src, "--target", tgt)
    assert plain.exit_code == 0, plain.output
    assert [len(line.split("\t")) for line in plain.stdout.splitlines()] == [2, 2]
    flat = invoke("score", tiny_run, "--source", src, "--target", tgt, "--normalize", "--set", "decode.alpha=0")
    assert flat.exit_code == 0, flat.output
    for line in flat.stdout.splitlines():
        total, _, normalized = line.split("\t")
        assert normalized == total


def test_score_uses_the_ensemble_decode_uses(tiny_run: Path, tmp_path: Path):
    member = sorted((tiny_run / "checkpoints").glob("*.pt"))[0]
    outputs = engine.decode(tiny_run, SOURCES, overrides=NBEST, ensemble=[member])
    texts = [(o.source, text, hyp) for o in outputs for text, hyp in o.nbest]
    scored = engine.score(tiny_run, [s for s, _, _ in texts], [t for _, t, _ in texts], overrides=NBEST,
                          ensemble=[member])
    alone = engine.score(tiny_run, [s for s, _, _ in texts], [t for _, t, _ in texts], overrides=NBEST)
    for (_, _, hyp), with_member in zip(texts, scored):
        assert with_member.normalized == pytest.approx(hyp.score, abs=1e-4)
    assert any(abs(a.logprob - b.logprob) > 1e-3 for a, b in zip(scored, alone))  # the member counted


def test_score_says_what_it_scores_with_and_takes_decodes_checkpoint_choice(tiny_run: Path, tmp_path: Path):
    src = write(tmp_path / "s.txt", SOURCES[:2])
    tgt = write(tmp_path / "t.txt", ["3 2 1", "5 4"])
    default = invoke("score", tiny_run, "--source", src, "--target", tgt)
    last = invoke("score", tiny_run, "--source", src, "--target", tgt, "--checkpoint", "last")
    assert default.exit_code == 0 and last.exit_code == 0, default.output + last.output
    newest = sorted((tiny_run / "checkpoints").glob("step_*.pt"))[-1]
    assert default.stderr.splitlines()[0].startswith("threads: ")  # the first line: how many and why (cpus.py)
    assert default.stderr.splitlines()[1] == f"scoring with {load_run(tiny_run).checkpoint}"
    assert last.stderr.splitlines()[1] == f"scoring with {newest}"
    expected = engine.format_scores(engine.score(tiny_run, SOURCES[:2], ["3 2 1", "5 4"], checkpoint="last"))
    assert last.stdout.splitlines() == expected
    assert load_run(tiny_run).checkpoint != newest and default.stdout != last.stdout  # the choice took effect


def test_score_refuses_files_of_unequal_length_naming_both(tiny_run: Path, tmp_path: Path):
    src = write(tmp_path / "s.txt", SOURCES)
    tgt = write(tmp_path / "t.txt", ["1"])
    result = invoke("score", tiny_run, "--source", src, "--target", tgt)
    assert result.exit_code != 0
    assert f"--source {src} has 4 lines but --target {tgt} has 1" in result.output
    assert "Traceback" not in result.output


def test_score_help_names_its_options():
    result = invoke("score", "--help")
    assert result.exit_code == 0, result.output
    for option in ("--source", "--target", "--normalize", "--output", "--ensemble", "--checkpoint", "length penalty"):
        assert option in result.output


def test_a_multi_member_run_scores_with_its_ensemble_as_decode_decodes(tmp_path: Path):
    from tests.conftest import TINY_RECIPE

    run = tmp_path / "run"
    trained = invoke("train", TINY_RECIPE, "--out", run, "--set", "train.members=2", "--set",
                     "train.validate_every=0", "--set", "train.parallel_members=1")
    assert trained.exit_code == 0, trained.output
    sources = write(tmp_path / "src.txt", SOURCES)
    decoded = invoke("decode", run, "--input", sources, "--output", tmp_path / "nbest.txt",
                     *[f"--set={o}" for o in NBEST])
    assert decoded.exit_code == 0, decoded.output
    assert "members/2" in decoded.output  # decode named its second member
    rows = [line.split("\t") for line in (tmp_path / "nbest.txt").read_text().splitlines()]
    targets = [text for _, _, text in rows]
    scored = engine.score(run, [SOURCES[int(i)] for i, _, _ in rows], targets, overrides=NBEST)
    for (_, reported, _), s in zip(rows, scored):
        assert s.normalized == pytest.approx(float(reported), abs=2e-4)
    # the first member alone scores otherwise: the ensemble was used
    alone = engine.score(run, [SOURCES[int(i)] for i, _, _ in rows], targets, overrides=[*NBEST, "train.members=1"])
    assert any(abs(a.logprob - b.logprob) > 1e-3 for a, b in zip(scored, alone))


def test_resume_on_a_complete_scores_file_is_answered_before_any_model_loads(tiny_run: Path, tmp_path: Path):
    source, target = write(tmp_path / "s.txt", SOURCES), write(tmp_path / "t.txt", SOURCES)
    out = tmp_path / "scores.txt"
    first = invoke("score", tiny_run, "--source", source, "--target", target, "-o", out, "--resume")
    assert first.exit_code == 0, first.output
    before = out.read_bytes()
    again = invoke("score", tiny_run, "--source", source, "--target", target, "-o", out, "--resume")
    assert again.exit_code == 0 and "is complete already" in again.output and out.read_bytes() == before
    assert "scoring with" not in again.output, "found complete before any model loaded"
    other = invoke("score", tiny_run, "--source", source, "--target", target, "-o", out, "--resume", "--normalize")
    assert other.exit_code == 1 and "is complete, but another job wrote it (normalize: " in other.output
    assert "scoring with" not in other.output and out.read_bytes() == before
