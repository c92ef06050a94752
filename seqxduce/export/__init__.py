"""Models out and in: a run's files around the model plugin's converter, decoding an exported model, and
another toolkit's model imported as a run.

Read in this order: exporting.py (`export`), ct2_decoding.py (`decode --engine ctranslate2`), ct2_engine.py (the
engine over it), engine_choice.py (ctranslate2 registered as an engine; an engine by name from the registry),
importing.py (`import DIR --from NAME`), command.py (the click command and --engine's option)."""
