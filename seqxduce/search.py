"""The search's public face for plugins (greedy and beam search, the length limits, the two decoders).

The code lives in `seqxduce.decoding.search`; this name is what plugins have imported since the start, so it stays.
"""

from seqxduce.decoding.search import (
    BeamDecoder,
    GreedyDecoder,
    SearchStopped,
    beam_search,
    greedy_search,
    length_penalty,
    max_lengths,
    shortest_limit,
    stop_when,
)

__all__ = ["BeamDecoder", "GreedyDecoder", "SearchStopped", "beam_search", "greedy_search", "length_penalty",
           "max_lengths", "shortest_limit", "stop_when"]
