"""Vinyals-style linearization, its inverse, the repairs of malformed output, and a round trip over the sample."""

from __future__ import annotations

import pytest
from nltk.tree import Tree
from seqxduce_parsing.linearize import delinearize, linearize
from seqxduce_parsing.preprocess import expand_unary_chains, flat, is_preterminal, preprocess
from seqxduce_parsing.treebank import read_split

TREE = Tree.fromstring("(S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))")
WORDS = ["John", "has", "a", "dog", "."]
SEQUENCE = "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"


def with_placeholders(tree: Tree) -> Tree:
    out = tree.copy(deep=True)
    for node in out.subtrees(is_preterminal):
        node.set_label("XX")
    return out


def test_linearize_normalises_every_tag_to_xx_punctuation_included():
    assert linearize(TREE) == SEQUENCE


def test_linearize_can_keep_the_pos_tags():
    assert linearize(TREE, keep_pos_tags=True) == "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"


def test_delinearize_puts_the_words_back():
    result = delinearize(SEQUENCE, WORDS)
    assert result.repairs == 0
    assert flat(result.tree) == "(S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .))"
    tagged = delinearize(linearize(TREE, keep_pos_tags=True), WORDS)
    assert tagged.tree == TREE and tagged.repairs == 0


@pytest.mark.parametrize("sequence, expected, repairs", [
    # unbalanced: the open constituents are closed at the end
    ("(S (NP XX )NP (VP XX (NP XX XX", "(S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .))", 4),
    # a closing bracket with nothing open is dropped
    ("(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S )S", "(S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .))",
     1),
    # a closing label that does not match closes the innermost constituent
    ("(S (NP XX )VP (VP XX (NP XX XX )NP )VP XX )S", "(S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .))",
     1),
    # too many placeholders: the extra ones are dropped
    ("(S (NP XX XX )NP (VP XX (NP XX XX XX )NP )VP XX )S",
     "(S (NP (XX John) (XX has)) (VP (XX a) (NP (XX dog) (XX .))))", 2),
    # too few: the missing words hang from the root
    ("(S (NP XX )NP (VP XX )VP )S", "(S (NP (XX John)) (VP (XX has)) (XX a) (XX dog) (XX .))", 1),
    # an empty constituent is dropped
    ("(S (NP XX )NP (ADJP )ADJP (VP XX (NP XX XX )NP )VP XX )S",
     "(S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .))", 1),
    # several top-level pieces get a root S
    ("(NP XX )NP (VP XX (NP XX XX )NP )VP XX", "(S (NP (XX John)) (VP (XX has) (NP (XX a) (XX dog))) (XX .))", 1),
    # nothing at all: a flat tree over the words
    ("", "(S (XX John) (XX has) (XX a) (XX dog) (XX .))", 2),
])
def test_malformed_output_is_repaired_deterministically(sequence, expected, repairs):
    result = delinearize(sequence, WORDS)
    assert flat(result.tree) == expected
    assert result.repairs == repairs
    again = delinearize(sequence, WORDS)
    assert again.tree == result.tree and again.repairs == result.repairs


@pytest.fixture(scope="module")
def sample_trees(ptb_sample) -> list[Tree]:
    return read_split(ptb_sample, "0001-0179", "flat", "train_files")


def test_round_trip_over_every_tree_of_the_sample(sample_trees):
    assert len(sample_trees) == 3669
    for tree in sample_trees:
        gold = preprocess(tree)
        words = gold.leaves()
        tagged = delinearize(linearize(gold, keep_pos_tags=True), words)
        assert (tagged.tree, tagged.repairs) == (gold, 0), flat(gold)
        placeholder = delinearize(linearize(gold), words)
        assert (placeholder.tree, placeholder.repairs) == (with_placeholders(gold), 0), flat(gold)


def test_round_trip_with_collapsed_unary_chains(sample_trees):
    for tree in sample_trees:
        collapsed = preprocess(tree, collapse_unary=True)
        result = delinearize(linearize(collapsed, keep_pos_tags=True), collapsed.leaves())
        assert expand_unary_chains(result.tree) == preprocess(tree), flat(tree)
