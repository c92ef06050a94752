"""The standard treebank preprocessing steps, each a function from a tree to a new tree (inputs are not changed).

Punctuation is kept as ordinary preterminals: it is part of the input sentence, and EVALB removes it at scoring.
"""

from __future__ import annotations

import re

from nltk.tree import Tree

EMPTY_ELEMENT = "-NONE-"
ROOT_LABELS = ("", "TOP", "ROOT")  # labels of the bracket around a treebank sentence
UNARY_JOIN = "+"
FUNCTION_TAG = re.compile(r"[-=]")


def is_preterminal(node: object) -> bool:
    """A POS node: a tree whose only child is a word."""
    return isinstance(node, Tree) and len(node) == 1 and isinstance(node[0], str)


def drop_empty_root(tree: Tree) -> Tree:
    """Remove the unlabeled bracket around a sentence, `( (S ...) )` -> `(S ...)`; a root with several
    children is kept and labelled TOP (EVALB ignores TOP)."""
    if tree.label() in ROOT_LABELS and not is_preterminal(tree):
        if len(tree) == 1 and isinstance(tree[0], Tree):
            return tree[0].copy(deep=True)
        return Tree("TOP", [child.copy(deep=True) if isinstance(child, Tree) else child for child in tree])
    return tree.copy(deep=True)


def remove_empty_elements(tree: Tree) -> Tree | None:
    """Delete -NONE- preterminals (traces, null complementizers) and every constituent left without words;
    None when nothing is left."""
    if is_preterminal(tree):
        return None if tree.label() == EMPTY_ELEMENT else tree.copy(deep=True)
    children = []
    for child in tree:
        kept = remove_empty_elements(child) if isinstance(child, Tree) else child
        if kept is not None:
            children.append(kept)
    return Tree(tree.label(), children) if children else None


def strip_label(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP; labels that start with '-' (-NONE-, -LRB-, -RRB-) are kept whole."""
    if label.startswith("-"):
        return label
    return FUNCTION_TAG.split(label, maxsplit=1)[0]


def strip_function_tags(tree: Tree) -> Tree:
    """Remove function tags and co-indices from every label."""
    return Tree(strip_label(tree.label()),
                [strip_function_tags(c) if isinstance(c, Tree) else c for c in tree])


def collapse_unary_chains(tree: Tree) -> Tree:
    """Join each chain of single-child constituents into one node labelled A+B (POS nodes are not joined)."""
    out = tree.copy(deep=True)
    out.collapse_unary(collapsePOS=False, collapseRoot=True, joinChar=UNARY_JOIN)
    return out


def expand_unary_chains(tree: Tree) -> Tree:
    """Undo collapse_unary_chains: a node labelled A+B becomes A over B.

    Not nltk's un_chomsky_normal_form, which would also read treebank labels such as ADVP|PRT as binarized.
    """
    if is_preterminal(tree):
        return tree.copy(deep=True)
    children = [expand_unary_chains(c) if isinstance(c, Tree) else c for c in tree]
    labels = tree.label().split(UNARY_JOIN) if UNARY_JOIN in tree.label().strip(UNARY_JOIN) else [tree.label()]
    node = Tree(labels[-1], children)
    for label in reversed(labels[:-1]):
        node = Tree(label, [node])
    return node


def preprocess(tree: Tree, collapse_unary: bool = False) -> Tree:
    """The full pipeline: empty root, empty elements, function tags, then optionally unary chains."""
    out = remove_empty_elements(drop_empty_root(tree))
    if out is None:
        raise ValueError(f"tree has no words besides empty elements: {flat(tree)}")
    out = strip_function_tags(out)
    return collapse_unary_chains(out) if collapse_unary else out


def flat(tree: Tree) -> str:
    """A tree as one line of brackets."""
    return tree.pformat(margin=10**9)
