"""`seqxduce parse RUN`: parse each sentence typed at a prompt (or piped) and draw its tree (the core's prompt loop)."""

from __future__ import annotations

import io

import click

from seqxduce.inspection.interactive import interactive_command


def show_tree(tree: str, flat: bool = False, **_: object) -> str:
    """A bracketed tree drawn with nltk's Tree.pretty_print, or left on one line (flat, or not a readable tree)."""
    if flat:
        return tree
    from nltk.tree import Tree

    try:
        parsed = Tree.fromstring(tree)
    except ValueError:
        return tree
    drawing = io.StringIO()
    parsed.pretty_print(stream=drawing)
    return drawing.getvalue().rstrip("\n")


def treebank_words(line: str, pretokenized: bool = False, **_: object) -> str:
    """The sentence split into Penn Treebank tokens ("don't." -> "do n't ."), as the treebank's words are."""
    if pretokenized:
        return line
    from nltk.tokenize import TreebankWordTokenizer

    return " ".join(TreebankWordTokenizer().tokenize(line))


parse_command = interactive_command(
    "parse", render=show_tree, prepare=treebank_words,
    options=[
        click.Option(["--flat"], is_flag=True, help="print each tree on one line (bracketed) instead of drawing it"),
        click.Option(["--pretokenized"], is_flag=True,
                     help="the input is already Penn Treebank tokens separated by spaces: do not split it"),
    ],
    help="Parse each sentence typed at a prompt with a trained parsing run and draw its tree (Up/Down recall "
         "earlier lines, Ctrl-D leaves), or each line piped in. Sentences are split into Penn Treebank tokens "
         "first. --nbest N shows the N best trees with their scores.",
)
