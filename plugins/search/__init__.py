"""Built-in decoders: greedy and beam search."""

from seqxduce import hookimpl

from .settings import BeamSettings, GreedySettings


def build_greedy(settings: GreedySettings, tokenizer: object):
    from .decoders import GreedyDecoder

    return GreedyDecoder(settings)


def build_beam(settings: BeamSettings, tokenizer: object):
    from .decoders import BeamDecoder

    return BeamDecoder(settings)


@hookimpl
def register_decoders(register):
    register("greedy", build_greedy, settings=GreedySettings, help="greedy search")
    register("beam", build_beam, settings=BeamSettings, help="beam search with GNMT length penalty, n-best")
