"""Fixtures of the Marian plugin's tests: one tiny Hugging Face Marian folder and its import, made once."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def marian_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MarianMTModel (trained a few steps) with its tokenizer files, saved with save_pretrained."""
    pytest.importorskip("transformers")
    from seqxduce_marian.testing import build_tiny_marian

    return build_tiny_marian(tmp_path_factory.mktemp("hf") / "tiny-marian")


@pytest.fixture(scope="session")
def marian_run(marian_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`seqxduce import` of marian_folder."""
    from click.testing import CliRunner

    from seqxduce.cli import cli

    run = tmp_path_factory.mktemp("runs") / "marian"
    result = CliRunner().invoke(cli, ["import", str(marian_folder), "--from", "marian", "-o", str(run)])
    assert result.exit_code == 0, result.output
    return run
