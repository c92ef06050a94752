"""Subword regularization (sample_alpha): BPE-dropout and unigram sampling of the training split, deterministic
from the seed; off by default; bad settings refused; a tiny run trains with it and resumes bit-exact."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from seqxduce_sentencepiece import build_sentencepiece
from seqxduce_sentencepiece.settings import SentencePieceSettings

import seqxduce
from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.testing import tiny_recipe

WORDS = "the a cat dog sat on mat ran fast house big small red green blue über straße".split()
SAMPLING = {"bpe": dict(sample_alpha=0.3), "unigram": dict(sample_alpha=0.2, sample_nbest=-1)}


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) for _ in range(n)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A bpe and a unigram model, saved; each test loads one under the settings it needs."""
    where = tmp_path_factory.mktemp("models")
    for model_type, size in (("bpe", 100), ("unigram", 40)):
        tokenizer = build_sentencepiece(SentencePieceSettings(model_type=model_type, vocab_size=size))
        tokenizer.train(corpus(), where)
        tokenizer.save(where, model_type)
    return where


def loaded(saved: Path, model_type: str, **settings):
    tokenizer = build_sentencepiece(SentencePieceSettings(model_type=model_type, vocab_size=100, **settings))
    tokenizer.load(saved, model_type)
    return tokenizer


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_off_by_default_and_encode_stays_the_best_segmentation(saved, model_type):
    plain, sampling = loaded(saved, model_type), loaded(saved, model_type, **SAMPLING[model_type])
    texts = corpus(50, seed=1)
    assert plain.encode_sampled(texts, seed=1) is None
    best = [plain.encode(t) for t in texts]
    sampling.encode_sampled(texts, seed=1)
    assert [sampling.encode(t) for t in texts] == best  # encode() never samples


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_samples_are_a_function_of_the_seed_and_decode_to_the_text(saved, model_type):
    tokenizer = loaded(saved, model_type, **SAMPLING[model_type])
    texts = corpus(100, seed=2)
    first = tokenizer.encode_sampled(texts, seed=7)
    assert tokenizer.encode_sampled(texts, seed=7) == first
    assert loaded(saved, model_type, **SAMPLING[model_type]).encode_sampled(texts, seed=7) == first
    assert tokenizer.encode_sampled(texts, seed=8) != first
    assert first != [tokenizer.encode(t) for t in texts]
    assert [tokenizer.decode(ids) for ids in first] == texts


def test_samples_do_not_depend_on_the_thread_or_on_sampling_beside_them(saved):
    tokenizer = loaded(saved, "unigram", **SAMPLING["unigram"])
    texts = corpus(200, seed=3)
    expected = {seed: tokenizer.encode_sampled(texts, seed) for seed in (1, 2)}
    got: dict[tuple[int, int], list[list[int]]] = {}

    def sample(seed: int) -> None:
        for round_ in range(3):
            got[seed, round_] = tokenizer.encode_sampled(texts, seed)

    threads = [threading.Thread(target=sample, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(ids == expected[seed] for (seed, _), ids in got.items()) and len(got) == 6


@pytest.mark.parametrize("settings, message", [
    (dict(model_type="word", sample_alpha=0.1), r"\[tokenizer\] sample_alpha = 0.1: a word model .*model_type"),
    (dict(model_type="bpe", sample_alpha=1.0), r"\[tokenizer\] sample_alpha = 1 drops every BPE merge"),
    (dict(model_type="unigram", sample_alpha=0.1, sample_nbest=1), r"\[tokenizer\] sample_nbest = 1 .*-1"),
    (dict(sample_alpha=-0.1), r"sample_alpha = -0.1 is out of range"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(UserError, match=message):
        SentencePieceSettings(**settings)


@pytest.mark.parametrize("sets, road", [
    (["tokenizer.model_type=bpe", "tokenizer.sample_alpha=0.1"], 'model_type = "bpe"'),
    (["tokenizer.model_type=unigram"], "sample_alpha = 0.0"),
])
def test_sample_nbest_without_unigram_sampling_is_refused_as_unread(sets, road, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE)
    with pytest.raises(UserError, match=rf"^--set tokenizer.sample_nbest = 8 is not read with \[tokenizer\] {road}"):
        seqxduce.load_recipe(recipe, [*sets, "tokenizer.sample_nbest=8"])


RECIPE = tiny_recipe({"name": "algorithmic", "kind": "reverse", "train_max_len": 6, "valid_max_len": 6,
                      "test_max_len": 6, "train_size": 20, "valid_size": 10, "test_size": 10},
                     {"name": "sentencepiece", "vocab_size": 24, "num_threads": 1},
                     {"max_tokens": 120, "max_steps": 8, "warmup_steps": 4, "log_every": 2, "validate_every": 0,
                      "checkpoint_every": 4})


def train(recipe: Path, out: Path, *settings: str, resume: bool = False) -> None:
    args = ["train", str(recipe), "--out", str(out), *(a for s in settings for a in ("--set", s))]
    result = CliRunner().invoke(add_plugin_commands(), args + (["--resume"] if resume else []))
    assert result.exit_code == 0, result.output


def last_checkpoint(out: Path) -> dict:
    return torch.load(sorted((out / "checkpoints").glob("step_*.pt"))[-1], weights_only=True)


def test_a_tiny_run_trains_with_sampling_and_resumes_bit_exact(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    on = "tokenizer.sample_alpha=0.3"
    train(recipe, tmp_path / "whole", on)
    train(recipe, tmp_path / "split", on, "train.max_steps=3")
    train(recipe, tmp_path / "split", on, "train.max_steps=8", resume=True)
    train(recipe, tmp_path / "off")
    whole, split, off = (last_checkpoint(tmp_path / run) for run in ("whole", "split", "off"))
    stopped = torch.load(tmp_path / "split" / "checkpoints" / "step_00000003.pt", weights_only=True)
    assert whole["step"] == split["step"] == 8 and whole["epoch"] > stopped["epoch"]  # new epochs after the resume
    assert all(torch.equal(whole["model"][k], split["model"][k]) for k in whole["model"])
    assert not all(torch.equal(whole["model"][k], off["model"][k]) for k in whole["model"])  # sampling trained


def test_a_bad_setting_in_a_recipe_is_one_line(tmp_path):
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(recipe), "--out", str(tmp_path / "run"),
                                                        "--set", "tokenizer.sample_alpha=1.5"])
    assert result.exit_code != 0
    assert result.output.strip().count("\n") == 0 and "sample_alpha = 1.5 drops every BPE merge" in result.output
