"""Run under torchrun by test_distributed.py: train, then save the parameters (each rank its replica under DDP;
rank 0 the gathered full weights under FSDP) and, under DDP, how many gradient all-reduces it made (a comm hook
counts them)."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from seqxduce.recipe import load_recipe
from seqxduce.run_start import RunStart
from seqxduce.training.run import assemble
from seqxduce.training.trainer import Trainer

recipe_path, out, *overrides = sys.argv[1:]
resume = "--resume" in overrides
recipe = load_recipe(recipe_path, [o for o in overrides if o != "--resume"])
trainer = Trainer(assemble(recipe, Path(out), RunStart("resume" if resume else "new")))
reduces = [0]


def counting_hook(state, bucket):
    reduces[0] += 1
    return allreduce_hook(state, bucket)


if not trainer.settings.fsdp:
    trainer.parts.wrapped.register_comm_hook(None, counting_hook)
trainer.run()
if trainer.settings.fsdp:
    weights, _ = trainer.full_states()  # a collective: every rank takes part, rank 0 gets the weights
    if trainer.parts.is_main:
        torch.save(weights, Path(out) / "rank0.pt")
else:
    torch.save(trainer.parts.model.state_dict(), Path(out) / f"rank{trainer.parts.world.rank}.pt")
    (Path(out) / f"reduces{trainer.parts.world.rank}.txt").write_text(str(reduces[0]))
dist.barrier()
trainer.parts.world.close()
