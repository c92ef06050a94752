"""The search settings' public face for plugins (torch-free): `seqxduce.decoding.search_settings` holds the code."""

from seqxduce.decoding.search_settings import BeamSettings, SearchSettings

__all__ = ["BeamSettings", "SearchSettings"]
