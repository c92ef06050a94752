"""The training loss, forward and backward: seqxduce.training.loss (its gradient written by hand) against autograd over
log_softmax, gather and mean (what it replaced), in interleaved rounds on one thread: medians and per-round ratios.

    python bench/loss_speed.py                      # a Multi30k-sized step: 164 x 25 targets, vocabulary 8,000
    python bench/loss_speed.py --vocab 37000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from seqxduce.training.loss import label_smoothed_nll, label_smoothed_nll_reference


def forward_backward(loss_fn: Callable, logits: torch.Tensor, target: torch.Tensor) -> float:
    """Seconds of one forward and backward of loss_fn on a fresh leaf copy of logits."""
    leaf = logits.clone().requires_grad_()
    started = time.perf_counter()
    loss, _ = loss_fn(leaf, target, 0.1, 0)
    loss.backward()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=164)
    parser.add_argument("--length", type=int, default=25)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    logits = torch.randn(args.sentences, args.length, args.vocab)
    target = torch.randint(1, args.vocab, (args.sentences, args.length))
    systems = {"autograd": label_smoothed_nll_reference, "seqxduce.training.loss": label_smoothed_nll}
    for fn in systems.values():  # warm-up
        forward_backward(fn, logits, target)
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, fn in systems.items():
            times[name].append(forward_backward(fn, logits, target))
    for name, values in times.items():
        print(f"{name:14s} median {statistics.median(values) * 1e3:8.1f} ms")
    ratios = [mine / theirs for mine, theirs in zip(times["seqxduce.training.loss"], times["autograd"])]
    print(f"seqxduce.training.loss / autograd: median {statistics.median(ratios):.3f}, per round "
          + " ".join(f"{r:.2f}" for r in ratios))


if __name__ == "__main__":
    main()
