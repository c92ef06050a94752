"""Settings of the built-in search decoders (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import setting


@dataclass
class GreedySettings:
    max_len_a: float = setting(1.0, help="maximum output length = max_len_a * source length + max_len_b", min=0.0)
    # max_len_b may be negative (a * length - b); the search never allows fewer than one token
    max_len_b: int = setting(50, help="maximum output length offset (paper: input length + 50)")
    min_len: int = setting(0, help="no eos before this many tokens", min=0)


@dataclass
class BeamSettings(GreedySettings):
    beam: int = setting(4, help="beam size (paper: 4 for translation, 21 for parsing)", min=1)
    alpha: float = setting(0.6, help="GNMT length penalty ((5+len)/6)^alpha (paper: 0.6; 0 = none)", min=0.0)
    nbest: int = setting(1, help="finished hypotheses returned per source (at most beam)", min=1)
    early_stop: bool = setting(False, help="fairseq's early stop: a source ends once it has `beam` finished "
                                           "hypotheses, even if a live one could still score higher (faster, "
                                           "can return worse outputs); false = stop only when no live "
                                           "hypothesis can beat the n-best")


@dataclass
class SamplingSettings(GreedySettings):
    temperature: float = setting(1.0, help="divides the log-probabilities: below 1 sharper, above 1 flatter",
                                 min=0.0, min_exclusive=True)
    top_k: int = setting(0, help="sample only among the k most probable tokens (0 = all)", min=0)
    top_p: float = setting(1.0, help="sample only among the fewest tokens whose probability reaches p "
                                     "(nucleus sampling; 1 = all)", min=0.0, max=1.0, min_exclusive=True)
    seed: int = setting(1, help="seed of the sampling generator (the same sources and settings give the same "
                                "samples)")
    nbest: int = setting(1, help="samples drawn per source, returned as its n-best list, most probable first",
                         min=1)
