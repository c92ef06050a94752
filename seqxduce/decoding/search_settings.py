"""The settings of the core's searches, which decoder plugins take as theirs or extend (torch-free:
`seqxduce plugins` reads them). The one default output length limit lives here, and the upper bounds that keep
one decode's work finite (`decode`, a recipe and `serve` refuse the same values, in one line)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from seqxduce.settings_check import Settings, setting

# Bounds on what one search may be asked: far past any real output (the paper's is input length + 50), yet small
# enough that the length-penalty table and the step loop of the longest search allowed stay finite and that every
# length fits a 64-bit integer. A server sets its own, tighter limits (`serve --max-output-tokens`).
MAX_LENGTH = 1_000_000  # tokens: max_len_b and min_len
MAX_LEN_A = 1_000.0  # output tokens per source token
MAX_BEAM = 10_000  # samples per source (a beam's width is bounded by memory and the server's own limit)
MAX_ALPHA = 10.0  # ((5 + 10^6) / 6) ** 10 is about 1e52, well inside a double
# Hugging Face generate's early_stopping values, the beam search's stopping rules (BeamSettings.early_stopping)
EARLY_STOPPING = (False, True, "never")


@dataclass
class SearchSettings(Settings):
    """What every search shares: how long an output may be."""

    max_len_a: float = setting(1.0, help="maximum output length = max_len_a * source length + max_len_b", min=0.0,
                               max=MAX_LEN_A, per_request=True)
    # max_len_b may be negative (a * length - b); the search never allows fewer than one token
    max_len_b: int = setting(50, help="maximum output length offset (paper: input length + 50)", min=-MAX_LENGTH,
                             max=MAX_LENGTH, per_request=True)
    min_len: int = setting(0, help="no eos before this many tokens", min=0, max=MAX_LENGTH, per_request=True)

    # whether the settings declare how many hypotheses a source returns (an `nbest` key): a subclass that does
    # says so and overrides returned(), so that callers read it through this class, not by attribute name
    returns_nbest: ClassVar[bool] = False

    def returned(self) -> int:
        """Hypotheses returned per source."""
        return 1

    @classmethod
    def lengths_of(cls, settings: Any) -> SearchSettings:
        """The length limits of another decoder's settings (those of SearchSettings' defaults where it has none)."""
        if not isinstance(settings, SearchSettings):
            return cls()
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(SearchSettings)})


@dataclass
class BeamSettings(SearchSettings):
    """Beam search: width, GNMT length penalty, n-best and when a source stops."""

    beam: int = setting(4, help="beam size (paper: 4 for translation, 21 for parsing)", min=1, per_request=True)
    alpha: float = setting(0.6, help="GNMT length penalty ((5+len)/6)^alpha (paper: 0.6; 0 = none)", min=0.0,
                           max=MAX_ALPHA, per_request=True)
    length_penalty: str = setting("gnmt", help="what a finished hypothesis's log-probability is divided by: gnmt = "
                                               "((5+len)/6)^alpha (Wu et al. 2016), power = len^alpha (Hugging "
                                               "Face generate's length_penalty); len counts eos",
                                  choices=("gnmt", "power"))
    limit_eos: str = setting("scored", help="the eos a hypothesis is forced to end with at the length limit: "
                                            "scored = at its log-probability; free = at log-probability 0, as "
                                            "Hugging Face's forced_eos_token_id scores it", choices=("scored", "free"))
    renormalize: bool = setting(False, help="renormalize each step's log-probabilities over the tokens left once "
                                            "pad and bos are banned, as Hugging Face's renormalize_logits (false: "
                                            "the model's own log-probabilities)")
    nbest: int = setting(1, help="finished hypotheses returned per source (at most beam)", min=1, per_request=True)
    early_stop: bool = setting(False, help="fairseq's early stop: a source ends once it has `beam` finished "
                                           "hypotheses, even if a live one could still score higher (faster, "
                                           "can return worse outputs); true is early_stopping = true, whatever "
                                           "early_stopping says", per_request=True)
    early_stopping: bool | str = setting(
        "never", choices=EARLY_STOPPING,
        help="when a source stops, as Hugging Face generate's early_stopping: \"never\" = once no live hypothesis "
             "can beat the finished ones at any length it may reach (the exact search; seqxduce's default); true = "
             "once it has `beam` finished hypotheses; false = once it has `beam` finished and its best live "
             "hypothesis, scored at its current length, does not beat the worst of them (Hugging Face's default, "
             "which an imported model keeps)")

    returns_nbest: ClassVar[bool] = True

    def __post_init__(self) -> None:
        # `--set decode.early_stopping=false` arrives as the text "false" (the key also takes text): the bool
        if isinstance(self.early_stopping, str) and self.early_stopping.lower() in ("true", "false"):
            self.early_stopping = self.early_stopping.lower() == "true"
        super().__post_init__()

    def returned(self) -> int:
        return self.nbest

    def stopping_rule(self) -> bool | str:
        """The early_stopping rule the search runs: early_stop = true is early_stopping = true."""
        return True if self.early_stop else self.early_stopping

