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


def test_the_words_can_follow_their_leaves_or_be_the_leaves():
    assert linearize(TREE, keep_pos_tags=True, words_in_target="after_leaf") == \
        "(S (NP NNP John )NP (VP VBZ has (NP DT a NN dog )NP )VP . . )S"
    assert linearize(TREE, words_in_target="after_leaf") == \
        "(S (NP XX John )NP (VP XX has (NP XX a XX dog )NP )VP XX . )S"
    assert linearize(TREE, keep_pos_tags=True, words_in_target="before_leaf") == \
        "(S (NP John NNP )NP (VP has VBZ (NP a DT dog NN )NP )VP . . )S"
    assert linearize(TREE, words_in_target="as_leaf") == "(S (NP John )NP (VP has (NP a dog )NP )VP . )S"
    assert linearize(TREE, keep_pos_tags=True, words_in_target="ahead") == \
        "John (S (NP NNP has )NP (VP VBZ a (NP DT dog NN . )NP )VP . )S"
    with pytest.raises(ValueError, match="after_leaf"):
        linearize(TREE, keep_pos_tags=True, words_in_target="as_leaf")


def test_written_words_are_dropped_and_the_source_words_put_back():
    # the output wrote <unk> for "dog" and "has": the tree carries the source words
    after = delinearize("(S (NP NNP John )NP (VP VBZ <unk> (NP DT a NN <unk> )NP )VP . . )S", WORDS, "after_leaf")
    assert (after.tree, after.repairs) == (TREE, 0)
    as_leaf = delinearize("(S (NP John )NP (VP <unk> (NP a dog )NP )VP . )S", WORDS, "as_leaf")
    assert (as_leaf.tree, as_leaf.repairs) == (with_placeholders(TREE), 0)
    # a leaf without its word is one repair; the next bracket is read as a bracket, not as the word
    missing = delinearize("(S (NP NNP )NP (VP VBZ has (NP DT a NN dog )NP )VP . . )S", WORDS, "after_leaf")
    assert (missing.tree, missing.repairs) == (TREE, 1)


def test_ahead_drops_the_first_token_and_the_word_after_each_leaf_but_the_last():
    ahead = delinearize("<unk> (S (NP NNP has )NP (VP VBZ <unk> (NP DT dog NN . )NP )VP . )S", WORDS, "ahead")
    assert (ahead.tree, ahead.repairs) == (TREE, 0)
    # a missing first word and a leaf without the next word: one repair each, brackets still read as brackets
    missing = delinearize("(S (NP NNP )NP (VP VBZ a (NP DT dog NN . )NP )VP . )S", WORDS, "ahead")
    assert (missing.tree, missing.repairs) == (TREE, 2)


def test_before_leaf_reads_the_tag_after_each_written_word():
    before = delinearize("(S (NP <unk> NNP )NP (VP has VBZ (NP a DT dog NN )NP )VP . . )S", WORDS, "before_leaf")
    assert (before.tree, before.repairs) == (TREE, 0)
    # a word whose tag is missing gets XX (one repair), and the bracket after it stays a bracket
    untagged = delinearize("(S (NP John )NP (VP has VBZ (NP a DT dog NN )NP )VP . . )S", WORDS, "before_leaf")
    assert untagged.repairs == 1
    assert flat(untagged.tree) == "(S (NP (XX John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))"


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
        after = delinearize(linearize(gold, keep_pos_tags=True, words_in_target="after_leaf"), words, "after_leaf")
        assert (after.tree, after.repairs) == (gold, 0), flat(gold)
        before = delinearize(linearize(gold, keep_pos_tags=True, words_in_target="before_leaf"), words, "before_leaf")
        assert (before.tree, before.repairs) == (gold, 0), flat(gold)
        ahead = delinearize(linearize(gold, keep_pos_tags=True, words_in_target="ahead"), words, "ahead")
        assert (ahead.tree, ahead.repairs) == (gold, 0), flat(gold)
        as_leaf = delinearize(linearize(gold, words_in_target="as_leaf"), words, "as_leaf")
        assert (as_leaf.tree, as_leaf.repairs) == (with_placeholders(gold), 0), flat(gold)


def test_round_trip_with_collapsed_unary_chains(sample_trees):
    for tree in sample_trees:
        collapsed = preprocess(tree, collapse_unary=True)
        result = delinearize(linearize(collapsed, keep_pos_tags=True), collapsed.leaves())
        assert expand_unary_chains(result.tree) == preprocess(tree), flat(tree)
