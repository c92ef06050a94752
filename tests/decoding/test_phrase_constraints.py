"""Lexical constraints in the searches (seqxduce/decoding/phrases.py): phrases that must appear, in any order, and
phrases that must not, on fake models whose next-token distribution is a random table."""

import pytest
import torch

from seqxduce.api import Phrases
from seqxduce.decoding.phrases import PhraseConstraint, select
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.testing import TableModel
from seqxduce.testing import table_request as request

VOCAB = 12  # ids 0..3 are pad, bos, eos, unk (seqxduce.testing); 4.. are words


def contains(tokens: list[int], phrase: tuple[int, ...]) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i:i + n]) == phrase for i in range(len(tokens) - n + 1))


def random_phrases(g: torch.Generator, count: int, longest: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(t) for t in torch.randint(4, VOCAB, (int(torch.randint(1, longest + 1, (1,),
                                                                                       generator=g)),), generator=g))
                 for _ in range(count))


def constrained(lengths: list[int], phrases: list[Phrases], prefixes: list[list[int]] | None = None):
    req = request(lengths)
    req.constraints = phrases
    req.prefixes = prefixes
    return req


@pytest.mark.parametrize("seed", range(12))
def test_every_output_holds_every_phrase_in_beam_and_greedy_search(seed):
    g = torch.Generator().manual_seed(seed)
    model = TableModel(torch.randn(30, VOCAB, VOCAB, generator=g) * 3)
    lengths = [int(n) for n in torch.randint(1, 6, (4,), generator=g)]
    phrases = [Phrases(include=random_phrases(g, int(torch.randint(1, 3, (1,), generator=g)), 3)) for _ in lengths]
    req = constrained(lengths, phrases)
    beam = beam_search(model, req, BeamSettings(beam=4, alpha=1.0, nbest=3, max_len_a=1.0, max_len_b=2))
    greedy = greedy_search(model, req, SearchSettings(max_len_a=1.0, max_len_b=2))
    for given, hyps, (best,) in zip(phrases, beam, greedy):
        assert hyps, "a source without an output"
        for hyp in [*hyps, best]:
            assert all(contains(hyp.tokens, p) for p in given.include), (hyp.tokens, given)


def test_the_limit_makes_room_for_the_phrases():
    g = torch.Generator().manual_seed(3)
    model = TableModel(torch.randn(30, VOCAB, VOCAB, generator=g) * 3)
    phrases = [Phrases(include=((5, 6, 7), (8, 9)))]
    # max_len_b = 1 leaves no room for five phrase tokens: the limit is raised to hold them, as for a prefix
    out = beam_search(model, constrained([1], phrases), BeamSettings(beam=3, max_len_a=0.0, max_len_b=1))
    tokens = out[0][0].tokens
    assert contains(tokens, (5, 6, 7)) and contains(tokens, (8, 9)) and len(tokens) == 5


def test_no_output_holds_a_forbidden_phrase_and_a_forbidden_word_never_comes_out():
    g = torch.Generator().manual_seed(1)
    table = torch.randn(30, VOCAB, VOCAB, generator=g)
    table[:, :, 5] += 6  # 5 is what the model wants most, and 6 after it
    table[:, 5, 6] += 6
    model = TableModel(table)
    free = beam_search(model, request([4]), BeamSettings(beam=4, nbest=4, max_len_a=1.0, max_len_b=3))
    assert any(contains(h.tokens, (5, 6)) for h in free[0])
    banned = [Phrases(exclude=((5, 6), (7,)))]
    for out in (beam_search(model, constrained([4], banned), BeamSettings(beam=4, nbest=4, max_len_a=1.0,
                                                                             max_len_b=3)),
                greedy_search(model, constrained([4], banned), SearchSettings(max_len_a=1.0, max_len_b=3))):
        for hyp in out[0]:
            assert not contains(hyp.tokens, (5, 6)) and 7 not in hyp.tokens
    # the phrase as a whole: 5 alone still comes out
    assert any(5 in h.tokens for h in beam_search(model, constrained([4], banned),
                                                   BeamSettings(beam=4, nbest=4, max_len_a=1.0, max_len_b=3))[0])


def test_no_phrases_and_empty_phrases_change_nothing():
    g = torch.Generator().manual_seed(7)
    model = TableModel(torch.randn(30, VOCAB, VOCAB, generator=g) * 3)
    settings = BeamSettings(beam=4, alpha=0.6, nbest=2, max_len_a=1.0, max_len_b=3)
    plain = beam_search(model, request([3, 5]), settings)
    empty = beam_search(model, constrained([3, 5], [Phrases(), Phrases()]), settings)
    assert [[(h.tokens, h.score, h.logprob) for h in hyps] for hyps in plain] == \
        [[(h.tokens, h.score, h.logprob) for h in hyps] for hyps in empty]


def test_phrases_with_a_prefix_and_n_best():
    g = torch.Generator().manual_seed(11)
    model = TableModel(torch.randn(30, VOCAB, VOCAB, generator=g) * 3)
    phrases = [Phrases(include=((9, 10),)), Phrases(include=((4,), (11, 5)))]
    req = constrained([3, 4], phrases, prefixes=[[6, 9], [7]])
    out = beam_search(model, req, BeamSettings(beam=5, nbest=3, max_len_a=1.0, max_len_b=3))
    for given, prefix, hyps in zip(phrases, [[6, 9], [7]], out):
        assert len(hyps) == 3
        for hyp in hyps:
            assert hyp.tokens[: len(prefix)] == prefix
            assert all(contains(hyp.tokens, p) for p in given.include)


def test_a_phrase_is_found_where_it_overlaps_a_false_start():
    state = PhraseConstraint([Phrases(include=((5, 5, 6),))])
    req = request([3])
    state.start(req, torch.tensor([0]))
    for token in (5, 5, 5, 6):  # "5 5 6" ends here, after a false start at the first 5
        state.advance(torch.tensor([0]), torch.tensor([token]))
    assert bool(state.all_met()[0])


def test_the_beam_is_shared_out_over_banks():
    # six candidates: banks 0, 0, 0, 1, 1, 2 with falling scores; a beam of 3 takes the best of each bank
    scores = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]])
    banks = torch.tensor([[0, 0, 0, 1, 1, 2]])
    assert sorted(select(scores, banks, 3)[0].tolist()) == [0, 3, 5]
    # a bank without candidates gives its share to the others; -inf candidates are never taken first
    scores = torch.tensor([[-1.0, -2.0, float("-inf"), -4.0]])
    banks = torch.tensor([[0, 0, 1, 0]])
    assert select(scores, banks, 3)[0].tolist() == [0, 1, 3]
