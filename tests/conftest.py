"""Fixtures of the core's tests: those in seqxduce.testing (registry, shared data) and a tiny trained run."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqxduce.testing import (  # noqa: F401  (fixtures and helpers the core's tests share with plugin tests)
    default_shared,
    evalb_reference,
    multi30k,
    plugins_registered,
    ptb_sample,
    repository_root,
    shared_dir,
    train_tiny_run,
)
from tests.faults.cluster_tools import two_rank_run  # noqa: F401 (a fixture of the cluster tests)
from tests.faults.slurm import slurm  # noqa: F401 (the SLURM tests' cluster)
from tests.tiny import TINY_RECIPE
from tests.tiny_teacher import cache, teacher  # noqa: F401 (the distillation tests' fixtures)

REPOSITORY = repository_root(Path(__file__))
DEFAULT_SHARED = default_shared(REPOSITORY)



@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The tiny recipe trained for 6 steps (checkpoints at 2, 4, 6 and their average of 2), shared by the tests
    that only read a finished run. Every batch holds the whole training set, so one step is one epoch."""
    return train_tiny_run(TINY_RECIPE, tmp_path_factory.mktemp("shared-runs") / "tiny")


# a copy model that has learned its task: 400 steps, about a minute on one core
COPY_SETTINGS = ["task.kind=copy", "task.train_size=2000", "task.train_max_len=12", "task.valid_max_len=12",
                 "task.test_max_len=12", "task.test_size=60", "model.d_model=32", "model.d_ff=64",
                 "model.dropout=0.0", "train.max_steps=400", "train.max_tokens=400", "train.warmup_steps=100",
                 "train.validate_every=0", "train.checkpoint_every=400"]


@pytest.fixture(scope="session")
def trained_copy_run(tmp_path_factory) -> Path:
    """The tiny recipe trained into a small model that copies well (its decodes are worth comparing), shared by
    the search and decode-option tests that only read it."""
    import seqxduce

    out = tmp_path_factory.mktemp("trained-copy") / "run"
    seqxduce.train(seqxduce.load_recipe(TINY_RECIPE, COPY_SETTINGS), out=out)
    return out
