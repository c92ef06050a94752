"""Restarts cost no encoding: a resumed run and a run given the same tokenizer files map the dataset that `prepare`
or the first run wrote: one dataset per corpus, tokenizer files and limits, whatever the route that made it."""

from __future__ import annotations

from pathlib import Path

from seqxduce import engine
from seqxduce.corpus import binarized, prepare
from seqxduce.recipe import load_recipe
from seqxduce.run_start import RunStart
from seqxduce.training.run import assemble
from tests.tiny import TINY_RECIPE as TINY

SETTINGS = ["train.validate_every=0", "train.valid_decode_examples=0", "train.max_steps=2"]


def _datasets(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if binarized.exists(p))


def _no_encoding(*args, **kwargs):
    raise AssertionError("the corpus was encoded again")


def test_prepare_train_resume_and_tokenizers_from_write_one_dataset_and_read_the_same_ids(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SEQXDUCE_CACHE", str(cache))
    recipe = load_recipe(TINY, SETTINGS)
    prepared = engine.prepare(recipe, training_data=True) and _datasets(cache)
    assert len(prepared) == 1 and prepared[0].startswith("prepared-")
    ids = prepare.open_prepared(cache / prepared[0])
    engine.train(recipe, tmp_path / "run")
    monkeypatch.setattr(prepare, "encode_into", _no_encoding)  # from here on, nothing may be encoded
    # the run's own saved recipe, as a resume reads it (its data directory made absolute)
    saved = engine.load_run_recipe(tmp_path / "run", ["train.max_steps=4"])
    resumed = assemble(saved, tmp_path / "run", RunStart("resume"))
    assert resumed.plan.train_pairs == ids
    other = assemble(recipe, tmp_path / "other", RunStart(tokenizers_from=tmp_path / "run"))
    assert other.plan.train_pairs == ids
    assert _datasets(cache) == prepared
    assert [p.name for p in cache.iterdir()] == prepared  # and no other folder (a tokens-KEY) beside it


def test_a_prepared_folder_of_another_recipe_with_the_same_ids_is_found_by_its_key(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SEQXDUCE_CACHE", str(cache))
    engine.train(load_recipe(TINY, SETTINGS), tmp_path / "run")
    first = _datasets(cache)
    # another [tokenizer] setting (a vocabulary limit the tiny corpus never reaches): another prepared key, while
    # the tokenizer files given are the first run's
    changed = load_recipe(TINY, [*SETTINGS, "tokenizer.max_size=100000"])
    assert prepare.prepared_folder(changed, "x") != prepare.prepared_folder(load_recipe(TINY, SETTINGS), "x")
    monkeypatch.setattr(prepare, "encode_into", _no_encoding)
    assemble(changed, tmp_path / "other", RunStart(tokenizers_from=tmp_path / "run"))
    assert _datasets(cache) == first
