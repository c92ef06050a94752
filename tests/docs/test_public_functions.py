"""Every command is also a function of the package (README "The command line"): the inspection ones, score, export
and serve included."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import cli
from seqxduce.serving.limits import Limits

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_the_package_offers_a_function_per_command_without_importing_torch():
    code = ("import sys, seqxduce; names = ['train', 'decode', 'decode_split', 'evaluate', 'average', 'prepare', "
            "'load_recipe', 'info', 'plot', 'attention', 'recipe_cost', 'score', 'export_run', 'serve', "
            "'decode_file', 'score_file', 'distill']; "
            "assert all(callable(getattr(seqxduce, n)) for n in names); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_info_gives_what_the_info_command_prints(tiny_run):
    facts = seqxduce.info(tiny_run)
    result = CliRunner().invoke(cli, ["info", str(tiny_run), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == json.loads(json.dumps(facts.as_dict()))


def test_recipe_cost_gives_what_recipe_info_prints():
    cost = seqxduce.recipe_cost(RECIPES / "wmt14_en_de_base.toml")
    result = CliRunner().invoke(cli, ["recipe", "info", str(RECIPES / "wmt14_en_de_base.toml")])
    assert result.exit_code == 0, result.output
    assert f"parameters: {cost.parameters:,}" in result.output


def test_plot_and_attention_write_their_pictures(tiny_run, tmp_path):
    pytest.importorskip("matplotlib")
    curves = seqxduce.plot([tiny_run], tmp_path / "curves.png")
    picture = seqxduce.attention(tiny_run, "a b c", tmp_path / "attention.png", kinds=("cross",))
    assert curves.stat().st_size > 0 and picture.stat().st_size > 0


def test_score_gives_what_the_score_command_prints(tiny_run, tmp_path):
    sources, targets = ["1 2 3", "4 5"], ["3 2 1", "5 4"]
    (tmp_path / "src").write_text("".join(f"{s}\n" for s in sources), encoding="utf-8")
    (tmp_path / "tgt").write_text("".join(f"{t}\n" for t in targets), encoding="utf-8")
    result = CliRunner().invoke(cli, ["score", str(tiny_run), "--source", str(tmp_path / "src"), "--target",
                                      str(tmp_path / "tgt"), "--normalize"])
    assert result.exit_code == 0, result.output
    scores = seqxduce.score(tiny_run, sources, targets)
    assert seqxduce.engine.format_scores(scores, normalize=True) == result.stdout.splitlines()


def test_export_run_writes_what_the_export_command_writes(tiny_run, tmp_path):
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install -e '.[ctranslate2]')")
    from seqxduce.engine import checkpoint_for

    done = seqxduce.export_run(tiny_run, tmp_path / "ct2")
    assert (tmp_path / "ct2" / "model.bin").is_file()
    assert done.metadata["checkpoint"] == str(checkpoint_for(tiny_run).resolve())


def test_serve_refuses_an_option_the_command_lacks_or_a_value_out_of_its_range(tiny_run):
    with pytest.raises(seqxduce.UserError, match="no option max_batch"):
        seqxduce.serve(tiny_run, max_batch=3)
    with pytest.raises(seqxduce.UserError, match="max_inputs = 0 is out of range; use a number >= 1"):
        seqxduce.serve(tiny_run, max_inputs=0)
    with pytest.raises(seqxduce.UserError, match="max_inputs = 0 is out of range; use a number >= 1"):
        Limits(max_inputs=0)


def test_serve_serves_with_the_options_given_until_sigterm(tiny_run):
    pytest.importorskip("starlette", reason="the serve extra is not installed (pip install -e '.[serve]')")
    pytest.importorskip("uvicorn", reason="the serve extra is not installed (pip install -e '.[serve]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (f"import seqxduce; from seqxduce.serving.limits import Limits; seqxduce.serve({str(tiny_run)!r}, "
            f"port={port}, limits=Limits(max_inputs=3), log_level='warning')")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120  # a loaded machine imports torch slowly
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/info", timeout=5) as answer:
                    info = json.loads(answer.read())
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stdout.read().decode()
                time.sleep(0.2)
        assert info["serve"]["limits"]["max_inputs"] == 3
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_decode_file_and_score_file_write_what_the_commands_write(tiny_run, tmp_path):
    sources, targets = ["1 2 3", "4 5", "6"], ["3 2 1", "5 4", "6"]
    (tmp_path / "src").write_text("".join(f"{s}\n" for s in sources), encoding="utf-8")
    (tmp_path / "tgt").write_text("".join(f"{t}\n" for t in targets), encoding="utf-8")
    done = seqxduce.decode_file(tiny_run, tmp_path / "src", tmp_path / "out", resume=True)
    assert (done.done, done.new) == (3, 3)
    assert (tmp_path / "out").read_text().splitlines() == [o.text for o in seqxduce.decode(tiny_run, sources)]
    assert seqxduce.decode_file(tiny_run, tmp_path / "src", tmp_path / "out", resume=True).complete_already
    seqxduce.score_file(tiny_run, tmp_path / "src", tmp_path / "tgt", tmp_path / "scores")
    result = CliRunner().invoke(cli, ["score", str(tiny_run), "--source", str(tmp_path / "src"), "--target",
                                      str(tmp_path / "tgt")])
    assert result.exit_code == 0 and result.stdout == (tmp_path / "scores").read_text()
