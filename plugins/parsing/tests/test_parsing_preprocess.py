"""Each preprocessing step on real trees from the Penn Treebank sample, with hand-written expectations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nltk.tree import Tree
from seqxduce_parsing import preprocess as pp
from seqxduce_parsing.treebank import read_split


@pytest.fixture(scope="module")
def field_tree(ptb_sample) -> Tree:
    """wsj_0013, sentence 15: a topicalized S with a trace, quotes and function tags."""
    return read_split(ptb_sample, "0013", "flat", "train_files")[14]


@pytest.fixture(scope="module")
def magazine_tree(ptb_sample) -> Tree:
    """wsj_0012, sentence 9: gapping indices (NP=2, PP-TMP=3) and *U* empty units."""
    return read_split(ptb_sample, "0012", "flat", "train_files")[8]


def test_the_sample_trees_are_what_the_tests_expect(field_tree):
    assert pp.flat(field_tree) == (
        "(S (`` ``) (S-TPC-1 (ADVP-TMP (RB Now)) (NP-SBJ (DT the) (NN field)) (VP (VBZ is) (ADJP-PRD (RBR less) "
        "(VBN cluttered)))) (, ,) ('' '') (NP-SBJ (PRP he)) (VP (VBD added) (S (-NONE- *T*-1))) (. .))")


def test_drop_empty_root():
    tree = Tree.fromstring("( (S (NP (PRP He)) (VP (VBD left))) )")
    assert pp.flat(pp.drop_empty_root(tree)) == "(S (NP (PRP He)) (VP (VBD left)))"
    several = Tree.fromstring("( (NP (NN Headline)) (. .) )")
    assert pp.flat(pp.drop_empty_root(several)) == "(TOP (NP (NN Headline)) (. .))"
    labelled = Tree.fromstring("(S (NP (PRP He)) (VP (VBD left)))")
    assert pp.drop_empty_root(labelled) == labelled


def raw_trees(sample: Path, name: str) -> list[str]:
    """The bracketed trees of a sample file as written there: each starts with '(' in the first column."""
    return re.split(r"\n(?=\()", (sample / name).read_text().strip())


def test_drop_empty_root_on_raw_sample_text(ptb_sample):
    raw = raw_trees(ptb_sample, "wsj_0001.mrg")[0]
    assert raw.startswith("( (S ") and raw.endswith("(. .) ))")
    read = read_split(ptb_sample, "0001", "flat", "train_files")[0]  # nltk's reader drops the root itself
    one_child = Tree.fromstring(raw)
    assert one_child.label() == "" and len(one_child) == 1
    assert pp.drop_empty_root(one_child) == read
    # the sample has no multi-child root, so make one from the same text: the S bracket removed, its
    # children (NP-SBJ, VP and the period) stand directly under the unlabelled root
    several = Tree.fromstring("(" + raw.removeprefix("( (S").removesuffix(")"))
    assert several.label() == "" and [c.label() for c in several] == ["NP-SBJ", "VP", "."]
    top = pp.drop_empty_root(several)
    assert top == Tree("TOP", list(read))
    assert top.leaves() == read.leaves()
    assert pp.flat(pp.preprocess(several)).startswith("(TOP (NP (NP (NNP Pierre) (NNP Vinken)) (, ,)")


def test_remove_empty_elements_drops_traces_and_the_constituents_left_empty(field_tree):
    out = pp.remove_empty_elements(field_tree)
    # (S (-NONE- *T*-1)) disappears with its trace; VP keeps its verb
    assert "(VP (VBD added))" in pp.flat(out)
    assert "-NONE-" not in pp.flat(out)
    assert out.leaves() == [w for w, t in field_tree.pos() if t != "-NONE-"]
    assert pp.remove_empty_elements(Tree.fromstring("(NP (NP (-NONE- *)))")) is None


def test_remove_empty_elements_removes_empty_units(magazine_tree):
    out = pp.flat(pp.remove_empty_elements(magazine_tree))
    assert "(NP-2 ($ $) (CD 325,000))" in out
    assert "*U*" not in out and "*T*-1" not in out


@pytest.mark.parametrize("label, stripped", [
    ("NP-SBJ-1", "NP"), ("S-TPC-1", "S"), ("PP-TMP=3", "PP"), ("NP=2", "NP"), ("ADVP-DIR-CLR", "ADVP"),
    ("NP", "NP"), ("PRP$", "PRP$"), ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("-RRB-", "-RRB-"),
])
def test_strip_label(label, stripped):
    assert pp.strip_label(label) == stripped


def test_strip_function_tags_on_a_real_tree(magazine_tree):
    out = pp.flat(pp.strip_function_tags(magazine_tree))
    assert "(NP ($ $) (CD 340,000) (-NONE- *U*)) (PP (IN in) (NP (CD 1990)))" in out
    assert "(WHNP (WP who))" in out and "(-NONE- *T*-1)" in out


def test_preprocess_keeps_punctuation_and_the_words(field_tree):
    out = pp.preprocess(field_tree)
    assert pp.flat(out) == (
        "(S (`` ``) (S (ADVP (RB Now)) (NP (DT the) (NN field)) (VP (VBZ is) (ADJP (RBR less) (VBN cluttered)))) "
        "(, ,) ('' '') (NP (PRP he)) (VP (VBD added)) (. .))")
    assert out.pos()[0] == ("``", "``") and out.pos()[-1] == (".", ".")


def test_preprocess_does_not_change_its_input(field_tree):
    before = pp.flat(field_tree)
    pp.preprocess(field_tree, collapse_unary=True)
    assert pp.flat(field_tree) == before


def test_collapse_and_expand_unary_chains():
    tree = Tree.fromstring("(S (NP (NP (NN Stocks))) (VP (VBD fell) (S (VP (TO to) (VP (VB close))))))")
    collapsed = pp.collapse_unary_chains(tree)
    assert pp.flat(collapsed) == "(S (NP+NP (NN Stocks)) (VP (VBD fell) (S+VP (TO to) (VP (VB close)))))"
    assert pp.expand_unary_chains(collapsed) == tree


def test_expand_keeps_treebank_labels_with_a_bar():
    tree = Tree.fromstring("(VP (VB put) (ADVP|PRT (RB back)))")
    assert pp.expand_unary_chains(pp.collapse_unary_chains(tree)) == tree


def test_preprocess_can_collapse_unary_chains(field_tree):
    out = pp.preprocess(field_tree, collapse_unary=True)
    assert "(NP (PRP he))" in pp.flat(out)  # a chain ending in a POS node is not joined
    assert pp.expand_unary_chains(out) == pp.preprocess(field_tree)
