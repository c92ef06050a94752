"""A stop signal cuts a long backward on the CPU between its operations (training.backward), where without the
hooks it waits for the backward's end: the model's first layer, whose gradient a backward computes last, gets none
once the signal has come. A timer sends the signal a moment into a backward of seconds at one thread."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import torch

from seqxduce.signals import stop_training_on_signals
from seqxduce.stopping import Abandoned, StopRequest
from seqxduce.training.backward import cuttable_backward

LAYERS, WIDTH, ROWS = 40, 1024, 1024  # a backward of seconds at one thread on any CPU


def backward_signalled(cuttable: bool) -> tuple[bool, bool]:
    """A forward and its backward, SIGUSR1 coming 0.2 s into the backward: (whether Abandoned was raised, whether
    the first layer got its gradient, which the backward computes last)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))
    x = torch.randn(ROWS, WIDTH, requires_grad=True)
    request = StopRequest()
    with stop_training_on_signals(request):  # the trainer's own handler
        with cuttable_backward(torch.device("cpu"), compiled=not cuttable):
            loss = model(x).sum()
            timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
            try:
                with request.abandonable():
                    timer.start()
                    loss.backward()
                    abandoned = False
            except Abandoned:
                abandoned = True
            finally:
                timer.join()
    return abandoned, model[0].weight.grad is not None


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_stop_signal_cuts_a_long_cpu_backward_before_its_end(one_thread):
    assert backward_signalled(cuttable=True) == (True, False), "the backward went on to the model's first layer"


def test_without_the_hooks_the_signal_waits_for_the_backwards_end(one_thread):
    # the handler runs only once the backward has returned: then it raises, at the next bytecode
    assert backward_signalled(cuttable=False) == (True, True)
