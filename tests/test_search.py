"""The search engine on a fake model whose next-token distribution is a fixed table."""

import math

import pytest
import torch

from seqxduce.api import DecodeRequest, Model
from seqxduce.search import beam_search, greedy_search, length_penalty

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4


class TableModel(Model):
    """log p(next | last token, position) = table[position, last]; the cache is the position."""

    def __init__(self, table: torch.Tensor):
        self.table = table.log_softmax(-1)  # (L, V, V)
        self.training = False

    def forward(self, src, tgt_in):  # pragma: no cover - search never calls it
        raise NotImplementedError

    def encode(self, src):
        return src

    def init_cache(self, memory):
        return 0

    def step(self, tokens, memory, cache):
        pos = min(cache, self.table.size(0) - 1)
        return self.table[pos, tokens], cache + 1

    def reorder(self, memory, cache, index):
        return memory[index], cache


def request(lengths, vocab_src=5):
    width = max(lengths)
    src = torch.full((len(lengths), width), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = 3
    return DecodeRequest(src=src, sources=["x"] * len(lengths), bos_id=BOS, eos_id=EOS, pad_id=PAD)


def trap_model():
    """Greedy takes A (0.6) and then never ends well; the best sequence is B eos (0.4 * 0.95)."""
    probs = torch.full((1, 5, 5), 1e-9)
    probs[0, BOS, A], probs[0, BOS, B] = 0.6, 0.4
    probs[0, A, A], probs[0, A, EOS], probs[0, A, B] = 0.5, 0.45, 0.05
    probs[0, B, EOS], probs[0, B, A] = 0.95, 0.05
    return TableModel(probs.log())


def test_beam_finds_what_greedy_misses():
    model = trap_model()
    greedy = greedy_search(model, request([3]), max_len_a=0, max_len_b=6)[0][0]
    beam = beam_search(model, request([3]), beam=2, alpha=0.0, max_len_a=0, max_len_b=6)[0][0]
    assert greedy.tokens == [A] * 6  # stopped only by the length limit
    assert beam.tokens == [B]
    assert beam.logprob == pytest.approx(math.log(0.4) + math.log(0.95), abs=1e-5)
    assert beam.logprob > greedy.logprob


def test_beam_size_one_equals_greedy_on_random_tables():
    torch.manual_seed(0)
    for _ in range(5):
        model = TableModel(torch.randn(12, 9, 9) * 3)
        req = request([3, 5, 1, 7])
        greedy = greedy_search(model, req, max_len_a=1.0, max_len_b=3)
        beam = beam_search(model, req, beam=1, alpha=0.0, max_len_a=1.0, max_len_b=3)
        assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam]
        for g, b in zip(greedy, beam):
            assert g[0].logprob == pytest.approx(b[0].logprob, abs=1e-4)


def test_length_limit_and_forced_eos():
    probs = torch.full((1, 5, 5), 1e-9)
    probs[0, :, A] = 1.0  # eos is never wanted
    model = TableModel(probs.log())
    out = beam_search(model, request([2, 4]), beam=3, alpha=0.6, max_len_a=2.0, max_len_b=1)
    assert [len(o[0].tokens) for o in out] == [5, 9]
    # the eos that encoding appends to a source does not count as input length
    with_eos = request([3, 5])
    with_eos.src[0, 2] = with_eos.src[1, 4] = EOS
    out = beam_search(model, with_eos, beam=3, alpha=0.6, max_len_a=2.0, max_len_b=1)
    assert [len(o[0].tokens) for o in out] == [5, 9]


def test_length_penalty_and_nbest_order():
    model = trap_model()
    hyps = beam_search(model, request([3]), beam=3, alpha=0.6, max_len_a=0, max_len_b=6, nbest=3)[0]
    assert len(hyps) == 3
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for h in hyps:
        assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 0.6))
        assert sum(h.positional_logprobs) == pytest.approx(h.logprob, abs=1e-4)
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)


def test_batching_does_not_change_results():
    torch.manual_seed(1)
    model = TableModel(torch.randn(15, 9, 9) * 2)
    lengths = [4, 1, 6, 3]
    together = beam_search(model, request(lengths), beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2, nbest=2)
    for i, n in enumerate(lengths):
        alone = beam_search(model, request([n]), beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2, nbest=2)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
