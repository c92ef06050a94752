"""Greedy and beam-search decoders over the core's search engine."""

from __future__ import annotations

from seqxduce.api import Decoder, DecodeRequest, Hypothesis, Model
from seqxduce.search import beam_search, greedy_search

from .settings import BeamSettings, GreedySettings


class GreedyDecoder(Decoder):
    """The most probable token at each step."""

    def __init__(self, settings: GreedySettings):
        self.settings = settings

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        s = self.settings
        return greedy_search(model, request, max_len_a=s.max_len_a, max_len_b=s.max_len_b, min_len=s.min_len)


class BeamDecoder(Decoder):
    """Beam search with the GNMT length penalty and n-best output."""

    def __init__(self, settings: BeamSettings):
        self.settings = settings

    def decode(self, model: Model, request: DecodeRequest) -> list[list[Hypothesis]]:
        s = self.settings
        return beam_search(model, request, beam=s.beam, alpha=s.alpha, max_len_a=s.max_len_a, max_len_b=s.max_len_b,
                           min_len=s.min_len, nbest=s.nbest, early_stop=s.early_stop)
