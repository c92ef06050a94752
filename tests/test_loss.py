"""The label-smoothed loss's hand-written gradient (seqxduce.training.loss) against autograd over the textbook
formula."""

import pytest
import torch

from seqxduce.training.loss import label_smoothed_nll, label_smoothed_nll_reference


def _case(seed: int, shape=(3, 5, 11)):
    torch.manual_seed(seed)
    logits = torch.randn(*shape) * 3
    target = torch.randint(1, shape[-1], shape[:-1])
    target[0, -2:] = 0  # padding
    return logits, target


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
def test_loss_nll_and_gradient_match_autograd(epsilon):
    logits, target = _case(1)
    mine = logits.clone().requires_grad_()
    theirs = logits.clone().requires_grad_()
    loss, nll = label_smoothed_nll(mine, target, epsilon, pad_id=0)
    ref_loss, ref_nll = label_smoothed_nll_reference(theirs, target, epsilon, pad_id=0)
    assert torch.allclose(loss, ref_loss, rtol=1e-5) and torch.allclose(nll, ref_nll, rtol=1e-5)
    (2.5 * loss).backward()  # an upstream gradient other than 1 (e.g. a loss scale)
    (2.5 * ref_loss).backward()
    assert torch.allclose(mine.grad, theirs.grad, rtol=1e-5, atol=1e-6)
    assert mine.grad[0, -2:].abs().max() == 0  # padding gets no gradient
    assert not nll.requires_grad  # only the loss is differentiated


def test_bf16_logits_get_a_bf16_gradient_computed_in_float32():
    logits, target = _case(2)
    half = logits.bfloat16().requires_grad_()
    full = logits.bfloat16().float().requires_grad_()
    loss, _ = label_smoothed_nll(half, target, 0.1, pad_id=0)
    ref, _ = label_smoothed_nll_reference(full, target, 0.1, pad_id=0)
    loss.backward()
    ref.backward()
    assert loss.dtype == torch.float32 and half.grad.dtype == torch.bfloat16
    assert torch.allclose(loss, ref, rtol=1e-5)
    assert torch.allclose(half.grad.float(), full.grad, rtol=1e-2, atol=1e-3)


def test_under_no_grad_it_only_scores():
    logits, target = _case(3)
    with torch.no_grad():
        loss, nll = label_smoothed_nll(logits, target, 0.1, pad_id=0)
    ref_loss, ref_nll = label_smoothed_nll_reference(logits, target, 0.1, pad_id=0)
    assert torch.allclose(loss, ref_loss, rtol=1e-5) and torch.allclose(nll, ref_nll, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cpu_row_chunks_keep_every_bit_of_one_whole_pass(monkeypatch, dtype):
    """On the CPU the loss goes through the rows in chunks; one row per chunk (and a last, shorter chunk) gives
    the same loss, NLL and gradient bit for bit as the whole tensor at once, as a GPU computes it."""
    from seqxduce.training import loss as loss_module

    logits, target = _case(3, shape=(7, 9, 50))
    results = []
    # everything at once; one row per chunk; four rows (63 = 15 * 4 + 3)
    for chunk_bytes, count in ((1 << 30, 1), (4 * 50, 63), (4 * 50 * 4, 16)):
        monkeypatch.setattr(loss_module, "CPU_CHUNK_BYTES", chunk_bytes)
        chunks = loss_module.row_chunks(63, 50, torch.device("cpu"))
        assert len(chunks) == count and [c.start for c in chunks[1:]] == [c.stop for c in chunks[:-1]]
        assert chunks[0].start == 0 and chunks[-1].stop == 63
        x = logits.to(dtype).requires_grad_()
        loss, nll = label_smoothed_nll(x, target, 0.1, pad_id=0)
        (1.7 * loss).backward()
        assert x.grad.dtype == dtype
        results.append((loss, nll, x.grad))
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))
    assert loss_module.row_chunks(63, 50, torch.device("meta")) == [slice(0, 63)]  # not a CPU: one chunk
