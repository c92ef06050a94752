"""The first steps of a training run as figures that must not change: per step, a digest of its padded batches
(the pairs in them and their order) with the step's target tokens, the summed loss and the gradient norm (exact,
as float.hex), and at the end a digest of the weights. A change of the data path (how pairs are read, batched,
sharded) must leave them bit for bit as they were.

Recorded from the code at 80e374f (before the binarized dataset), on this repository's CPU machine then (a Xeon
with AMX). The Multi30k case was recorded again in fp32 at b4aeaea on a 2-core AVX2 EPYC (Zen 3), whose bf16 is
emulated: its batches are those of the 80e374f record, its losses within 6e-5 and its gradient norms within 0.3% of
that record's bf16 ones. Both were recorded again on a 2-core Xeon with AMX when the CPU dropout's masks came
from PCG64 instead of torch's bernoulli_ (the batches unchanged; the losses and norms those of other masks). Both with
    python -m tests.training.first_steps --write
which writes tests/fixtures/first_steps/*.json, with the kind of CPU that made them (cpu_kind());
tests/training/test_first_steps.py trains again and compares: the batches exactly and the losses within rounding on
every CPU, bit for bit on the kind that recorded them (another kind's kernels sum in another order)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import torch

from seqxduce.device import cpu_has_amx

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "first_steps"
REPO = Path(__file__).resolve().parents[2]
STEPS = 100
# the figures do not depend on logging, validation or checkpoints: these keep the run short
COMMON = [f"train.max_steps={STEPS}", "train.log_every=1", "train.validate_every=0",
          "train.valid_decode_examples=0", f"train.checkpoint_every={STEPS}", "train.average_last=0",
          "train.device=cpu"]


def cases(shared: Path) -> dict[str, tuple[Path, list[str]]]:
    """name -> (recipe, overrides). The quick start as it is; the Multi30k recipe's data path (its corpus,
    its sentencepiece BPE of 8000 and its batches) with a small model, so that 100 steps take seconds."""
    return {
        "quickstart": (REPO / "recipes" / "quickstart.toml", []),
        "multi30k": (REPO / "recipes" / "multi30k_en_de.toml",
                     [f"task.data_dir={shared / 'data' / 'multi30k'}", "train.members=1", "model.layers=1",
                      "model.d_model=32", "model.d_ff=64", "model.heads=2",
                      # the schedule the figures were recorded with (the recipe's before its cosine decay): what
                      # is compared is the data path, not the recipe's learning rate
                      "train.schedule=inverse_sqrt", "train.lr_scale=0.5",
                      # fp32, not the recipe's bf16: a CPU without bf16 units (an AVX2 EPYC) emulates bf16 at
                      # about 4x these 100 steps' time (185 s against 44 s), and the data path is what is compared
                      "train.precision=fp32"]),
    }


def cpu_kind() -> str:
    """What decides the float kernels torch runs here: its CPU capability (AVX2, AVX512, ...; ATEN_CPU_CAPABILITY
    lowers it), AMX tiles, and the environment variables that cap MKL's and oneDNN's instruction sets."""
    kind = torch.backends.cpu.get_cpu_capability()
    if cpu_has_amx():
        kind += "+AMX"
    caps = [f"{name}={os.environ[name]}" for name in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
            if os.environ.get(name)]
    return " ".join([kind, *caps])


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str(tuple(t.shape)).encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def record(recipe: Path, overrides: list[str], out: Path) -> dict:
    """Train the first STEPS steps of `recipe` into `out` and return their figures."""
    from seqxduce import engine
    from seqxduce.training.trainer import Trainer

    steps: list[dict] = []
    original = Trainer.train_step

    def train_step(self, batches, global_tokens=None):
        figures = original(self, batches, global_tokens)
        steps.append({"batches": _digest(*(t for b in batches for t in (b.src, b.tgt_in, b.tgt_out))),
                      "tokens": int(global_tokens),
                      "loss": float(figures["loss"]).hex(), "grad_norm": float(figures["grad_norm"]).hex()})
        return figures

    Trainer.train_step = train_step
    try:
        engine.train(recipe, out, overrides=[*COMMON, *overrides])
    finally:
        Trainer.train_step = original
    weights = torch.load(out / "checkpoints" / f"step_{STEPS:08d}.pt", weights_only=True)["model"]
    return {"steps": steps,
            "weights": _digest(*(weights[k].float() for k in sorted(weights)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="write the figures under tests/fixtures/first_steps")
    parser.add_argument("--only", help="one case")
    args = parser.parse_args()
    import tempfile

    torch.set_num_threads(1)  # as the tests run it (OMP_NUM_THREADS=1 in their processes)
    shared = Path(os.environ.get("SEQXDUCE_SHARED") or REPO.parent / "shared")
    for name, (recipe, overrides) in cases(shared).items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory() as work:
            os.environ["SEQXDUCE_CACHE"] = str(Path(work) / "cache")
            figures = record(recipe, overrides, Path(work) / "run")
        print(name, figures["weights"], figures["steps"][-1])
        if args.write:
            FIXTURES.mkdir(parents=True, exist_ok=True)
            figures["cpu"] = cpu_kind()
            (FIXTURES / f"{name}.json").write_text(json.dumps(figures, indent=0) + "\n")


if __name__ == "__main__":
    main()
