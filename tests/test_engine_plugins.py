"""Inference engines as a plugin kind (issue #78): the core's two register through register_engines as a third
party's does, and the installed third-party engine (tests/plugins/seqxduce-sort: "sorter", each source's tokens
sorted) is offered by decode, score and serve, decodes through the Python API and the CLI, is served, and what it
lacks is refused in one line before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.engines import Engine
from seqxduce.export.engine_choice import ENGINE_NAMES, engine_named
from seqxduce.hookspecs import hookimpl
from seqxduce.registry import registry
from seqxduce.testing import plugins_registered

SOURCES = ["3 1 2", "5 4", "6", "2 2 1"]
SORTED = ["1 2 3", "4 5", "6", "1 2 2"]


def cli(*args: str | Path):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


def test_the_cores_engines_and_a_plugins_come_from_the_registry():
    reg = registry()
    assert reg.engine_names()[:2] == list(ENGINE_NAMES)  # the core's first, the default first of all
    assert "sorter" in reg.engine_names()
    assert reg.get("engine", "seqxduce").distribution == "seqxduce"
    assert reg.get("engine", "sorter").distribution == "seqxduce-sort"
    assert isinstance(engine_named("sorter"), Engine)


@pytest.mark.parametrize("command", ["decode", "score", "serve"])
def test_a_plugins_engine_is_offered_by_every_command(command: str):
    result = cli(command, "--help")
    assert result.exit_code == 0, result.output
    assert "[seqxduce|ctranslate2|sorter]" in result.output


def test_seqxduce_plugins_lists_the_engines_with_what_each_can_do():
    result = cli("plugins", "--kind", "engine")
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()[1:]}
    assert "seqxduce-sort (sort) [can: none]" in lines["sorter"]
    assert "[can: nbest, negative constraints, prefixes, scoring]" in lines["ctranslate2"]
    assert "seqxduce (seqxduce.decoding.engines)" in lines["seqxduce"]


class Other(Engine):
    name = "other"
    capabilities = frozenset({"nbest"})

    def open(self, spec):
        raise NotImplementedError

    def decode(self, loaded, sources, prefixes=None, prefix_where="prefix ", annotate=False):
        raise NotImplementedError


class OtherPlugin:
    @hookimpl
    def register_engines(self, register):
        register("other", Other, help="registered in code")
        register("broken", lambda: object(), help="breaks the contract")


def test_an_engine_registered_in_code_is_offered_and_one_that_breaks_the_contract_is_refused_in_one_line():
    with plugins_registered(OtherPlugin()):
        result = cli("serve", "--help")
        assert "sorter|other|broken]" in result.output
        with pytest.raises(seqxduce.UserError, match=r"^engine 'broken' \(plugin 'test-plugin-0'\): its factory "
                                                     r"returned object, not a seqxduce.decoding.engines.Engine"):
            engine_named("broken")
        listed = cli("plugins", "--kind", "engine").output
        assert "[can: nbest]" in listed and "[can: broken: engine 'broken'" in listed
    with pytest.raises(seqxduce.UserError, match="no such engine; give one of seqxduce, ctranslate2, sorter$"):
        engine_named("other")


def test_a_plugins_engine_decodes_through_the_api_and_the_cli(tiny_run: Path, tmp_path: Path):
    outputs = seqxduce.decode(tiny_run, SOURCES, engine="sorter")
    assert [o.text for o in outputs] == SORTED
    given = tmp_path / "in.txt"
    given.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    result = cli("decode", tiny_run, "--input", given, "--engine", "sorter")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == SORTED
    out = tmp_path / "out.txt"
    result = cli("decode", tiny_run, "--input", given, "-o", out, "--engine", "sorter", "--processes", "2")
    assert result.exit_code == 0, result.output  # worker processes open their own load through the registry
    assert out.read_text(encoding="utf-8").splitlines() == SORTED
    result = cli("decode", tiny_run, "--split", "test", "--engine", "sorter")
    assert result.exit_code == 0, result.output
    assert "sequence_accuracy" in result.output or "accuracy" in result.output


@pytest.mark.parametrize(("args", "expected"), [
    (["decode", "--nbest", "2"], "decode --engine sorter: --nbest is not supported there (n-best lists)"),
    (["decode", "--beam", "3"], "--beam: the sorter engine does not read [decode] beam"),
    (["decode", "--ensemble", "RUN"], "decode --engine sorter: --ensemble is not supported there"),
    (["score", "--source", "IN", "--target", "IN"], "score --engine sorter: score is not supported there (scoring "
                                                    "given pairs)"),
    (["serve", "--checkpoint", "last"], "serve --engine sorter: --checkpoint is not supported there"),
])
def test_what_a_plugins_engine_lacks_is_refused_in_one_line_before_any_work(tiny_run: Path, tmp_path: Path,
                                                                             args: list[str], expected: str):
    given = tmp_path / "in.txt"
    given.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    command, *rest = args
    rest = [str(tiny_run) if a == "RUN" else str(given) if a == "IN" else a for a in rest]
    if command == "decode":
        rest += ["--input", str(given)]
    result = cli(command, tiny_run, *rest, "--engine", "sorter")
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and expected in result.output, result.output
    assert "Traceback" not in result.output and "decoding with" not in result.output


def test_every_engine_names_a_service_that_loads_and_a_broken_name_is_one_line():
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from importlib.metadata import EntryPoint

    from seqxduce.serving.command import _service_for

    for name in registry().engine_names():  # the table serve builds from is the engines' own declarations
        assert callable(EntryPoint(name, engine_named(name).service, "seqxduce.services").load()), name

    class Misnamed(Other):
        service = "seqxduce.serving.no_such_module:Service"

    with pytest.raises(seqxduce.UserError, match=r"^serve --engine other: its service "
                                                 r"'seqxduce.serving.no_such_module:Service' cannot be loaded"):
        _service_for(Misnamed(), None)


def test_a_plugins_engine_is_served_through_the_service_it_declares(tiny_run: Path):
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from seqxduce.decoding.jobs import RunSpec
    from seqxduce.serving.command import _service_for
    from seqxduce.serving.engine_service import EngineService
    from seqxduce.serving.limits import DecodeAsk, Prefixed, RequestError

    sorter = engine_named("sorter")
    with sorter.open(RunSpec(str(tiny_run))) as loaded:
        service = _service_for(sorter, loaded)
        assert isinstance(service, EngineService) and service.served() == {"engine": "sorter"}
        key = service.key_for(DecodeAsk(list(SOURCES), 1))
        assert [hyps[0]["text"] for hyps in service.decode(SOURCES, key)] == SORTED
        for ask, field in ((DecodeAsk(list(SOURCES), 2), "nbest"), (DecodeAsk(list(SOURCES), 1, {"beam": 3}), "beam"),
                           (DecodeAsk([Prefixed("3 1", "1")], 1), "prefix")):
            with pytest.raises(RequestError, match=f"^{field}: the sorter engine"):
                service.key_for(ask)
        # an input object without a prefix asks for none; constraints need the features the engine declares
        assert service.phrase_tokens([Prefixed("3 1", "")], service.key_for(DecodeAsk([Prefixed("3 1", "")], 1))
                                     ) == [0]
        for phrases, what in ((("1",), "phrases that must appear"), (("!1",), "phrases that must not appear")):
            with pytest.raises(RequestError, match=rf"^inputs\[0\]\.constraints: the sorter engine takes no {what}"):
                service.phrase_tokens([Prefixed("3 1", "", constraints=phrases)], key)


def test_seqxduce_serve_serves_a_plugins_engine(tiny_run: Path, tmp_path: Path):
    pytest.importorskip("uvicorn", reason="the serve extra is not installed")
    from tests.serve.test_serve import call, serving

    with serving(tiny_run, tmp_path, "--engine", "sorter", "--threads", "1") as server:
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES})
        assert status == 200, answer
        assert [hyps[0]["text"] for hyps in answer["outputs"]] == SORTED
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES, "nbest": 2})
        assert status == 422 and "nbest: the sorter engine gives one output per source" in str(answer), answer
        status, _, info = call(server, "/v1/info")
        assert status == 200 and info["serve"]["engine"] == "sorter"
