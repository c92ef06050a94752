"""Trees as token sequences (Vinyals et al. 2015) and back, with a deterministic repair of malformed output.

`(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))` -> `(S (NP XX XX )NP (VP XX )VP XX )S`.
Every POS tag becomes the placeholder XX, punctuation included: Vinyals et al. normalise all tags, and one
placeholder per input word keeps "leaves = words" a rule the constrained decoder can enforce. With
keep_pos_tags the leaves are the POS tags instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from nltk.tree import Tree

from .preprocess import is_preterminal

PLACEHOLDER = "XX"
REPAIR_ROOT = "S"  # label of the root added when output has several top-level pieces (the commonest root)


def is_open(token: str) -> bool:
    """`(NP`: opens a constituent."""
    return len(token) > 1 and token[0] == "("


def is_close(token: str) -> bool:
    """`)NP`: closes one."""
    return len(token) > 1 and token[0] == ")"


def linearize(tree: Tree, keep_pos_tags: bool = False) -> str:
    """The bracket sequence of a preprocessed tree; words are left out (they are the input)."""
    tokens: list[str] = []

    def visit(node: Tree) -> None:
        if is_preterminal(node):
            tokens.append(node.label() if keep_pos_tags else PLACEHOLDER)
            return
        tokens.append("(" + node.label())
        for child in node:
            visit(child)
        tokens.append(")" + node.label())

    visit(tree)
    return " ".join(tokens)


@dataclass
class Delinearized:
    """A tree rebuilt from a sequence, and how many repairs it needed (0 for well-formed output)."""

    tree: Tree
    repairs: int


def delinearize(sequence: str, words: list[str]) -> Delinearized:
    """Put the words back at the leaves of a bracket sequence, repairing what is malformed.

    Repairs, each counted once: a bare '(' is dropped; a closing bracket with no open constituent is
    dropped; a closing label that differs from the open one closes the innermost constituent anyway; a
    constituent closed without children is dropped; leaves beyond the words are dropped; constituents still
    open at the end are closed; words without a leaf are attached as XX to the root; several top-level
    pieces get a root S.
    """
    repairs = 0
    roots: list[Tree] = []  # finished top-level pieces
    stack: list[Tree] = []
    placed = 0

    def close() -> None:
        nonlocal repairs
        node = stack.pop()
        if len(node) == 0:
            repairs += 1
            return
        (stack[-1] if stack else roots).append(node)

    for token in sequence.split():
        if is_open(token):
            stack.append(Tree(token[1:], []))
        elif is_close(token) or token == ")":
            if not stack:
                repairs += 1
                continue
            if is_close(token) and token[1:] != stack[-1].label():
                repairs += 1
            close()
        elif token == "(":  # a bare bracket is no constituent and no leaf
            repairs += 1
        elif placed < len(words):
            (stack[-1] if stack else roots).append(Tree(token, [words[placed]]))
            placed += 1
        else:
            repairs += 1
    while stack:
        repairs += 1
        close()

    missing = [Tree(PLACEHOLDER, [w]) for w in words[placed:]]
    if missing:
        repairs += 1
        if len(roots) == 1 and not is_preterminal(roots[0]):
            roots[0].extend(missing)
        else:
            roots.extend(missing)
    if len(roots) == 1 and not is_preterminal(roots[0]):
        return Delinearized(roots[0], repairs)
    return Delinearized(Tree(REPAIR_ROOT, roots), repairs + 1)
