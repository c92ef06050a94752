"""Trees as token sequences (Vinyals et al. 2015) and back, with a deterministic repair of malformed output.

`(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))` -> `(S (NP XX XX )NP (VP XX )VP XX )S`.
Every POS tag becomes the placeholder XX, punctuation included: Vinyals et al. normalise all tags, and one
placeholder per input word keeps "leaves = words" a rule the constrained decoder can enforce. With
keep_pos_tags the leaves are the POS tags instead.

The words themselves can be written into the target too (words_in_target), so that the decoder always reads the
word it is at, as a parsing language model does (Choe & Charniak 2016): "after_leaf" writes each word after its
leaf, `(NP DT The NN cat )NP`; "before_leaf" writes it before its leaf, `(NP The DT cat NN )NP`, so that the tag is
predicted by a decoder that has just read its word; "ahead" writes the first word before the tree and each other
word right after the leaf before it, `The (NP DT cat NN )NP`, so that the decoder has read a word before it opens
the brackets above it and tags it, while the word itself is never a choice (it always follows a leaf); "as_leaf"
makes the word the leaf, `(NP The cat )NP` (no tags).
The constrained decoder forces the i-th word token to be the i-th source word; delinearize drops the written words
again and puts the source words back.
"""

from __future__ import annotations

from dataclasses import dataclass

from nltk.tree import Tree

from .preprocess import is_preterminal
from .settings import WORD_MODES

PLACEHOLDER = "XX"
REPAIR_ROOT = "S"  # label of the root added when output has several top-level pieces (the commonest root)


def is_open(token: str) -> bool:
    """`(NP`: opens a constituent."""
    return len(token) > 1 and token[0] == "("


def is_close(token: str) -> bool:
    """`)NP`: closes one."""
    return len(token) > 1 and token[0] == ")"


def linearize(tree: Tree, keep_pos_tags: bool = False, words_in_target: str = "none") -> str:
    """The bracket sequence of a preprocessed tree; words are left out (they are the input) unless words_in_target
    says where to write them."""
    check_word_mode(words_in_target, keep_pos_tags)
    words = tree.leaves()
    ahead = words_in_target == "ahead"
    tokens: list[str] = words[:1] if ahead else []
    placed = 0

    def visit(node: Tree) -> None:
        nonlocal placed
        if is_preterminal(node):
            leaf = [] if words_in_target == "as_leaf" else [node.label() if keep_pos_tags else PLACEHOLDER]
            placed += 1
            if ahead:  # the next word, if any, right after this leaf
                tokens.extend(leaf + words[placed:placed + 1])
                return
            word = [] if words_in_target == "none" else [node[0]]
            tokens.extend(word + leaf if words_in_target == "before_leaf" else leaf + word)
            return
        tokens.append("(" + node.label())
        for child in node:
            visit(child)
        tokens.append(")" + node.label())

    visit(tree)
    return " ".join(tokens)


def check_word_mode(words_in_target: str, keep_pos_tags: bool) -> None:
    """A ValueError for an unknown mode, or for word leaves that would leave no place for the POS tags."""
    if words_in_target not in WORD_MODES:
        raise ValueError(f"words_in_target {words_in_target!r}: choose one of {', '.join(WORD_MODES)}")
    if words_in_target == "as_leaf" and keep_pos_tags:
        raise ValueError("words_in_target 'as_leaf' writes the words instead of the POS tags; with keep_pos_tags "
                         "use 'after_leaf'")


@dataclass
class Delinearized:
    """A tree rebuilt from a sequence, and how many repairs it needed (0 for well-formed output)."""

    tree: Tree
    repairs: int


def delinearize(sequence: str, words: list[str], words_in_target: str = "none") -> Delinearized:
    """Put the words back at the leaves of a bracket sequence, repairing what is malformed.

    With words_in_target "after_leaf" the token after each leaf is its written word, dropped here (a leaf with no
    word after it is one repair); with "before_leaf" a leaf token is a written word and the token after it its tag
    (a word with no tag after it is tagged XX, one repair); with "ahead" the first token and the token after each
    leaf but the last are written words, dropped (one missing is one repair); with "as_leaf" every leaf token is a
    written word and the leaf is tagged XX.
    The tree always carries the source words: what the output wrote for them (<unk>, say) is not kept.

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

    tokens = sequence.split()
    position = 0
    written = ("after_leaf", "before_leaf", "ahead")  # modes where a leaf brings a written word with it
    if words_in_target == "ahead" and words:  # the first word, before the tree
        position, missing = skip_written_word(tokens, position)
        repairs += missing
    while position < len(tokens):
        token = tokens[position]
        position += 1
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
            tag = PLACEHOLDER if words_in_target == "as_leaf" else token
            if words_in_target in written and not (words_in_target == "ahead" and placed + 1 == len(words)):
                following, missing = skip_written_word(tokens, position)
                repairs += missing
                if words_in_target == "before_leaf":
                    tag = tokens[position] if not missing else PLACEHOLDER
                position = following
            (stack[-1] if stack else roots).append(Tree(tag, [words[placed]]))
            placed += 1
        else:
            repairs += 1
            if words_in_target in ("after_leaf", "before_leaf"):  # (ahead: no word follows a leaf past the last)
                position, _ = skip_written_word(tokens, position)
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


def skip_written_word(tokens: list[str], position: int) -> tuple[int, int]:
    """(position after the word (after_leaf) or tag (before_leaf) written at position, 1 if there is none there: a
    bracket or the end)."""
    if position < len(tokens) and not is_open(tokens[position]) and not is_close(tokens[position]) \
            and tokens[position] not in ("(", ")"):
        return position + 1, 0
    return position, 1
