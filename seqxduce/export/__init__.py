"""Models out and in: a run's files around the model plugin's converter, decoding an exported model, and
another toolkit's model imported as a run."""
