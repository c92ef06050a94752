"""Preparing the training data keeps nothing until it is done: a signal stops it within seconds, its work folders
removed and its workers gone; a process killed outright (SIGKILL) leaves its work folder, which the next
preparation of the same data removes."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.fault_tools import run, start, wait_for

PAIRS = 2000  # 40 shards of 50 pairs at a second each: the encoding lasts about 20 s on two workers


def _corpus(folder: Path) -> Path:
    words = "the a cat dog sat ran on under mat rug".split()
    for side in ("en", "de"):
        lines = [" ".join(words[(i * 7 + k) % 10] for k in range(i % 9 + 1)) for i in range(PAIRS)]
        (folder / f"train.{side}").write_text("\n".join(lines) + "\n")
    recipe = folder / "r.toml"
    recipe.write_text('[task]\nname = "translation"\ndataset = "files"\ndata_dir = "."\nsrc_lang = "en"\n'
                      'tgt_lang = "de"\n[tokenizer]\nname = "word"\n[model]\nname = "transformer"\n')
    return recipe


def _start(cache: Path, log: Path, *args: object) -> subprocess.Popen:
    return start(*args, log=log, module=("tests.faults.slowed", "encoding"), extra_env={"SEQXDUCE_CACHE": str(cache)})


def _encoding(cache: Path) -> bool:
    """Whether a dataset's work folder has ids in it: the encoding is under way."""
    return any((work / "src.ids").is_file() for work in cache.glob(".prepared-*"))


def test_a_signal_while_encoding_stops_at_once_and_removes_the_work_folders(tmp_path):
    recipe, cache, log = _corpus(tmp_path), tmp_path / "cache", tmp_path / "log"
    process = _start(cache, log, "prepare", recipe)
    wait_for(lambda: _encoding(cache), process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143, log.read_text()[-2000:]
    text = log.read_text()
    assert "SIGTERM: stopped while preparing the training data; nothing of it was kept" in text
    assert "Traceback" not in text
    left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))
    assert left == [], (left, text[-2000:])  # no work folder, no dataset (once failed under load: say what was left)


def test_a_signal_while_the_run_prepares_its_data_stops_it_before_the_first_step(tmp_path):
    recipe, cache, log = _corpus(tmp_path), tmp_path / "cache", tmp_path / "log"
    process = _start(cache, log, "train", recipe, "--out", tmp_path / "run")
    wait_for(lambda: _encoding(cache), process)
    process.send_signal(signal.SIGUSR1)
    assert process.wait(timeout=60) == 128 + signal.SIGUSR1, log.read_text()[-2000:]
    text = log.read_text()
    assert "SIGUSR1: stopped while preparing the training data, before the first step" in text
    assert "Traceback" not in text and not list(cache.iterdir())
    assert not (tmp_path / "run" / "checkpoints").exists() or not list((tmp_path / "run" / "checkpoints").iterdir())


def test_a_preparation_killed_outright_leaves_a_work_folder_that_the_next_one_removes(tmp_path):
    recipe, cache, log = _corpus(tmp_path), tmp_path / "cache", tmp_path / "log"
    process = _start(cache, log, "prepare", recipe)
    wait_for(lambda: _encoding(cache), process)
    process.kill()
    process.wait(timeout=60)
    left = sorted(cache.glob(".prepared-*"))
    assert left  # nothing could clean up
    again = run("prepare", recipe, extra_env={"SEQXDUCE_CACHE": str(cache)})
    assert again.returncode == 0, again.stderr
    assert f"left unfinished by process {process.pid}, which is gone" in again.stderr
    assert not list(cache.glob(".prepared-*")) and len(list(cache.glob("prepared-*"))) == 1
