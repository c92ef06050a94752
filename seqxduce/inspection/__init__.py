"""Looking at finished runs: `info`, `plot`, `attention`, `recipe info`, the run's README and the interactive prompt
that `translate` and `parse` build on. Nothing here trains; the run's README is written by engine.train at the end.

Read in this order: commands.py (the click commands), run_info.py and run_readme.py, curves.py and plotting.py,
attention_maps.py and attention_plot.py, cost.py, interactive.py."""
