"""`python -m tests.faults.slowed WHAT ARGS`: the seqxduce CLI with one long stretch of work made longer, so that a
signal test arrives in the middle of it on any machine (the fault tests' injection; nothing else uses it):
- `encoding`: every encoded shard takes a second more, and prepare's shards are small (50 pairs, a pool of
  workers from 100 pairs on), so that a small corpus is encoded for many seconds;
- `averaging`: the final checkpoint average prints "averaging (slowed)" and takes 60 s more, a signal ending the
  wait where it is;
- `validation`: every validation prints "validating (slowed)" once it is under way (inside the part a signal
  abandons) and takes 60 s more before its own work, a signal ending the wait where it is."""

from __future__ import annotations

import sys
import time

from seqxduce.cli import main
from seqxduce.training import prepare, trainer, validation

_encode_shard = prepare._encode_shard
_settle_average = trainer.settle_average
_scores = validation.Validator.scores


def _slow_shard(shard: prepare.Shard) -> tuple:
    time.sleep(1.0)
    return _encode_shard(shard)


def _slow_average(*args: object, **kwargs: object) -> object:
    print("averaging (slowed)", file=sys.stderr, flush=True)
    time.sleep(60.0)
    return _settle_average(*args, **kwargs)


def _slow_scores(self: validation.Validator, *args: object, **kwargs: object) -> object:
    print("validating (slowed)", file=sys.stderr, flush=True)
    time.sleep(60.0)
    return _scores(self, *args, **kwargs)


if __name__ == "__main__":
    what = sys.argv.pop(1)
    if what == "encoding":
        prepare.SHARD, prepare.IN_PROCESS = 50, 100
        prepare._encode_shard = _slow_shard
    elif what == "averaging":
        trainer.settle_average = _slow_average
    elif what == "validation":
        validation.Validator.scores = _slow_scores
    else:
        raise SystemExit(f"slowed: unknown stretch {what!r}")
    main()
