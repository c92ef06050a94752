"""Lexical constraints through the Python API (seqxduce.decode(..., constraints=...)) on a copy model that has
learned its task: phrases that must appear come out, phrases that must not never do, with n-best, an ensemble and a
target prefix; and what cannot be searched for is refused in one line."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import seqxduce
from seqxduce.api import UserError


def sources(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(str(rng.randint(0, 9)) for _ in range(rng.randint(2, 6))) for _ in range(count)]


def holds(text: str, phrase: str) -> bool:
    """The phrase as a run of whole words of the output (the copy task's words are its symbols)."""
    words, wanted = text.split(), phrase.split()
    return any(words[i:i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


def missing_phrases(source: str, rng: random.Random) -> list[str]:
    """One or two phrases of one or two symbols that the source (so a copy of it) lacks."""
    absent = [s for s in "0123456789" if s not in source.split()] or ["0"]
    chosen = rng.sample(absent, min(len(absent), 2))
    return [f"{chosen[0]} {chosen[-1]}" if rng.random() < 0.5 else chosen[0], *chosen[1:2]]


def test_every_output_holds_its_phrases_with_n_best_an_ensemble_and_a_prefix(trained_copy_run: Path):
    rng = random.Random(1)
    given = sources(24)
    phrases = [missing_phrases(s, rng) for s in given]
    plain = seqxduce.decode(trained_copy_run, given)
    outputs = seqxduce.decode(trained_copy_run, given, ["decode.nbest=2", "decode.beam=4"],
                              ensemble=[trained_copy_run], prefixes=[s.split()[0] for s in given],
                              constraints=phrases)
    for out, base, wanted, source in zip(outputs, plain, phrases, given):
        assert not any(holds(base.text, p) for p in wanted[:1])  # the copy alone lacks them
        assert len(out.nbest) == 2
        for text, _ in out.nbest:
            assert text.split()[0] == source.split()[0]
            assert all(holds(text, p) for p in wanted), (text, wanted)


def test_a_forbidden_phrase_never_comes_out_and_one_line_of_phrases_reads_as_a_file_line(trained_copy_run: Path):
    given = sources(20, seed=3)
    banned = [f"!{s.split()[0]}" for s in given]  # the copy's first word
    outputs = seqxduce.decode(trained_copy_run, given, ["decode.nbest=2"], constraints=[[b] for b in banned])
    for out, word in zip(outputs, banned):
        assert all(not holds(text, word[1:]) for text, _ in out.nbest)
    # a whole phrase: its words alone still come out
    pair = given[0].split()[:2]
    outputs = seqxduce.decode(trained_copy_run, [given[0]], constraints=[f"!{pair[0]} {pair[1]}\t{pair[1]}"])
    assert not holds(outputs[0].text, " ".join(pair)) and holds(outputs[0].text, pair[1])


def test_no_constraints_decode_exactly_as_before(trained_copy_run: Path):
    given = sources(12, seed=5)
    plain = seqxduce.decode(trained_copy_run, given, ["decode.nbest=2"])
    empty = seqxduce.decode(trained_copy_run, given, ["decode.nbest=2"], constraints=[[] for _ in given])
    assert [[(t, h.score) for t, h in o.nbest] for o in plain] == [[(t, h.score) for t, h in o.nbest] for o in empty]


@pytest.mark.parametrize(("constraints", "message"), [
    ([["3", ""]], "an empty phrase"),
    ([["!"]], "an empty phrase"),
    (["3\t\t4"], "an empty phrase"),
    ([["\u2603"]], "cannot spell"),
    ([["1", "2", "3"]], r"3 phrases must appear, more than the beam \(2\)"),
    ([["1"], ["2"]], r"give one entry per source \(1\)"),
    ([[7]], "a phrase must be text"),
])
def test_what_cannot_be_searched_for_is_refused_in_one_line(trained_copy_run: Path, constraints, message):
    with pytest.raises(UserError, match=message) as refused:
        seqxduce.decode(trained_copy_run, ["1 2 3"], constraints=constraints)
    assert "\n" not in str(refused.value)


def test_ctranslate2_suppresses_forbidden_phrases_and_refuses_those_that_must_appear(trained_copy_run: Path):
    pytest.importorskip("ctranslate2", reason="the [ctranslate2] extra is not installed")
    given = sources(12, seed=7)
    banned = [[f"!{s.split()[-1]}"] for s in given]
    free = seqxduce.decode(trained_copy_run, given, engine="ctranslate2")
    theirs = seqxduce.decode(trained_copy_run, given, constraints=banned, engine="ctranslate2")
    # (CTranslate2 suppresses before its softmax, seqxduce's search bans after it: the rankings may differ)
    for before, after, word in zip(free, theirs, banned):
        assert holds(before.text, word[0][1:]) and not holds(after.text, word[0][1:])
    with pytest.raises(UserError, match="ctranslate2.*phrases every output must hold.*--engine seqxduce"):
        seqxduce.decode(trained_copy_run, given[:1], constraints=[["5"]], engine="ctranslate2")
