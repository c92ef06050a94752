"""Built-in decoders: the core's greedy and beam search, registered under their names with their settings, and
sampling."""

from __future__ import annotations

from seqxduce import hookimpl
from seqxduce.api import Decoder, Tokenizer
from seqxduce.search_settings import BeamSettings, SearchSettings

from .settings import SamplingSettings


def build_greedy(settings: SearchSettings, tokenizer: Tokenizer) -> Decoder:
    """Decoder factory: greedy search."""
    from seqxduce.search import GreedyDecoder

    return GreedyDecoder(settings)


def build_beam(settings: BeamSettings, tokenizer: Tokenizer) -> Decoder:
    """Decoder factory: beam search."""
    from seqxduce.search import BeamDecoder

    return BeamDecoder(settings)


def build_sampling(settings: SamplingSettings, tokenizer: Tokenizer) -> Decoder:
    """Decoder factory: sampling."""
    from .sampling import SamplingDecoder

    return SamplingDecoder(settings)


@hookimpl
def register_decoders(register):
    """Register `greedy`, `beam` and `sampling`."""
    register("greedy", build_greedy, settings=SearchSettings, help="greedy search")
    register("beam", build_beam, settings=BeamSettings, help="beam search with GNMT length penalty, n-best")
    register("sampling", build_sampling, settings=SamplingSettings,
             help="sampling with temperature, top-k and top-p (nucleus), seeded; n samples per source as n-best")
