"""`seqxduce serve` with lexical constraints (issue #79): an input object's "constraints" (phrases its output must
hold, "!words" for those it must not) decode as `seqxduce.decode(run, [source], constraints=[...])` does, alone
or batched beside other requests; a malformed value is a one-line 400 naming the input, what cannot be searched
for a 422, and phrases that would lengthen the outputs past the server's budget are refused as any request over
it. One server, over the trained copy model (its outputs are its sources, so a phrase that comes out was put
there by the search), answers every case; its slow batches (--batch-delay-ms) let requests queue together."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import seqxduce
from seqxduce.engine import load_run
from seqxduce.serving.limits import (
    MAX_PHRASE_CHARS,
    MAX_PHRASES,
    Lengths,
    Limits,
    Prefixed,
    RequestError,
    check_cost,
    check_input,
)
from tests.near_ties import assert_same_texts
from tests.serve.test_serve import Server, call, serving, texts

pytest.importorskip("uvicorn", reason="the serve extra is not installed (pip install -e '.[serve]')")

# each source's phrases: symbols a copy of it lacks (so the search must put them in) and one it has, forbidden
CONSTRAINED = [("1 2 3", ["7"]), ("4 5 6 7", ["0 9", "!5"]), ("8 2", ["!8"]), ("3 3 1 2", ["6"]),
               ("9 0 1", ["2 4", "5"]), ("6 5 4 3 2", ["!4 3"])]
PLAIN = ["2 7 1", "5 5 8", "0 1 2 3", "9 8"]
MAX_WORK = 400  # the server's --max-work: every request below fits but the one that phrases push over
DELAY_MS = 1000  # each batch waits this long first, so that requests sent meanwhile queue and share the next


def holds(text: str, phrase: str) -> bool:
    """The phrase as a run of whole words of the output (the copy task's words are its symbols)."""
    words, wanted = text.split(), phrase.split()
    return any(words[i:i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


def honoured(text: str, phrases: list[str]) -> bool:
    return all(holds(text, p[1:]) != p.startswith("!") for p in phrases)


@pytest.fixture(scope="module")
def loaded(trained_copy_run: Path) -> Any:
    """The run loaded once for the Python API's decodes (a LoadedRun)."""
    return load_run(trained_copy_run)


@pytest.fixture(scope="module")
def server(trained_copy_run: Path, tmp_path_factory) -> Iterator[Server]:
    with serving(trained_copy_run, tmp_path_factory.mktemp("served"), "--threads", "1", "--max-work",
                 str(MAX_WORK), "--max-output-tokens", "64", "--batch-delay-ms", str(DELAY_MS)) as running:
        yield running
        log = running.log.read_text()
        assert "Traceback" not in log and " 500 " not in log, log


def alone(loaded: Any, source: str, phrases: list[str]) -> str:
    """What the Python API gives for the source decoded alone with its constraints."""
    return seqxduce.decode(loaded, [source], constraints=[phrases])[0].text


def test_a_constrained_input_decodes_as_the_python_api_does(server, loaded, trained_copy_run):
    expected = [alone(loaded, s, p) for s, p in CONSTRAINED]
    assert all(honoured(t, p) for t, (_, p) in zip(expected, CONSTRAINED)), expected
    assert expected != [s for s, _ in CONSTRAINED]  # the phrases changed the copies
    status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": s, "constraints": p}
                                                               for s, p in CONSTRAINED]})
    assert status == 200, answer
    got = texts(answer)
    assert all(honoured(t, p) for t, (_, p) in zip(got, CONSTRAINED)), got
    sources = [s for s, _ in CONSTRAINED]
    assert_same_texts(trained_copy_run, sources, expected, got)
    # n-best: every hypothesis holds them
    status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": "1 2", "constraints": ["5", "!2"]}],
                                                    "nbest": 2})
    assert status == 200 and len(answer["outputs"][0]) == 2, answer
    assert all(honoured(h["text"], ["5", "!2"]) for h in answer["outputs"][0]), answer


def test_constrained_inputs_batched_beside_other_clients_plain_ones_keep_their_own_answers(
        server, loaded, trained_copy_run):
    """Requests sent while a slow batch holds the worker queue together and share the next batch (waited on
    through /health's counters): each constrained input gets the Python API's answer for it alone, each plain
    one its plain decode."""
    asks: list[list] = [[PLAIN[0]]]  # the first holds the worker while the others queue
    asks += [[{"source": s, "constraints": p}] for s, p in CONSTRAINED[:3]] + [[PLAIN[1], PLAIN[2]]]
    asks += [[{"source": CONSTRAINED[3][0], "constraints": CONSTRAINED[3][1]}, PLAIN[3],
              {"source": CONSTRAINED[4][0], "constraints": CONSTRAINED[4][1]}]]
    answers: dict[int, tuple[int, dict]] = {}

    def ask(k: int) -> None:
        status, _, answer = call(server, "/v1/decode", {"inputs": asks[k]})
        answers[k] = (status, answer)

    before = server.health()["batches"]
    threads = [threading.Thread(target=ask, args=(k,)) for k in range(len(asks))]
    threads[0].start()
    server.wait_for("the first request taken into a batch", lambda h: h["decoding"] == 1)
    for t in threads[1:]:
        t.start()
    server.wait_for("the other requests queued", lambda h: h["queued"] == sum(map(len, asks[1:])))
    for t in threads:
        t.join()
    assert server.health()["batches"] - before == 2  # the queued requests, constrained or not, shared one batch
    plain = dict(zip(PLAIN, (o.text for o in seqxduce.decode(loaded, PLAIN))))
    for k, inputs in enumerate(asks):
        status, answer = answers[k]
        assert status == 200, answer
        sources = [i["source"] if isinstance(i, dict) else i for i in inputs]
        expected = [alone(loaded, i["source"], i["constraints"]) if isinstance(i, dict) else plain[i]
                    for i in inputs]
        got = texts(answer)
        assert all(honoured(t, i["constraints"]) for t, i in zip(got, inputs) if isinstance(i, dict)), got
        assert_same_texts(trained_copy_run, sources, expected, got)


def test_the_ctranslate2_engine_serves_forbidden_phrases_and_refuses_those_that_must_appear(
        trained_copy_run, tmp_path):
    """serve --engine ctranslate2 of the run's export: "!words" are CTranslate2's suppress_sequences, answered as
    `seqxduce.decode(export, ..., engine="ctranslate2")` gives them; a phrase that must appear is a 422."""
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    export = seqxduce.export_run(trained_copy_run, tmp_path / "ct2").directory
    banned = [(s, [p for p in phrases if p.startswith("!")]) for s, phrases in CONSTRAINED]
    banned = [(s, p) for s, p in banned if p] + [(PLAIN[0], [])]
    expected = [seqxduce.decode(export, [s], constraints=[p], engine="ctranslate2")[0].text for s, p in banned]
    assert all(honoured(t, p) for t, (_, p) in zip(expected, banned)), expected
    with serving(export, tmp_path, "--engine", "ctranslate2", "--threads", "1") as ct2:
        status, _, answer = call(ct2, "/v1/decode", {"inputs": [{"source": s, "constraints": p} for s, p in banned]})
        assert status == 200 and texts(answer) == expected, answer
        status, _, answer = call(ct2, "/v1/decode", {"inputs": ["1 2", {"source": "1 2", "constraints": ["!1", "7"]}]})
        assert status == 422 and answer["error"].startswith("inputs[1].constraints: phrases that must appear need "
                                                            "seqxduce's own engine"), answer


def one(source: object = "1 2", constraints: object = None, **more: object) -> dict:
    """A request of one input object (constraints left out when None), and more inputs before it."""
    given = {"source": source} if constraints is None else {"source": source, "constraints": constraints}
    return {"inputs": [*more.pop("before", []), given], **more}


REFUSED = [
    (one(constraints="7"), 400, "inputs[0].constraints: a list of strings is expected, not a string"),
    (one(constraints={"7": 1}), 400, "inputs[0].constraints: a list of strings is expected, not an object"),
    ({"inputs": [{"source": "1", "constraints": None}]}, 400, "inputs[0].constraints: a list of strings is expected, "
                                                               "not null"),
    (one(constraints=["7", 7], before=["1 2 3"]), 400, "inputs[1].constraints[1]: a string is expected, not an "
                                                       "integer"),
    (one(constraints=[["7"]]), 400, "inputs[0].constraints[0]: a string is expected, not a list"),
    (one(constraints=[""]), 400, "inputs[0].constraints[0]: an empty phrase"),
    (one(constraints=["7", "!"]), 400, "inputs[0].constraints[1]: an empty phrase"),
    (one(constraints=["  "]), 400, "inputs[0].constraints[0]: an empty phrase"),
    (one(constraints=["7\n8"]), 400, "inputs[0].constraints[0]: holds a line break"),
    (one(constraints=["7\t8"]), 400, "inputs[0].constraints[0]: holds a line break or tab"),
    (one(constraints=["!1"] * (MAX_PHRASES + 1)), 400, f"inputs[0].constraints: {MAX_PHRASES + 1} phrases, more "
                                                       f"than the {MAX_PHRASES}"),
    (one(constraints=["7 " * MAX_PHRASE_CHARS]), 400, f"inputs[0].constraints[0]: {2 * MAX_PHRASE_CHARS} "
                                                      f"characters, more than the {MAX_PHRASE_CHARS}"),
    (b'{"inputs": [{"source": "1", "constraints": ["\\ud800"]}]}', 400, "inputs[0].constraints[0]: holds a lone "
                                                                         "surrogate"),
    ({"inputs": [{"source": "1", "constraint": ["7"]}]}, 400, "inputs[0]: an object takes \"source\""),
    # what the search cannot do: more phrases that must appear than the beam keeps apart, a word it cannot spell
    (one(constraints=["7", "8", "9"]), 422, "inputs[0].constraints: 3 phrases must appear, more than the beam (2)"),
    (one(constraints=["7", "\u2603"]), 422, "inputs[0].constraints: the phrase '\u2603' has a part the target "
                                            "vocabulary cannot spell"),
    # phrases that must appear lengthen the output the search allows: one past --max-output-tokens, and a request
    # within the work budget without them but over it with them
    (one(constraints=["7 " * 65]), 422, "inputs[0].constraints: 65 tokens the output must hold, more than this "
                                        "server's --max-output-tokens 64"),
    ({"inputs": [{"source": "1", "prefix": "3 " * 40, "constraints": ["9 " * 30]}]}, 422,
     "inputs[0].prefix and .constraints: 70 tokens the output must hold"),
    ({"inputs": [{"source": "1 2", "constraints": ["7 " * 30, "8 " * 30]}] * 4}, 413,
     "inputs: 4 sources x beam 2 x their longest outputs make 480 token steps, more than this server's --max-work"),
]


@pytest.mark.parametrize(("body", "status", "message"), REFUSED, ids=[f"{s}-{i}" for i, (_, s, _) in
                                                                      enumerate(REFUSED)])
def test_constraints_that_cannot_be_decoded_are_refused_in_one_line_naming_the_input(server, body, status, message):
    data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
    got, _, answer = call(server, "/v1/decode", raw=data)
    assert got == status and set(answer) == {"error"} and answer["error"].startswith(message), answer
    assert "\n" not in answer["error"]
    assert call(server, "/health")[0] == 200


def test_the_same_requests_without_their_phrases_are_served(server):
    """The refusals above are the phrases' own: their requests without them fit the server's limits."""
    status, _, answer = call(server, "/v1/decode", {"inputs": ["1 2"] * 4})
    assert status == 200, answer
    status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": "1", "prefix": "3 " * 40}]})
    assert status == 200, answer
    status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": "1 2", "constraints": ["7", "8", "9"]}],
                                                    "beam": 3})
    assert status == 200 and honoured(texts(answer)[0], ["7", "8", "9"]), answer


def test_an_input_objects_constraints_are_checked_as_they_are_read():
    assert check_input({"source": "1", "constraints": ["7", "!8"]}, "inputs[0]") == Prefixed("1", "", "",
                                                                                             ("7", "!8"))
    assert check_input({"source": "1", "constraints": []}, "inputs[0]") == Prefixed("1", "")
    with pytest.raises(RequestError, match=r"\"constraints\" \(phrases the output must hold"):
        check_input({"source": "1", "constrains": []}, "inputs[0]")


def test_phrases_count_in_the_cost_as_a_prefix_does():
    limits = Limits(max_output_tokens=64, max_work=100)
    lengths = Lengths(max_len_a=1.0, max_len_b=2, min_len=1, rows=2, rows_key="beam")
    assert check_cost(lengths, [3, 3], {}, limits).longest == [4, 4]
    assert check_cost(lengths, [3, 3], {}, limits, phrases=[0, 10]).longest == [4, 10]
    assert check_cost(lengths, [3], {}, limits, prefixes=[5], phrases=[10]).longest == [15]
    with pytest.raises(RequestError, match="fewer phrases that must appear") as refused:
        check_cost(lengths, [3, 3], {}, limits, phrases=[30, 30])
    assert refused.value.status == 413
