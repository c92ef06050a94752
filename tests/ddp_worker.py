"""Run under torchrun by test_distributed.py: train, then save this rank's parameters."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from seqxduce.recipe import load_recipe
from seqxduce.trainer import Trainer

recipe_path, out, *overrides = sys.argv[1:]
trainer = Trainer(load_recipe(recipe_path, overrides), Path(out))
trainer.run()
torch.save(trainer.model.state_dict(), Path(out) / f"rank{trainer.dist.rank}.pt")
dist.barrier()
trainer.dist.close()
