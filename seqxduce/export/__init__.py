"""Export: a run's files around the model plugin's converter, and decoding an exported model."""
