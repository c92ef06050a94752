"""A training step never waits for the device: its figures stay device tensors until a log line reads them, and
a non-finite step is skipped on the device. On the CPU a dispatch mode stands in for CUDA's sync check, failing on
the operations that make the host wait for a GPU (.item(), bool(), nonzero, boolean indexing); on a GPU
torch.cuda.set_sync_debug_mode("error") checks the real thing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seqxduce.api import ModelOutput
from seqxduce.corpus.arrays import collate_indices, token_batches
from seqxduce.recipe import load_recipe
from seqxduce.testing import HostReads
from seqxduce.training.in_memory import in_memory_run
from seqxduce.training.trainer import Trainer
from tests.tiny import TINY_RECIPE as RECIPE

QUIET = ["train.validate_every=0", "train.valid_decode_examples=0"]


class BagModel(nn.Module):
    """A model with no host read of its own: mean source embedding plus target embedding, projected."""

    def __init__(self, vocab: int, pad_id: int, width: int = 8):
        super().__init__()
        self.pad_id = pad_id
        self.schedule_width = width  # the inverse_sqrt schedule's d_model
        self.embed = nn.Embedding(vocab, width)
        self.out = nn.Linear(width, vocab)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> ModelOutput:
        keep = (src != self.pad_id).unsqueeze(-1).float()  # (B, S, 1)
        source = (self.embed(src) * keep).sum(1, keepdim=True) / keep.sum(1, keepdim=True)  # (B, 1, C)
        return ModelOutput(self.out(torch.tanh(self.embed(tgt_in) + source)))  # (B, T, V)


def bag_model(vocab) -> BagModel:
    return BagModel(vocab.tgt_size, vocab.pad_id)


def run_steps(trainer: Trainer, n: int) -> list[dict]:
    pairs = trainer.parts.plan.train_pairs
    batches = token_batches(pairs, trainer.settings.max_tokens, 1, 1)
    figures = []
    for i in range(n):
        batch = collate_indices(pairs, batches[i], trainer.parts.tokenizers.vocab())
        figures.append(trainer.train_step([batch]))
        trainer.state.step += 1
    return figures


def test_a_train_step_reads_nothing_back_from_the_device():
    trainer = Trainer(in_memory_run(load_recipe(RECIPE, QUIET), bag_model))
    assert trainer.parts.fused  # the CPU has the fused Adam since torch 2.4: the skip is decided without the host
    run_steps(trainer, 1)  # the first step builds the optimizer's state
    with HostReads() as reads:
        figures = run_steps(trainer, 3)
    assert reads.seen == []
    assert all(isinstance(f[k], torch.Tensor) for f in figures for k in ("loss", "nll", "grad_norm",
                                                                        "skipped_updates"))


def test_the_probe_sees_a_host_read():
    """The dispatch mode above is what the test relies on: it must catch .item() and boolean indexing."""
    x = torch.arange(4.0)
    with HostReads() as reads:
        float(x.sum())
        x[x > 1].sum()
    assert "aten._local_scalar_dense.default" in reads.seen and any(s.startswith("aten.index") for s in reads.seen)


@pytest.mark.parametrize("char_ngrams", [0, 4])
def test_the_transformer_plugin_step_reads_nothing_back_from_the_device(char_ngrams):
    trainer = Trainer(in_memory_run(load_recipe(RECIPE, [*QUIET, f"model.char_ngrams={char_ngrams}"])))
    run_steps(trainer, 1)
    with HostReads() as reads:
        run_steps(trainer, 2)
    assert reads.seen == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model", ["bag", "transformer"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_train_steps_run_under_the_sync_debug_mode_error(precision, model):
    recipe = load_recipe(RECIPE, [*QUIET, 'train.device="cuda"', f'train.precision="{precision}"'])
    trainer = Trainer(in_memory_run(recipe, bag_model if model == "bag" else None, device="cuda"))
    assert trainer.parts.fused
    run_steps(trainer, 1)  # the first step allocates the optimizer's state
    torch.cuda.set_sync_debug_mode("error")
    try:
        figures = run_steps(trainer, 3)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(f["loss"].is_cuda and f["skipped_updates"].is_cuda for f in figures)
    assert all(float(f["skipped_updates"]) == 0.0 for f in figures)


def test_a_checkpoint_of_a_foreach_optimizer_resumes_into_the_fused_one():
    from seqxduce.training.optim import restore_optimizer

    trainer = Trainer(in_memory_run(load_recipe(RECIPE, QUIET)))
    params = list(trainer.parts.model.parameters())
    old = torch.optim.Adam(params, lr=1e-3, foreach=True)  # as runs before the fused optimizer saved it
    for p in params:
        p.grad = torch.ones_like(p)
    old.step()
    restore_optimizer(trainer.parts.optimizer, old.state_dict(), fused=True)
    assert trainer.parts.optimizer.param_groups[0]["fused"] is True and trainer.parts.fused
    run_steps(trainer, 1)  # the device-side skip needs the fused step: a foreach one would refuse found_inf
    assert {int(s["step"]) for s in trainer.parts.optimizer.state.values()} == {2}
