"""Built-in decoders: greedy search, beam search and sampling."""

from seqxduce import hookimpl

from .settings import BeamSettings, GreedySettings, SamplingSettings


def build_greedy(settings: GreedySettings, tokenizer: object):
    from .decoders import GreedyDecoder

    return GreedyDecoder(settings)


def build_beam(settings: BeamSettings, tokenizer: object):
    from .decoders import BeamDecoder

    return BeamDecoder(settings)


def build_sampling(settings: SamplingSettings, tokenizer: object):
    from .sampling import SamplingDecoder

    return SamplingDecoder(settings)


@hookimpl
def register_decoders(register):
    register("greedy", build_greedy, settings=GreedySettings, help="greedy search")
    register("beam", build_beam, settings=BeamSettings, help="beam search with GNMT length penalty, n-best")
    register("sampling", build_sampling, settings=SamplingSettings,
             help="sampling with temperature, top-k and top-p (nucleus), seeded; n samples per source as n-best")
