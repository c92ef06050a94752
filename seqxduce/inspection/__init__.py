"""Looking at finished runs: `info`, `plot`, `attention`, `recipe info`, the run's README and the interactive prompt
that `translate` and `parse` build on. Nothing here trains; the trainer only writes the run's README at the end."""
