"""Decoding: search and its settings, loading a trained run, ensembles, scoring and alignments; engines.py, the
one interface over the inference engines (seqxduce's own registered there, a plugin's subclassing its Engine).

Importing this package imports nothing heavy: `search_settings` is torch-free. Read in this order:
search_settings.py, search.py (greedy and beam over Model.encode/step; the step's rules bound once, _StepRules),
phrases.py (lexical constraints: phrases that must and must not appear), decode.py (load_run, decode_sources,
decode_split), changes.py (one road for every way the settings change), then ensemble.py, options.py,
scoring.py and alignments.py; a corpus streamed: streaming.py, stream_files.py, stream_job.py, jobs.py."""
