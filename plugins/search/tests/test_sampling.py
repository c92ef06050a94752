"""The `sampling` decoder: temperature, top-k, top-p, a seed, n samples per source as the n-best list."""

import math
from collections import Counter

import pytest
import torch
from click.testing import CliRunner
from seqxduce_search.sampling import SamplingDecoder, reshape
from seqxduce_search.settings import SamplingSettings

from seqxduce import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.testing import BOS, EOS, TableModel
from seqxduce.testing import table_request as request

A, B = 3, 4

PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05]])


def kept(scores: torch.Tensor) -> list[int]:
    return torch.isfinite(scores[0]).nonzero().flatten().tolist()


def test_top_k_keeps_the_k_most_probable():
    assert kept(reshape(PROBS.log(), 1.0, 2, 1.0)) == [0, 1]
    assert kept(reshape(PROBS.log(), 1.0, 0, 1.0)) == [0, 1, 2, 3]


@pytest.mark.parametrize("top_p, expected", [(0.5, [0]), (0.51, [0, 1]), (0.8, [0, 1]), (0.81, [0, 1, 2]),
                                             (1.0, [0, 1, 2, 3])])
def test_top_p_keeps_the_fewest_tokens_reaching_p(top_p, expected):
    assert kept(reshape(PROBS.log(), 1.0, 0, top_p)) == expected


def test_temperature_sharpens_or_flattens():
    sharp = reshape(PROBS.log(), 0.5, 0, 1.0).softmax(-1)
    expected = PROBS**2 / (PROBS**2).sum()
    torch.testing.assert_close(sharp, expected)
    flat = reshape(PROBS.log(), 4.0, 0, 1.0).softmax(-1)
    assert flat[0, 0] < PROBS[0, 0] and flat[0, 3] > PROBS[0, 3]


def two_choice_model():
    """First token A (0.6) or B (0.4), then eos for certain."""
    probs = torch.full((2, 5, 5), 1e-12)
    probs[0, BOS, A], probs[0, BOS, B] = 0.6, 0.4
    probs[1, A, EOS] = probs[1, B, EOS] = 1.0
    return TableModel(probs.log())


def sample(n=2000, **settings):
    decoder = SamplingDecoder(SamplingSettings(max_len_a=0, max_len_b=3, nbest=n, **settings))
    return decoder.decode(two_choice_model(), request([2]))[0]


def first_tokens(hyps) -> Counter:
    return Counter(h.tokens[0] for h in hyps)


def test_samples_follow_the_model_distribution():
    counts = first_tokens(sample())
    assert abs(counts[A] / 2000 - 0.6) < 0.05  # 4.5 standard deviations; the seed makes it deterministic
    sharp = first_tokens(sample(temperature=0.5))  # 0.36 : 0.16
    assert abs(sharp[A] / 2000 - 0.36 / 0.52) < 0.05
    assert first_tokens(sample(n=200, top_k=1)) == Counter({A: 200})
    assert first_tokens(sample(n=200, top_p=0.5)) == Counter({A: 200})


def test_scores_are_the_models_log_probabilities_best_first():
    hyps = sample(n=50, temperature=3.0)
    assert {tuple(h.tokens) for h in hyps} == {(A,), (B,)}
    for h in hyps:
        expected = math.log(0.6 if h.tokens == [A] else 0.4) + math.log(1.0)
        assert h.score == pytest.approx(expected, abs=1e-6)
        assert h.logprob == h.score and h.positional_logprobs == pytest.approx([expected, 0.0], abs=1e-6)
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_the_seed_decides_the_samples():
    draw = [h.tokens for h in sample(n=64, seed=5)]
    assert draw == [h.tokens for h in sample(n=64, seed=5)]
    ours_decoder = SamplingDecoder(SamplingSettings(max_len_a=0, max_len_b=3, nbest=1, seed=5))
    other = SamplingDecoder(SamplingSettings(max_len_a=0, max_len_b=3, nbest=1, seed=6))
    model = two_choice_model()
    ours = [ours_decoder.decode(model, request([2]))[0][0].tokens for _ in range(64)]
    theirs = [other.decode(model, request([2]))[0][0].tokens for _ in range(64)]
    assert ours != theirs


def test_each_source_gets_its_own_n_samples():
    decoder = SamplingDecoder(SamplingSettings(max_len_a=0, max_len_b=3, nbest=3))
    out = decoder.decode(two_choice_model(), request([2, 3, 1]))
    assert [len(hyps) for hyps in out] == [3, 3, 3]


def test_decode_with_sampling_writes_n_samples_per_source(tiny_run, tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("1 2 3\n4 5\n")
    args = ["decode", str(tiny_run), "--input", str(src), "--set", "decode.name=sampling",
            "--set", "decode.nbest=3", "--set", "decode.seed=7", "--set", "decode.temperature=1.5"]
    first = CliRunner().invoke(add_plugin_commands(), args)
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["0", "0", "0", "1", "1", "1"]
    again = CliRunner().invoke(add_plugin_commands(), args)
    assert again.stdout == first.stdout


@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e300, 0.0])
def test_a_temperature_float32_cannot_compute_is_refused_by_the_setting(temperature):
    with pytest.raises(UserError, match="temperature"):
        SamplingSettings(temperature=temperature)
    assert SamplingSettings(temperature=1e-6).temperature == 1e-6 and SamplingSettings(temperature=1e6)
