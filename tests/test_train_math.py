"""The learning-rate schedule, the label-smoothed loss and the reduction of logged figures, by hand."""

import math

import pytest
import torch

from seqxduce.settings import TrainSettings
from seqxduce.training.figures import Window, batch_stats
from seqxduce.training.loss import label_smoothed_nll
from seqxduce.training.optim import inverse_sqrt_lr, learning_rate


def test_inverse_sqrt_schedule_matches_the_paper_formula():
    d, warmup = 512, 4000
    for step in (1, 10, 3999, 4000, 4001, 100000):
        expected = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_lr(step, d, warmup) == pytest.approx(expected)
    # the peak is at the end of warm-up: d^-0.5 * warmup^-0.5
    assert inverse_sqrt_lr(4000, d, warmup) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert inverse_sqrt_lr(3999, d, warmup) < inverse_sqrt_lr(4000, d, warmup) > inverse_sqrt_lr(4001, d, warmup)
    assert inverse_sqrt_lr(100, d, warmup, scale=2.0) == pytest.approx(2 * inverse_sqrt_lr(100, d, warmup))


def test_constant_schedule_ignores_step():
    s = TrainSettings(schedule="constant", lr=3e-4)
    assert learning_rate(s, 1, None) == learning_rate(s, 1000, None) == 3e-4


def test_label_smoothing_against_hand_computation():
    logits = torch.tensor([[[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 0.0, 3.0]]])  # (B=1, T=2, V=4)
    target = torch.tensor([[1, 0]])  # second position is padding (pad id 0)
    eps = 0.1
    loss, nll = label_smoothed_nll(logits, target, eps, pad_id=0)
    z = [1.0, 2.0, 0.5, -1.0]
    log_norm = math.log(sum(math.exp(v) for v in z))
    logp = [v - log_norm for v in z]
    expected_nll = -logp[1]
    expected = (1 - eps) * expected_nll + eps * sum(-lp for lp in logp) / 4
    assert float(nll) == pytest.approx(expected_nll, rel=1e-6)
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_label_smoothing_zero_is_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[1, 2, 3], [4, 5, 0]])
    loss, nll = label_smoothed_nll(logits, target, 0.0, pad_id=0)
    ref = torch.nn.functional.cross_entropy(logits.view(-1, 7), target.view(-1), ignore_index=0, reduction="sum")
    assert float(loss) == pytest.approx(float(ref), rel=1e-6)
    assert float(nll) == pytest.approx(float(ref), rel=1e-6)


def test_model_stats_are_averaged_and_maxed_over_accumulated_batches():
    stats = batch_stats([{"ponder_mean": 1.0, "ponder_max": 2.0}, {"ponder_mean": 3.0, "ponder_max": 5.0}])
    assert stats == {"ponder_mean": 2.0, "ponder_max": 5.0}
    assert batch_stats([{}, {}]) == {}


def test_the_log_window_averages_model_stats_over_steps_and_keeps_their_maximum():
    window = Window()
    for mean, top in ((1.0, 3.0), (2.0, 2.0)):
        window.add({"loss": 4.0, "nll": 2.0, "tokens": 2.0, "grad_norm": 1.0, "ponder_mean": mean, "ponder_max": top})
    summary = window.summary(lr=0.1)
    assert summary["ponder_mean"] == 1.5 and summary["ponder_max"] == 3.0
    assert summary["loss"] == 2.0 and summary["grad_norm"] == 1.0


def test_the_schedule_reads_the_models_declared_width():
    from seqxduce_transformer import build_transformer, build_universal_transformer
    from seqxduce_transformer.settings import TransformerSettings, UniversalSettings

    from seqxduce.api import Model, UserError, VocabInfo

    vocab = VocabInfo(src_size=12, tgt_size=12, pad_id=0, bos_id=1, eos_id=2, shared=True)
    small = dict(d_model=24, d_ff=32, heads=2)
    assert build_transformer(TransformerSettings(layers=1, **small), vocab).schedule_width == 24
    assert build_universal_transformer(UniversalSettings(steps=1, **small), vocab).schedule_width == 24

    class Widthless(Model):
        forward = encode = init_cache = step = reorder = None

    assert Widthless().schedule_width is None
    with pytest.raises(UserError, match=r'needs the model\'s d_model; set schedule = "constant"'):
        learning_rate(TrainSettings(), 1, Widthless().schedule_width)


def test_gradient_clipping_matches_torchs_clip_grad_norm():
    from seqxduce.training.optim import clip_gradients

    torch.manual_seed(0)
    grads = [torch.randn(3, 4), torch.randn(5)]
    expected = [g.clone() for g in grads]
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in expected]
    for p, g in zip(params, expected):
        p.grad = g
    reference = torch.nn.utils.clip_grad_norm_(params, 0.5)
    norm = clip_gradients(grads, 0.5)
    assert float(norm) == pytest.approx(float(reference), rel=1e-6) and float(norm) > 0.5
    for got, want in zip(grads, params):
        torch.testing.assert_close(got, want.grad)
    unclipped = [g.clone() for g in grads]
    assert float(clip_gradients(grads, 0.0)) == pytest.approx(0.5, rel=1e-5)  # 0: the norm only, no scaling
    assert all(torch.equal(a, b) for a, b in zip(grads, unclipped))
