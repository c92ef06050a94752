"""Run under torchrun by test_distributed.py: train, then save this rank's parameters and how many gradient
all-reduces DDP made (a comm hook counts them)."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from seqxduce.recipe import load_recipe
from seqxduce.trainer import Trainer

recipe_path, out, *overrides = sys.argv[1:]
trainer = Trainer(load_recipe(recipe_path, overrides), Path(out))
reduces = [0]


def counting_hook(state, bucket):
    reduces[0] += 1
    return allreduce_hook(state, bucket)


trainer.wrapped.register_comm_hook(None, counting_hook)
trainer.run()
torch.save(trainer.model.state_dict(), Path(out) / f"rank{trainer.dist.rank}.pt")
(Path(out) / f"reduces{trainer.dist.rank}.txt").write_text(str(reduces[0]))
dist.barrier()
trainer.dist.close()
