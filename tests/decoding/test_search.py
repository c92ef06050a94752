"""The searches and their settings, on a fake model whose next-token distribution is a fixed table."""

import itertools
import math

import pytest
import torch

from seqxduce.decoding.search import BeamDecoder, GreedyDecoder, beam_search, greedy_search, length_penalty
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.errors import UserError
from seqxduce.registry import registry
from seqxduce.testing import BOS, EOS, HostReads, TableModel
from seqxduce.testing import table_request as request

A, B = 3, 4


def trap_model():
    """Greedy takes A (0.6) and then never ends well; the best sequence is B eos (0.4 * 0.95)."""
    probs = torch.full((1, 5, 5), 1e-9)
    probs[0, BOS, A], probs[0, BOS, B] = 0.6, 0.4
    probs[0, A, A], probs[0, A, EOS], probs[0, A, B] = 0.5, 0.45, 0.05
    probs[0, B, EOS], probs[0, B, A] = 0.95, 0.05
    return TableModel(probs.log())


def test_beam_finds_what_greedy_misses():
    model = trap_model()
    greedy = greedy_search(model, request([3]), SearchSettings(max_len_a=0, max_len_b=6))[0][0]
    beam = beam_search(model, request([3]), BeamSettings(beam=2, alpha=0.0, max_len_a=0, max_len_b=6))[0][0]
    assert greedy.tokens == [A] * 6  # stopped only by the length limit
    assert beam.tokens == [B]
    assert beam.logprob == pytest.approx(math.log(0.4) + math.log(0.95), abs=1e-5)
    assert beam.logprob > greedy.logprob


def test_beam_size_one_equals_greedy_on_random_tables():
    torch.manual_seed(0)
    for _ in range(5):
        model = TableModel(torch.randn(12, 9, 9) * 3)
        req = request([3, 5, 1, 7])
        greedy = greedy_search(model, req, SearchSettings(max_len_a=1.0, max_len_b=3))
        beam = beam_search(model, req, BeamSettings(beam=1, alpha=0.0, max_len_a=1.0, max_len_b=3))
        assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam]
        for g, b in zip(greedy, beam):
            assert g[0].logprob == pytest.approx(b[0].logprob, abs=1e-4)


def test_length_limit_and_forced_eos():
    probs = torch.full((1, 5, 5), 1e-9)
    probs[0, :, A] = 1.0  # eos is never wanted
    model = TableModel(probs.log())
    out = beam_search(model, request([2, 4]), BeamSettings(beam=3, alpha=0.6, max_len_a=2.0, max_len_b=1))
    assert [len(o[0].tokens) for o in out] == [5, 9]
    # the eos that encoding appends to a source does not count as input length
    with_eos = request([3, 5])
    with_eos.src[0, 2] = with_eos.src[1, 4] = EOS
    out = beam_search(model, with_eos, BeamSettings(beam=3, alpha=0.6, max_len_a=2.0, max_len_b=1))
    assert [len(o[0].tokens) for o in out] == [5, 9]


def test_length_penalty_and_nbest_order():
    model = trap_model()
    hyps = beam_search(model, request([3]), BeamSettings(beam=3, alpha=0.6, max_len_a=0, max_len_b=6, nbest=3))[0]
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
    settings = BeamSettings(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2, nbest=2)
    together = beam_search(model, request(lengths), settings)
    for i, n in enumerate(lengths):
        alone = beam_search(model, request([n]), settings)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]


def exhaustive_best(model: TableModel, limit: int, alpha: float):
    """Every output over {A, B} of at most `limit` tokens followed by eos, scored as the search scores it."""
    best_tokens, best_score = None, float("-inf")
    for n in range(limit + 1):
        for tokens in itertools.product((A, B), repeat=n):
            seq = (BOS, *tokens, EOS)
            logprob = sum(float(model.table[min(i, model.table.size(0) - 1), seq[i], seq[i + 1]])
                          for i in range(len(seq) - 1))
            score = logprob / length_penalty(n + 1, alpha)
            if score > best_score:
                best_tokens, best_score = list(tokens), score
    return best_tokens, best_score


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_beam_as_wide_as_the_search_space_is_exhaustive(alpha):
    """With a beam wider than every candidate of every step, beam search is exhaustive search."""
    limit = 4
    torch.manual_seed(3)
    for _ in range(20):
        model = TableModel(torch.randn(limit + 1, 5, 5) * 2)
        wide = BeamSettings(beam=3 * 2 ** limit, alpha=alpha, max_len_a=0, max_len_b=limit)
        got = beam_search(model, request([1]), wide)[0][0]
        tokens, score = exhaustive_best(model, limit, alpha)
        assert got.tokens == tokens
        assert got.score == pytest.approx(score, abs=1e-5)


def late_winner_model():
    """Two short outputs finish first; the best under the length penalty is the longer B B B."""
    probs = torch.full((4, 5, 5), 1e-9)
    probs[0, BOS, EOS], probs[0, BOS, A], probs[0, BOS, B] = 0.35, 0.35, 0.3
    probs[1, A, EOS], probs[1, A, A] = 0.9, 0.1
    probs[1, B, B] = probs[2, B, B] = probs[3, B, EOS] = 1.0
    return TableModel(probs.log())


def test_source_stays_in_the_search_while_a_live_hypothesis_can_win():
    """Regression: a source used to leave the search as soon as it had `beam` finished hypotheses."""
    model = late_winner_model()
    best = beam_search(model, request([1]), BeamSettings(beam=2, alpha=1.0, max_len_a=0, max_len_b=6))[0][0]
    assert best.tokens == [B, B, B]
    assert best.score == pytest.approx(math.log(0.3) / length_penalty(4, 1.0), abs=1e-5)
    # fairseq's early stop, kept as an explicit setting, returns the short output
    fairseq = BeamSettings(beam=2, alpha=1.0, max_len_a=0, max_len_b=6, early_stop=True)
    early = beam_search(model, request([1]), fairseq)[0][0]
    assert early.tokens == [A]
    assert early.score < best.score


def settled_early_model():
    """eos B ends first (0.5), then A eos (0.3 * 0.9); the live B B (0.2) ends as B B B eos, the best under
    length^1: log 0.2 / 4 against log 0.27 / 2."""
    probs = torch.full((4, 5, 5), 1e-9)
    probs[0, BOS, EOS], probs[0, BOS, A], probs[0, BOS, B] = 0.5, 0.3, 0.2
    probs[1, A, EOS], probs[1, A, A] = 0.9, 0.1
    probs[1, B, B] = probs[2, B, B] = probs[3, B, EOS] = 1.0
    return TableModel(probs.log())


def _stopping(model, rule, **settings):
    values = dict(beam=2, alpha=1.0, length_penalty="power", max_len_a=0, max_len_b=6) | settings
    return beam_search(model, request([1]), BeamSettings(early_stopping=rule, **values))[0][0]


def test_the_three_stopping_rules_of_hugging_face():
    """Hugging Face generate's early_stopping, each on a case the others decide otherwise. After step 2 both
    tables have two finished hypotheses (beam 2) and a live B B. On settled_early_model the live one scored at
    its length 2 (log 0.2 / 2 = -0.80) does not beat the worst finished (log 0.5 / 1 = -0.69): false stops
    there, with A, as true does; "never" sees that B B may still reach length 4 and finds B B B. On
    late_winner_model, B B at length 2 (log 0.3 / 2 = -0.60) beats the worst finished (log 0.35 / 1 = -1.05):
    false goes on to B B B, true stops with A."""
    settled, late = settled_early_model(), late_winner_model()
    assert _stopping(settled, True).tokens == _stopping(settled, False).tokens == [A]
    assert _stopping(settled, "never").tokens == [B, B, B]
    assert _stopping(late, True).tokens == [A]
    assert _stopping(late, False).tokens == _stopping(late, "never").tokens == [B, B, B]
    assert _stopping(settled, "never").score == pytest.approx(math.log(0.2) / 4, abs=1e-5)
    assert _stopping(settled, False).score == pytest.approx(math.log(0.3 * 0.9) / 2, abs=1e-5)
    # the default is the exact search, and early_stop = true is early_stopping = true whatever that says
    assert BeamSettings().early_stopping == "never" and BeamSettings().stopping_rule() == "never"
    assert _stopping(late, False, early_stop=True).tokens == [A]
    # an ensemble is a model like any other to the search: one of the model with itself decides alike
    from seqxduce.decoding.ensemble import EnsembleModel

    twice = EnsembleModel([settled, settled])
    assert (_stopping(twice, False).tokens, _stopping(twice, "never").tokens) == ([A], [B, B, B])
    # n-best: the two finished when false stops, best first
    assert [h.tokens for h in beam_search(settled, request([1]), BeamSettings(
        beam=2, nbest=2, alpha=1.0, length_penalty="power", max_len_a=0, max_len_b=6,
        early_stopping=False))[0]] == [[A], []]


def test_false_scores_a_live_hypothesis_at_its_length_after_the_prefix():
    """With a target prefix the heuristic's length counts the tokens after it, as the finished scores do:
    settled_early_model one step later, behind the prefix B (forced at step 0; the first free step reads the
    old first step's row), gives the same outcomes; counting the prefix in the length, false would go on."""
    model = settled_early_model()
    shifted = TableModel(torch.cat([model.table[:1], model.table]))  # already log-probs: log_softmax keeps them
    shifted.table[1, B] = model.table[0, BOS]
    req = request([1])
    req.prefixes = [[B]]
    settings = dict(beam=2, alpha=1.0, length_penalty="power", max_len_a=0, max_len_b=7)
    false = beam_search(shifted, req, BeamSettings(early_stopping=False, **settings))[0][0]
    never = beam_search(shifted, req, BeamSettings(early_stopping="never", **settings))[0][0]
    assert (false.tokens, never.tokens) == ([B, A], [B, B, B, B])


def test_early_stopping_takes_true_false_and_never_only():
    from seqxduce.settings_check import make_settings

    made = make_settings(BeamSettings, {"early_stopping": False}, "decode", "x.toml",
                         overridden={"early_stopping": "false"})
    assert made.early_stopping is False
    assert make_settings(BeamSettings, {"early_stopping": "never"}, "decode", "x.toml").early_stopping == "never"
    with pytest.raises(UserError, match=r"x.toml: \[decode\] early_stopping = 'sometimes' is not one of False, "
                                        r"True, never"):
        make_settings(BeamSettings, {"early_stopping": "sometimes"}, "decode", "x.toml")


def test_nbest_is_sorted_and_distinct_on_random_tables():
    torch.manual_seed(4)
    for _ in range(10):
        model = TableModel(torch.randn(8, 7, 7) * 2)
        settings = BeamSettings(beam=5, alpha=0.6, max_len_a=1.0, max_len_b=3, nbest=5)
        for hyps in beam_search(model, request([3, 1, 5]), settings):
            assert len(hyps) == 5
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
            assert len({tuple(h.tokens) for h in hyps}) == len(hyps)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_wider_beams_never_score_lower_on_random_tables(alpha):
    """The n-best of a wider beam is the best of more finished hypotheses, so its best never falls below a
    narrower beam's on these tables (where greedy is beam 1)."""
    torch.manual_seed(5)
    for _ in range(10):
        model = TableModel(torch.randn(10, 7, 7) * 2)
        req = request([2, 4, 6])
        narrow = beam_search(model, req, BeamSettings(beam=1, alpha=alpha, max_len_a=1.0, max_len_b=2))
        wide = beam_search(model, req, BeamSettings(beam=4 ** 3, alpha=alpha, max_len_a=1.0, max_len_b=2))
        for n, w in zip(narrow, wide):
            assert w[0].score >= n[0].score - 1e-6


# ---------------------------------------------------------------- the search settings decoder plugins share


def eos_first_model():
    """eos is the most probable token at every step, A the next."""
    probs = torch.full((1, 5, 5), 0.05)
    probs[0, :, EOS], probs[0, :, A] = 0.6, 0.3
    return TableModel(probs.log())


def test_the_greedy_decoder_keeps_min_len_and_the_length_limit():
    model = eos_first_model()
    assert GreedyDecoder(SearchSettings(max_len_a=0, max_len_b=6)).decode(model, request([3]))[0][0].tokens == []
    kept = GreedyDecoder(SearchSettings(max_len_a=0, max_len_b=6, min_len=3)).decode(model, request([3]))[0][0]
    assert kept.tokens == [A, A, A]
    beam = BeamDecoder(BeamSettings(beam=2, max_len_a=0, max_len_b=6, min_len=2)).decode(model, request([3]))[0][0]
    assert beam.tokens == [A, A]


def test_validation_greedy_takes_the_recipe_decoders_length_limits():
    beam = BeamSettings(beam=3, max_len_a=2.0, max_len_b=300, min_len=1)
    assert SearchSettings.lengths_of(beam) == SearchSettings(max_len_a=2.0, max_len_b=300, min_len=1)
    assert SearchSettings.lengths_of(object()) == SearchSettings()


def test_one_default_length_limit_and_every_registered_decoders_settings_are_search_settings():
    registered = {name: registry().get("decoder", name).settings for name in ("greedy", "beam", "tree_beam")}
    assert all(issubclass(cls, SearchSettings) for cls in registered.values())
    assert (SearchSettings().max_len_a, SearchSettings().max_len_b) == (1.0, 50)
    assert (BeamSettings().max_len_a, BeamSettings().max_len_b) == (1.0, 50)


# ---------------------------------------------------------------- host reads: what makes the host wait for a GPU


class CountingTableModel(TableModel):
    """A TableModel that counts its decoder steps."""

    steps = 0

    def step(self, tokens, memory, cache):
        self.steps += 1
        return super().step(tokens, memory, cache)


@pytest.mark.parametrize("settings", [
    BeamSettings(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=3, nbest=2),
    BeamSettings(beam=3, alpha=0.0, max_len_a=1.0, max_len_b=2, early_stop=True, min_len=2),
    BeamSettings(beam=1, alpha=1.0, max_len_a=0.5, max_len_b=4),
    BeamSettings(beam=3, alpha=1.0, max_len_a=1.0, max_len_b=3, nbest=2, early_stopping=False),
])
def test_beam_search_reads_the_device_at_most_once_per_step(settings):
    """The one read per step is whether a source is done (the batch shrinks); finished hypotheses stay on the
    device until the end. Sources of different lengths leave at different steps, so the shrink is exercised."""
    torch.manual_seed(6)
    model = CountingTableModel(torch.randn(12, 9, 9) * 2)
    with HostReads() as reads:
        hyps = beam_search(model, request([3, 5, 1, 7, 2]), settings)
    assert all(hyps) and model.steps > 3
    assert len(reads.seen) <= model.steps, reads.seen


def test_greedy_search_reads_the_device_once_per_step():
    torch.manual_seed(7)
    model = CountingTableModel(torch.randn(12, 9, 9) * 2)
    with HostReads() as reads:
        greedy_search(model, request([3, 5, 1]), SearchSettings(max_len_a=1.0, max_len_b=3))
    assert len(reads.seen) <= model.steps + 1, reads.seen  # whether every row is done, before each step and after
