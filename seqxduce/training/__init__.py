"""Training: a run assembled from its parts, the loop over its steps, and what it saves.

Read in this order: run.py (assemble: the world, the run folder, the corpus through its one entry
corpus.training_data.TrainingCorpus, the model, the optimizer and the state, as one TrainingRun), trainer.py (the
loop and the step over those parts, saving, stopping), step_plan.py (each epoch's batches and each rank's share of a
step), then the parts the step uses: loss.py, optim.py, state.py (exact resume), validation.py (training's only tie
to decoding), early_stopping.py; around them distributed.py (torchrun), figures.py, metrics_log.py,
tensorboard_log.py, in_memory.py (a run without a run folder) and supervisor.py (`[train] members = N`)."""
