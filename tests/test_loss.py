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


def _teacher(target: torch.Tensor, vocab: int, k: int, seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """A teacher's k tokens and renormalised probabilities per position, 0 at the targets' padding."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(vocab, generator=generator)[:k] for _ in range(target.numel())])
    probs = torch.rand(target.numel(), k, generator=generator).softmax(-1)
    ids, probs = ids.view(*target.shape, k), probs.view(*target.shape, k)
    probs[target == 0] = 0.0
    return ids, probs


@pytest.mark.parametrize("kd_weight", [0.25, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_teachers_term_and_its_gradient_match_autograd(kd_weight, dtype):
    """Word-level distillation: (1 - w) * the smoothed loss + w * the cross-entropy against the teacher's k
    probabilities, its hand-written gradient as autograd's over the textbook formula, chunked or whole."""
    logits, target = _case(4, shape=(4, 6, 30))
    soft = _teacher(target, 30, 5)
    mine = logits.to(dtype).clone().requires_grad_()
    theirs = logits.to(dtype).float().clone().requires_grad_()
    loss, nll = label_smoothed_nll(mine, target, 0.1, 0, soft, kd_weight)
    ref_loss, ref_nll = label_smoothed_nll_reference(theirs, target, 0.1, 0, soft, kd_weight)
    assert torch.allclose(loss, ref_loss, rtol=1e-5) and torch.allclose(nll, ref_nll, rtol=1e-5)
    (1.5 * loss).backward()
    (1.5 * ref_loss).backward()
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-3}
    assert torch.allclose(mine.grad.float(), theirs.grad, **tolerance)
    assert mine.grad[target == 0].abs().max() == 0
    # the teacher's term is really there: the gradient without it is another
    plain = logits.to(dtype).clone().requires_grad_()
    label_smoothed_nll(plain, target, 0.1, 0)[0].mul(1.5).backward()
    assert (plain.grad.float() - mine.grad.float()).abs().max() > 1e-2


def test_a_teacher_that_is_the_gold_one_hot_is_the_plain_loss():
    """A teacher whose one token is the reference with probability 1, at weight 1 and no smoothing, is the NLL."""
    logits, target = _case(5)
    ids, probs = target.unsqueeze(-1), (target != 0).float().unsqueeze(-1)
    loss, nll = label_smoothed_nll(logits, target, 0.0, 0, (ids, probs), 1.0)
    assert torch.allclose(loss, nll, rtol=1e-6)
