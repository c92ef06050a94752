"""Decoding: search and its settings, loading a trained run, ensembles, scoring and alignments.

Importing this package imports nothing heavy: `search_settings` is torch-free."""
