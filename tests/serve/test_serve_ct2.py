"""`seqxduce serve --engine ctranslate2`: the same server over an exported model, answering what `seqxduce decode
--engine ctranslate2` prints for the same sources and settings, and refusing in one 422 what only seqxduce's own
engine does (/v1/attention); a target prefix is CTranslate2's target_prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands
from tests.serve.test_serve import SOURCES, call, reverse_run, serving, texts  # noqa: F401 - reverse_run: a fixture

pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed (pip install -e '.[ctranslate2]')")


def decode_ct2(run: Path, sources: list[str], tmp: Path, *options: str) -> list[str]:
    given = tmp / "sources.txt"
    given.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(run), "--input", str(given),
                                                        "--engine", "ctranslate2", *options])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.fixture(scope="module")
def exported(reverse_run, tmp_path_factory) -> Path:  # noqa: F811 - the fixture imported above
    out = tmp_path_factory.mktemp("export") / "ct2"
    result = CliRunner().invoke(add_plugin_commands(), ["export", str(reverse_run), "--to", "ctranslate2",
                                                        "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_answers_equal_decode_with_the_same_engine_and_settings(exported, tmp_path):
    with serving(exported, tmp_path, "--engine", "ctranslate2", "--threads", "1") as server:
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES})
        assert status == 200, answer
        assert texts(answer) == decode_ct2(exported, SOURCES, tmp_path)
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES[:3], "beam": 1})
        assert status == 200 and texts(answer) == decode_ct2(exported, SOURCES[:3], tmp_path,
                                                             "--set", "decode.beam=1")
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES[:2], "nbest": 2})
        assert status == 200 and [len(hyps) for hyps in answer["outputs"]] == [2, 2]
        status, _, info = call(server, "/v1/info")
        assert info["serve"]["engine"] == "ctranslate2" and "beam" in info["serve"]["request_keys"]
        assert info["serve"]["threads"] == 1  # --threads: torch's count, which the translator was built with

        status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": "1 2 3", "prefix": "3"}, "4 5"]})
        assert status == 200 and answer["outputs"][0][0]["text"].startswith("3")
        prefix_file = tmp_path / "prefix.txt"
        prefix_file.write_text("3\n\n", encoding="utf-8")
        assert texts(answer) == decode_ct2(exported, ["1 2 3", "4 5"], tmp_path, "--prefix-file", str(prefix_file))
        status, _, answer = call(server, "/v1/attention", {"input": "1 2"})
        assert status == 422 and "/v1/attention needs seqxduce's own engine" in answer["error"]
        status, _, answer = call(server, "/v1/decode", {"inputs": ["1 2"], "beam": 0})
        assert status == 422 and "beam" in answer["error"]
        assert call(server, "/health")[0] == 200  # it goes on


def test_a_run_directory_is_exported_first_and_decode_only_flags_are_refused(reverse_run, tmp_path):  # noqa: F811
    with serving(reverse_run, tmp_path, "--engine", "ctranslate2") as server:
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES[:4]})
        assert status == 200 and texts(answer) == decode_ct2(reverse_run, SOURCES[:4], tmp_path)
    result = CliRunner().invoke(add_plugin_commands(), ["serve", str(reverse_run), "--engine", "ctranslate2",
                                                        "--ensemble", str(reverse_run)])
    assert result.exit_code != 0 and "--ensemble is not supported there" in result.output


def test_a_batch_nobody_waits_for_ends_after_the_call_under_way(exported):
    # CTranslate2 cannot stop a call: a batch is decoded in calls of CALL_SOURCES sources and the stop check is read
    # between them, so a batch whose clients left ends after one call, not after all of them
    from seqxduce.decoding.jobs import RunSpec
    from seqxduce.decoding.search import SearchStopped
    from seqxduce.export.engine_choice import engine_named
    from seqxduce.serving.ct2_service import CALL_SOURCES, CT2Service
    from seqxduce.serving.service import Asked

    with engine_named("ctranslate2").open(RunSpec(str(exported))) as loaded:
        service = CT2Service(loaded)
        calls: list[int] = []
        answers = service.answers
        service.answers = lambda sources, key: calls.append(len(sources)) or answers(sources, key)
        sources = (SOURCES * 4)[:3 * CALL_SOURCES]
        whole = service.decode(sources, Asked())
        assert calls == [CALL_SOURCES] * 3 and len(whole) == len(sources)
        calls.clear()
        with pytest.raises(SearchStopped):
            service.decode(sources, Asked(), stop=lambda: bool(calls))
        assert calls == [CALL_SOURCES]
