"""Progress where there is no terminal: with stderr going to a file (a batch job's log), every long step of
preparing, training and decoding writes plain lines (what, done of total, rate, ETA) and says when it starts and
ends: the tokenizer's training, the corpus's encoding, a sampled epoch's encoding, the final averaging and the
test set's decode. SEQXDUCE_PROGRESS_SECONDS=0 writes a line at every advance, so that a tiny run shows them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from seqxduce.testing import tiny_recipe
from tests.fault_tools import REPO, command, env

RECIPE = tiny_recipe({"name": "algorithmic", "kind": "reverse", "train_max_len": 6, "valid_max_len": 6,
                      "test_max_len": 6, "train_size": 3000, "valid_size": 10, "test_size": 40},
                     {"name": "sentencepiece", "vocab_size": 24, "num_threads": 1, "sample_alpha": 0.1},
                     {"max_tokens": 4000, "max_steps": 4, "warmup_steps": 2, "log_every": 2, "validate_every": 0,
                      "checkpoint_every": 1, "keep_checkpoints": 4, "average_last": 3})


def _logged(tmp_path: Path, name: str, *args: object) -> list[str]:
    """`seqxduce ARGS` with stdout and stderr going to a file, as in a batch job; the file's lines."""
    log = tmp_path / f"{name}.log"
    with log.open("w") as handle:
        done = subprocess.run(command(*args), stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, timeout=600,
                              env={**env(), "SEQXDUCE_PROGRESS_SECONDS": "0", "SEQXDUCE_CACHE": str(tmp_path / "c")})
    lines = log.read_text().splitlines()
    assert done.returncode == 0, "\n".join(lines[-30:])
    assert not any("\x1b[" in line for line in lines)  # plain text: no bar, no colour
    return lines


def _progress(lines: list[str], what: str) -> list[str]:
    return [line for line in lines if line.startswith(f"{what}: ") and "/s" in line]


@pytest.mark.slow
def test_long_steps_write_progress_lines_to_a_log_file(tmp_path: Path):
    recipe = tmp_path / "sampled.toml"
    recipe.write_text(RECIPE)

    prepared = _logged(tmp_path, "prepare", "prepare", recipe)
    assert prepared[0] == "training the tokenizer (sentencepiece) on the training text"
    reading = _progress(prepared, "tokenizer: reading the text")
    assert reading and reading[-1].startswith("tokenizer: reading the text: 3,000 pairs, ")
    assert any(re.fullmatch(r"tokenizer: read 3,000 pairs in [\d.]+ s; sentencepiece trains on them now", line)
               for line in prepared)
    assert any(re.fullmatch(r"trained the tokenizer in [\d.]+ s", line) for line in prepared)
    # the algorithmic task names no files: the encoding counts without a total
    assert _progress(prepared, "encoding")[-1].startswith("encoding: 3,000 pairs, ")

    run = tmp_path / "run"
    trained = _logged(tmp_path, "train", "train", recipe, "--out", run)
    assert trained[0].startswith("threads: 1 (OMP_NUM_THREADS)")
    sampled = _progress(trained, "sampling epoch 1")
    assert sampled and sampled[-1].startswith("sampling epoch 1: 3,000 pairs, ")
    assert any(re.fullmatch(r"sampled epoch 1: 3,000 pairs encoded anew in [\d.]+ s \([\d,]+ pairs/s\)", line)
               for line in trained)
    assert "averaging 3 checkpoint(s), step_00000002.pt to step_00000004.pt" in trained
    averaging = _progress(trained, "averaging")
    assert [line.split(",")[0] for line in averaging] == [f"averaging: {k}/3 checkpoints (" + f"{100 * k / 3:.1f}%)"
                                                          for k in (1, 2, 3)]
    assert "eta 0:00:00" in averaging[-1]
    assert any(line.startswith("averaged the last 3 checkpoints (steps 2, 3, 4) into ") for line in trained)

    decoded = _logged(tmp_path, "decode", "decode", run, "--split", "test", "-o", tmp_path / "test.hyp")
    lines = _progress(decoded, "decode")
    assert lines and lines[-1].startswith("decode: 40/40 lines (100.0%), ") and "eta " in lines[-1]


def test_a_tokenizer_trained_in_a_run_says_so_in_the_log(tmp_path: Path):
    """A run whose tokenizer is trained in the run (token_cache = false) writes the same lines as prepare."""
    from tests.tiny import TINY_RECIPE

    lines = _logged(tmp_path, "train", "train", TINY_RECIPE, "--out", tmp_path / "run", "--set",
                    "train.token_cache=false", "--set", "train.max_steps=2", "--set", "train.validate_every=0")
    assert "training the tokenizer (word) on the training text" in lines
    assert any(re.fullmatch(r"tokenizer: read 300 pairs in [\d.]+ s; word trains on them now", line)
               for line in lines)
    assert any(re.fullmatch(r"trained the tokenizer in [\d.]+ s", line) for line in lines)
