"""The settings of the core's searches, which decoder plugins take as theirs or extend (torch-free:
`seqxduce plugins` reads them). The one default output length limit lives here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from seqxduce.settings_check import Settings, setting


@dataclass
class SearchSettings(Settings):
    """What every search shares: how long an output may be."""

    max_len_a: float = setting(1.0, help="maximum output length = max_len_a * source length + max_len_b", min=0.0)
    # max_len_b may be negative (a * length - b); the search never allows fewer than one token
    max_len_b: int = setting(50, help="maximum output length offset (paper: input length + 50)")
    min_len: int = setting(0, help="no eos before this many tokens", min=0)

    @classmethod
    def lengths_of(cls, settings: Any) -> SearchSettings:
        """The length limits of another decoder's settings (those of SearchSettings' defaults where it has none)."""
        if not isinstance(settings, SearchSettings):
            return cls()
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(SearchSettings)})


@dataclass
class BeamSettings(SearchSettings):
    """Beam search: width, GNMT length penalty, n-best and when a source stops."""

    beam: int = setting(4, help="beam size (paper: 4 for translation, 21 for parsing)", min=1)
    alpha: float = setting(0.6, help="GNMT length penalty ((5+len)/6)^alpha (paper: 0.6; 0 = none)", min=0.0)
    length_penalty: str = setting("gnmt", help="what a finished hypothesis's log-probability is divided by: gnmt = "
                                               "((5+len)/6)^alpha (Wu et al. 2016), power = len^alpha (Hugging "
                                               "Face generate's length_penalty); len counts eos",
                                  choices=("gnmt", "power"))
    limit_eos: str = setting("scored", help="the eos a hypothesis is forced to end with at the length limit: "
                                            "scored = at its log-probability; free = at log-probability 0, as "
                                            "Hugging Face's forced_eos_token_id scores it", choices=("scored", "free"))
    nbest: int = setting(1, help="finished hypotheses returned per source (at most beam)", min=1)
    early_stop: bool = setting(False, help="fairseq's early stop: a source ends once it has `beam` finished "
                                           "hypotheses, even if a live one could still score higher (faster, "
                                           "can return worse outputs); false = stop only when no live "
                                           "hypothesis can beat the n-best")

