"""Settings of the sampling decoder (torch-free: `seqxduce plugins` reads them); greedy and beam search take
the core's seqxduce.search_settings as theirs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from seqxduce.api import setting
from seqxduce.search_settings import MAX_BEAM, SearchSettings


@dataclass
class SamplingSettings(SearchSettings):
    """Sampling: how the model's distribution is reshaped, the seed, and how many samples per source."""

    # bounded where float32 still computes it: a log-probability over 1e-300 or 5e-324 (0 in float32) is -inf or
    # NaN everywhere, and over 1e300 (inf) a banned token's -inf turns NaN: torch.multinomial then fails; 1e-6 is
    # greedy in effect and 1e6 uniform, so nothing a user can want lies outside
    temperature: float = setting(1.0, help="divides the log-probabilities: below 1 sharper, above 1 flatter",
                                 min=1e-6, max=1e6, per_request=True)
    top_k: int = setting(0, help="sample only among the k most probable tokens (0 = all)", min=0, per_request=True)
    top_p: float = setting(1.0, help="sample only among the fewest tokens whose probability reaches p "
                                     "(nucleus sampling; 1 = all)", min=0.0, max=1.0, min_exclusive=True,
                         per_request=True)
    seed: int = setting(1, help="seed of the sampling generator (the same sources and settings give the same "
                                "samples)", min=0, max=2**63 - 1, per_request=True)
    nbest: int = setting(1, help="samples drawn per source, returned as its n-best list, most probable first",
                         min=1, max=MAX_BEAM, per_request=True)

    returns_nbest: ClassVar[bool] = True

    def returned(self) -> int:
        return self.nbest
