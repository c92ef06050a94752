"""`python -m tests.faults.slowed WHAT ARGS`: the seqxduce CLI with one long stretch of work made longer, so that a
signal test arrives in the middle of it on any machine (the fault tests' injection; nothing else uses it). Where
the command line is not the test's to write (a job script run by a real SLURM), tests/faults/inject on PYTHONPATH
does the same to every torchrun worker when $SEQXDUCE_TEST_SLOWED names the stretch:
- `encoding`: every encoded shard takes a second more, and prepare's shards are small (50 pairs, a pool of
  workers from 100 pairs on), so that a small corpus is encoded for many seconds;
- `averaging`: the final checkpoint average prints "averaging (slowed)" and takes 60 s more, a signal ending the
  wait where it is;
- `validation`: every validation prints "validating (slowed)" once it is under way (inside the part a signal
  abandons) and takes 60 s more before its own work, a signal ending the wait where it is;
- `step`: the $SLOW_STEP-th loss computed (after a micro-batch's forward: with update_freq = 1, step $SLOW_STEP) by
  rank $SLOW_RANK (default 0; "all": every rank) writes $SLOW_MARKER.rankR (holding the process id) and then sleeps
  $SLOW_SECONDS (default 600 s, far longer than a stop may take); once the marker is there (the run after a
  stop) no step is slowed, so that the same command line continues the run at full speed;
- `building`: building a run's model, after its data are prepared and before its first step, prints "building the
  model (slowed)" and takes 60 s more, a signal ending the wait where it is;
- `steady`: every loss computed sleeps $STEADY_SECONDS more (bench/cluster_faults.py: a tiny run that lasts long
  enough for faults at random moments to land in every part of it)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from seqxduce import components
from seqxduce.cli import main
from seqxduce.corpus import prepare
from seqxduce.training import trainer, validation

_encode_shard = prepare._encode_shard
_build_components = components.build_components
_settle_average = trainer.settle_average
_scores = validation.Validator.scores
_loss = trainer.label_smoothed_nll
_calls = [0]


def _slow_shard(shard: prepare.Shard) -> tuple:
    time.sleep(1.0)
    return _encode_shard(shard)


def _slow_average(*args: object, **kwargs: object) -> object:
    print("averaging (slowed)", file=sys.stderr, flush=True)
    time.sleep(60.0)
    return _settle_average(*args, **kwargs)


def _slow_build(*args: object, **kwargs: object) -> object:
    print("building the model (slowed)", file=sys.stderr, flush=True)
    time.sleep(60.0)
    return _build_components(*args, **kwargs)


def _slow_scores(self: validation.Validator, *args: object, **kwargs: object) -> object:
    print("validating (slowed)", file=sys.stderr, flush=True)
    time.sleep(60.0)
    return _scores(self, *args, **kwargs)


def _slow_loss(*args: object, **kwargs: object) -> object:
    _calls[0] += 1
    rank = os.environ.get("RANK", "0")
    marker = Path(f"{os.environ['SLOW_MARKER']}.rank{rank}")
    chosen = os.environ.get("SLOW_RANK", "0") in ("all", rank)
    if chosen and _calls[0] == int(os.environ["SLOW_STEP"]) and not marker.exists():
        marker.write_text(str(os.getpid()))
        time.sleep(float(os.environ.get("SLOW_SECONDS", "600")))
    return _loss(*args, **kwargs)


def _steady_loss(*args: object, **kwargs: object) -> object:
    time.sleep(float(os.environ.get("STEADY_SECONDS", "0.1")))
    return _loss(*args, **kwargs)


def apply(what: str) -> None:
    """Make the stretch `what` longer in this process (the module's docstring)."""
    if what == "encoding":
        prepare.SHARD, prepare.IN_PROCESS = 50, 100
        prepare._encode_shard = _slow_shard
    elif what == "averaging":
        trainer.settle_average = _slow_average
    elif what == "building":
        components.build_components = _slow_build
    elif what == "validation":
        validation.Validator.scores = _slow_scores
    elif what == "step":  # with update_freq = 1 the loss is computed once a step
        trainer.label_smoothed_nll = _slow_loss
    elif what == "steady":
        trainer.label_smoothed_nll = _steady_loss
    else:
        raise SystemExit(f"slowed: unknown stretch {what!r}")


if __name__ == "__main__":
    apply(sys.argv.pop(1))
    main()
