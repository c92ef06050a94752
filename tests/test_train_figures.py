"""The log window and the run of skipped updates on tensors (as a step returns them) give the figures that Python
numbers give, a skipped step's NaN loss included."""

import math

import pytest
import torch

from seqxduce.training.figures import NonfiniteRun, Window

STEPS = [  # loss, nll, tokens, grad_norm, skipped, ponder_max
    (8.0, 4.0, 4.0, 1.0, 0.0, 2.0),
    (float("nan"), float("nan"), 5.0, float("nan"), 1.0, 9.0),
    (6.0, 2.0, 2.0, 3.0, 0.0, 1.0),
]


def _window(as_tensor: bool) -> Window:
    window = Window()
    for loss, nll, tokens, norm, skipped, top in STEPS:
        wrap = (lambda v: torch.tensor(v, dtype=torch.float64)) if as_tensor else (lambda v: v)
        window.add({"loss": wrap(loss), "nll": wrap(nll), "tokens": tokens, "aux": wrap(0.0),
                    "grad_norm": wrap(norm), "skipped_updates": wrap(skipped), "ponder_max": wrap(top)})
    return window


def test_tensor_figures_sum_as_numbers_do_and_a_skipped_step_counts_without_its_nan():
    on_device, on_host = _window(True).summary(lr=0.5), _window(False).summary(lr=0.5)
    tokens_per_s = on_device.pop("tokens_per_s"), on_host.pop("tokens_per_s")
    assert on_device == on_host == {"loss": 14.0 / 6.0, "ppl": pytest.approx(math.exp(1.0)), "lr": 0.5,
                                    "grad_norm": 2.0, "skipped_updates": 1, "ponder_max": 2.0}
    assert all(t > 0 for t in tokens_per_s)
    assert _window(True).tokens() == 6  # the skipped step's tokens did not train


@pytest.mark.parametrize("as_tensor", [False, True])
def test_the_run_of_skipped_updates_remembers_the_step_it_reached_the_limit(as_tensor):
    run = NonfiniteRun(limit=2)
    for step, skipped in enumerate([1.0, 0.0, 1.0, 1.0, 1.0, 0.0], start=1):
        run.add(step, torch.tensor(skipped) if as_tensor else skipped)
        if step == 3:
            assert run.reached_at() == 0  # one in a row after a finite step
    assert run.reached_at() == 4  # the first step with two in a row, not the later 5
