"""The training corpus, from the task's text to the arrays an epoch batches: a wing of its own, imported by training
and by `seqxduce prepare`, importing no other wing.

Read in this order: training_data.py (the one entry, TrainingCorpus.open: which road a run's training pairs take,
and where the processes of a run meet while they are made), prepare.py (the text encoded once on every core into a
dataset keyed by what made it), binarized.py (that dataset's files, written atomically and mapped), arrays.py (the
pairs as flat arrays and an epoch's batching by length over them; shuffle.py its shuffle over arrays),
sampled_epochs.py (an epoch encoded anew by a tokenizer that samples), token_cache.py (where the datasets live, and
a small corpus's ids cached)."""
