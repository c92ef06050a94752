"""Ensembles at decode time: the averaged distribution, search with it, and `seqxduce decode --ensemble`."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.decode import load_run
from seqxduce.decoding.ensemble import EnsembleModel
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.testing import TableModel, table_request


def table(seed: int, vocab: int = 5, length: int = 4) -> TableModel:
    return TableModel(torch.randn(length, vocab, vocab, generator=torch.Generator().manual_seed(seed)) * 2)


def test_the_ensemble_averages_the_members_probabilities():
    a, b = table(1), table(2)
    request = table_request([2, 3])
    ensemble = EnsembleModel([a, b])
    memory = ensemble.encode(request.src)
    cache = ensemble.init_cache(memory)
    tokens = torch.tensor([1, 1])
    logprobs, cache = ensemble.step(tokens, memory, cache)
    expected = torch.log((a.table[0, tokens].exp() + b.table[0, tokens].exp()) / 2)
    torch.testing.assert_close(logprobs, expected)
    assert torch.allclose(logprobs.exp().sum(-1), torch.ones(2))
    logprobs, _ = ensemble.step(torch.tensor([3, 4]), memory, cache)  # every member's own cache advanced
    torch.testing.assert_close(logprobs, torch.log((a.table[1, [3, 4]].exp() + b.table[1, [3, 4]].exp()) / 2))


def test_an_ensemble_of_copies_searches_as_the_model_alone():
    model, request = table(3), table_request([1, 2, 3])
    settings = BeamSettings(beam=3, alpha=0.6, max_len_a=0.0, max_len_b=4, nbest=3)
    alone = beam_search(model, request, settings)
    together = beam_search(EnsembleModel([model, table(3)]), request, settings)
    for x, y in zip(alone, together):
        assert [h.tokens for h in x] == [h.tokens for h in y]
        assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-5)


def test_an_ensemble_of_two_models_can_choose_what_neither_prefers_alone():
    # member a prefers token 3 then eos, member b token 4 then eos; both give token 2 (eos) 0.4
    def peaked(best: int) -> TableModel:
        scores = torch.full((2, 5, 5), -9.0)
        scores[:, :, 2] = math.log(0.4)
        scores[0, :, best] = math.log(0.6)
        scores[1, :, 2] = 0.0
        return TableModel(scores)

    request = table_request([1])
    greedy = SearchSettings(max_len_a=0.0, max_len_b=2)
    assert greedy_search(peaked(3), request, greedy)[0][0].tokens[0] == 3
    # averaged: 3 and 4 get 0.3 each, eos 0.4, so the ensemble stops at once
    assert greedy_search(EnsembleModel([peaked(3), peaked(4)]), request, greedy)[0][0].tokens == []


def test_decode_ensembles_checkpoints_of_one_run(tiny_run: Path):
    runner = CliRunner()
    checkpoints = sorted((tiny_run / "checkpoints").glob("step_*.pt"))
    alone = runner.invoke(add_plugin_commands(), ["decode", str(tiny_run), "--split", "valid"])
    both = runner.invoke(add_plugin_commands(), ["decode", str(tiny_run), "--split", "valid",
                                                 "--ensemble", str(checkpoints[-1]), "--ensemble", str(checkpoints[0])])
    assert alone.exit_code == 0 and both.exit_code == 0, both.output
    assert f"+ {checkpoints[-1]}" in both.output


def test_checkpoint_choice_applies_to_ensemble_run_directories_too(tiny_run: Path, tmp_path: Path):
    """--checkpoint last takes the newest step of an --ensemble run directory as of RUN itself; a file stays itself."""
    other = tmp_path / "other"
    shutil.copytree(tiny_run, other)
    newest = sorted((other / "checkpoints").glob("step_*.pt"))[-1]
    assert load_run(tiny_run, ensemble=[other]).members == [other / "average.pt"]  # the default: its average
    assert load_run(tiny_run, ensemble=[other], checkpoint="last").members == [newest]
    oldest = sorted((other / "checkpoints").glob("step_*.pt"))[0]
    assert load_run(tiny_run, ensemble=[oldest], checkpoint="last").members == [oldest]


def test_a_run_with_other_tokenizer_files_is_refused(tiny_run: Path, tmp_path: Path):
    other = tmp_path / "other"
    shutil.copytree(tiny_run, other)
    vocab = next(p for p in other.iterdir() if p.name.startswith(("tokenizer", "src_tokenizer")))
    vocab.write_bytes(vocab.read_bytes() + b"\n")
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(tiny_run), "--split", "valid",
                                                        "--ensemble", str(other)])
    assert result.exit_code != 0
    assert "other tokenizer files" in result.output and "Traceback" not in result.output


def test_an_empty_ensemble_is_a_user_error():
    with pytest.raises(UserError, match="at least one model"):
        EnsembleModel([])
