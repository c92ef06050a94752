"""The search settings' public face for plugins (torch-free): `seqxduce.decoding.search_settings` holds the code."""

from seqxduce.decoding.search_settings import (
    EARLY_STOPPING,
    MAX_ALPHA,
    MAX_BEAM,
    MAX_LEN_A,
    MAX_LENGTH,
    BeamSettings,
    SearchSettings,
)

__all__ = ["BeamSettings", "SearchSettings", "EARLY_STOPPING", "MAX_ALPHA", "MAX_BEAM", "MAX_LEN_A", "MAX_LENGTH"]
