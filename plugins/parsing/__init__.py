"""seqxduce plugin: constituency parsing of the Penn Treebank as sequence transduction.

The `ptb` task reads .mrg files, linearizes trees (Vinyals et al. 2015) and scores with EVALB's COLLINS.prm
rules; the `tree_beam` decoder is beam search that only writes well-formed trees. Importing this package does
not import torch or nltk: the factories import the modules that need them when called.
"""

from __future__ import annotations

from seqxduce import hookimpl
from seqxduce.api import Decoder, Task, Tokenizer

from .commands import parse_command
from .settings import PtbSettings, TreeBeamSettings

__all__ = ["PtbSettings", "TreeBeamSettings", "build_ptb", "build_tree_beam", "register_commands",
           "register_decoders", "register_tasks"]


def build_ptb(settings: PtbSettings) -> Task:
    """Task factory: the Penn Treebank parsing task."""
    from .task import PtbTask

    return PtbTask(settings)


def build_tree_beam(settings: TreeBeamSettings, tokenizer: Tokenizer) -> Decoder:
    """Decoder factory: beam search constrained to well-formed trees over the target vocabulary."""
    from .decoder import TreeBeamDecoder

    return TreeBeamDecoder(settings, tokenizer)


@hookimpl
def register_tasks(register):
    """Register the `ptb` task."""
    register("ptb", build_ptb, settings=PtbSettings,
             help="Penn Treebank constituency parsing: linearized trees, EVALB (COLLINS.prm) F1 printed byte for "
                  "byte as the original (README: 'The EVALB-compatible scorer' for its deliberate differences)")


@hookimpl
def register_decoders(register):
    """Register the `tree_beam` decoder."""
    register("tree_beam", build_tree_beam, settings=TreeBeamSettings,
             help="beam search that only produces well-formed linearized trees (one leaf per word)")


@hookimpl
def register_commands(cli):
    """Add `seqxduce parse` (draws the trees of sentences typed at a prompt, or piped)."""
    cli.add_command(parse_command)
