"""A tiny parser trained on a slice of the sample, with the words in the target: tree_beam writes only
well-formed trees that carry the source words, each written word forced to be the source's."""

from __future__ import annotations

from pathlib import Path

import pytest
from nltk.tree import Tree

import seqxduce
from seqxduce.decoding.decode import decode_split, load_run
from seqxduce.testing import repository_root

RECIPE = repository_root(Path(__file__)) / "recipes" / "ptb_sample.toml"
SETTINGS = ["task.train_files=0001-0012", "task.valid_files=0160",
            "task.words_in_target=after_leaf", "decode.words_in_target=after_leaf", "tokenizer.unknown=signature",
            "model.layers=1", "model.d_model=32", "model.d_ff=64", "model.heads=2", "train.max_steps=80",
            "train.max_tokens=1024", "train.warmup_steps=40", "train.validate_every=0", "train.checkpoint_every=80",
            "train.average_last=1", "train.members=1", "decode.beam=3"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ptb_sample):
    out = tmp_path_factory.mktemp("parsing") / "run"
    seqxduce.train(seqxduce.load_recipe(RECIPE, SETTINGS + [f"task.data_dir={ptb_sample}"]), out=out)
    return load_run(out)


def test_a_trained_parser_with_words_in_the_target_writes_well_formed_trees_over_the_source(trained):
    outputs, report = decode_split(trained, "valid")
    assert len(outputs) == 5
    # a tiny model's tags are mostly wrong, so EVALB (which deletes punctuation by each tree's own tags) may find
    # its sentences of another length: the trees themselves are what this test checks
    assert report.metrics["repaired"] == 0
    target = trained.tokenizers.tgt
    for output in outputs:
        assert Tree.fromstring(output.text).leaves() == output.source.split()
        tokens = [target.id_to_token(i) for i in output.nbest[0][1].tokens if i != target.eos_id]
        leaves = [i for i, t in enumerate(tokens) if not t.startswith(("(", ")"))][::2]  # leaf, word, leaf, ...
        written = [tokens[i + 1] for i in leaves]
        assert written == [target.id_to_token(i) for i in target.encode(output.source)], tokens
    # rare words were written as their classes, not all as <unk>
    assert any(t.startswith("<unk-") for t in trained.tokenizers.tgt
               .decode(range(target.vocab_size)).split())
