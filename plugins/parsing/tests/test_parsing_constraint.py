"""The tree constraint: its mask step by step, and beam search under it with a model of random log-probs."""

from __future__ import annotations

import math

import pytest
import torch
from seqxduce_parsing import build_tree_beam
from seqxduce_parsing.constraint import TreeConstraint
from seqxduce_parsing.linearize import delinearize
from seqxduce_parsing.settings import TreeBeamSettings

from seqxduce.api import DecodeRequest, UserError
from seqxduce.decoding.search import beam_search, greedy_search
from seqxduce.decoding.search_settings import BeamSettings, SearchSettings
from seqxduce.testing import HostReads, ListTokenizer, RandomModel

VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "XX", "(S", ")S", "(NP", ")NP", "(VP", ")VP", "(PP"]


class ScriptedModel(RandomModel):
    """Prefers one scripted token per step (then eos), so greedy search follows the script where allowed."""

    def __init__(self, tokenizer: ListTokenizer, script: str):
        super().__init__(tokenizer.vocab_size, seed=0)
        self.script = [tokenizer.tokens.index(t) for t in script.split()] + [tokenizer.eos_id]
        self.t = 0

    def step(self, tokens, memory, cache):
        logits = torch.zeros(tokens.size(0), self.vocab_size)
        logits[:, self.script[min(self.t, len(self.script) - 1)]] = 10.0
        self.t += 1
        return logits.log_softmax(dim=-1), None


def request_for(sources: list[str]) -> DecodeRequest:
    longest = max(len(s.split()) for s in sources) + 1
    src = torch.zeros(len(sources), longest, dtype=torch.long)
    for i, s in enumerate(sources):
        src[i, : len(s.split()) + 1] = 5  # any non-pad id; the length is what counts
    return DecodeRequest(src=src, sources=sources, bos_id=1, eos_id=2, pad_id=0)


def allowed_tokens(constraint: TreeConstraint, row: int = 0) -> set[str]:
    mask = constraint.mask(torch.zeros(constraint.need.numel(), len(VOCAB)))
    return {VOCAB[i] for i in torch.isfinite(mask[row]).nonzero().flatten().tolist()}


def feed(constraint: TreeConstraint, sequence: str) -> None:
    for token in sequence.split():
        ids = torch.tensor([VOCAB.index(token)] * constraint.need.numel())
        constraint.advance(torch.arange(constraint.need.numel()), ids)


@pytest.fixture
def constraint() -> TreeConstraint:
    c = TreeConstraint(ListTokenizer(VOCAB))
    c.start(request_for(["John left"]), torch.tensor([0]))
    return c


def test_a_tree_starts_with_an_opening_bracket_that_can_be_closed(constraint):
    # (PP has no )PP in the vocabulary; specials and <unk> are never allowed
    assert allowed_tokens(constraint) == {"(S", "(NP", "(VP"}


def test_an_empty_constituent_cannot_close(constraint):
    feed(constraint, "(S")
    assert allowed_tokens(constraint) == {"XX", "(S", "(NP", "(VP"}


def test_a_closing_label_must_match_and_the_root_waits_for_every_word(constraint):
    feed(constraint, "(S (NP XX")
    assert allowed_tokens(constraint) == {"XX", "(S", "(NP", "(VP", ")NP"}
    feed(constraint, ")NP")
    assert allowed_tokens(constraint) == {"XX", "(S", "(NP", "(VP"}  # )S would leave "left" out


def test_no_more_leaves_than_words_and_eos_only_after_the_root(constraint):
    feed(constraint, "(S (NP XX )NP (VP XX")
    assert allowed_tokens(constraint) == {")VP"}
    feed(constraint, ")VP")
    assert allowed_tokens(constraint) == {")S"}
    feed(constraint, ")S")
    assert allowed_tokens(constraint) == {"</s>"}


def test_rows_follow_their_origin_when_the_search_reorders(constraint):
    c = TreeConstraint(ListTokenizer(VOCAB))
    c.start(request_for(["a", "b c d"]), torch.tensor([0, 0, 1, 1]))
    feed(c, "(S")
    # row 1 continues row 3 (source "b c d") with XX; row 0 continues row 0 with )S
    c.advance(torch.tensor([0, 3, 2, 2]), torch.tensor([VOCAB.index("XX")] * 4))
    c.advance(torch.tensor([0, 1, 2, 3]), torch.tensor([VOCAB.index(")S"), VOCAB.index("XX"), 4, 4]))
    assert c.placed.tolist() == [1, 2, 2, 2] and c.need.tolist() == [1, 3, 3, 3]
    assert allowed_tokens(c, 0) == {"</s>"}
    assert ")S" not in allowed_tokens(c, 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_under_the_constraint_only_writes_well_formed_trees(seed):
    tokenizer = ListTokenizer(VOCAB)
    sources = ["a", "a b", "a b c", "a b c d e f", "a b c d", "a b c d e f g h i"]
    request = request_for(sources)
    constraint = TreeConstraint(tokenizer, max_len_a=1.0, max_len_b=12)
    hyps = beam_search(RandomModel(len(VOCAB), seed), request,
                       BeamSettings(beam=4, alpha=0.3, max_len_a=1.0, max_len_b=12, nbest=4), constraint=constraint)
    for source, nbest in zip(sources, hyps):
        assert len(nbest) == 4
        for hyp in nbest:
            result = delinearize(tokenizer.decode(hyp.tokens), source.split())
            assert result.repairs == 0, tokenizer.decode(hyp.tokens)
            assert result.tree.leaves() == source.split()
            assert hyp.score > float("-inf")


def test_the_length_limit_leaves_room_to_finish_the_tree():
    tokenizer = ListTokenizer(VOCAB)
    # 3 leaves + one bracket pair is all the limit (0 * length + 5) allows: only the flat tree fits
    constraint = TreeConstraint(tokenizer, max_len_a=0.0, max_len_b=5)
    hyps = greedy_search(RandomModel(len(VOCAB), 3), request_for(["a b c"]), SearchSettings(max_len_a=0.0, max_len_b=5),
                         constraint=constraint)
    assert tokenizer.decode(hyps[0][0].tokens) in {"(S XX XX XX )S", "(NP XX XX XX )NP", "(VP XX XX XX )VP"}


def test_without_the_constraint_the_same_model_writes_broken_trees():
    tokenizer = ListTokenizer(VOCAB)
    sources = ["a", "a b", "a b c", "a b c d e f"]
    hyps = beam_search(RandomModel(len(VOCAB), 0), request_for(sources), BeamSettings(beam=4, alpha=0.3, max_len_b=40))
    repairs = [delinearize(tokenizer.decode(h[0].tokens), s.split()).repairs for s, h in zip(sources, hyps)]
    assert sum(repairs) > 0


def test_greedy_search_follows_a_deep_script_exactly():
    tokenizer = ListTokenizer(VOCAB)
    script = "(S " + "(NP " * 20 + "XX " + ")NP " * 20 + ")S"
    c = TreeConstraint(tokenizer)
    hyps = greedy_search(ScriptedModel(tokenizer, script), request_for(["word"]), SearchSettings(max_len_b=60),
                         constraint=c)
    assert tokenizer.decode(hyps[0][0].tokens) == script  # 21 open brackets: the stack grew past 16
    assert c.stack.size(1) >= 21


def test_greedy_search_is_kept_from_a_scripted_mistake():
    tokenizer = ListTokenizer(VOCAB)
    hyps = greedy_search(ScriptedModel(tokenizer, "(S XX )NP )S"), request_for(["word"]), SearchSettings(max_len_b=20),
                         constraint=TreeConstraint(tokenizer))
    text = tokenizer.decode(hyps[0][0].tokens)
    assert text.startswith("(S XX") and ")NP" not in text.split()
    assert delinearize(text, ["word"]).repairs == 0


def test_leaf_tokens_restrict_the_leaves():
    vocab = VOCAB + ["NN"]
    c = TreeConstraint(ListTokenizer(vocab), leaf_tokens=["XX"])
    c.start(request_for(["a b"]), torch.tensor([0]))
    c.advance(torch.tensor([0]), torch.tensor([vocab.index("(S")]))
    allowed = torch.isfinite(c.mask(torch.zeros(1, len(vocab))))[0]
    assert bool(allowed[vocab.index("XX")]) and not bool(allowed[vocab.index("NN")])


def test_a_vocabulary_without_brackets_is_a_user_error():
    with pytest.raises(UserError, match="tree_beam"):
        TreeConstraint(ListTokenizer(["<pad>", "<s>", "</s>", "<unk>", "the", "cat"]))


def test_the_tree_beam_decoder_plugin():
    tokenizer = ListTokenizer(VOCAB)
    decoder = build_tree_beam(TreeBeamSettings(beam=3, max_len_b=10), tokenizer)
    sources = ["a b c", "a"]
    hyps = decoder.decode(RandomModel(len(VOCAB), 5), request_for(sources))
    for source, nbest in zip(sources, hyps):
        assert len(nbest) == 1
        result = delinearize(tokenizer.decode(nbest[0].tokens), source.split())
        assert result.repairs == 0 and len(result.tree.leaves()) == len(source.split())


WORD_VOCAB = VOCAB + ["NN", "John", "left"]


def allowed_in(constraint: TreeConstraint, vocab: list[str], row: int = 0) -> dict[str, float]:
    """Allowed tokens of a row with the score the mask gives them (input: all log-probs -1)."""
    mask = constraint.mask(torch.full((constraint.need.numel(), len(vocab)), -1.0))
    return {vocab[i]: float(mask[row, i]) for i in torch.isfinite(mask[row]).nonzero().flatten().tolist()}


def feed_words(constraint: TreeConstraint, vocab: list[str], sequence: str) -> None:
    for token in sequence.split():
        constraint.advance(torch.arange(constraint.need.numel()), torch.tensor([vocab.index(token)]))


def test_after_leaf_forces_each_source_word_after_its_leaf_at_no_cost():
    c = TreeConstraint(ListTokenizer(WORD_VOCAB), words_in_target="after_leaf")
    c.start(request_for(["John left Mary"]), torch.tensor([0]))
    feed_words(c, WORD_VOCAB, "(S NN")
    assert allowed_in(c, WORD_VOCAB) == {"John": 0.0}  # the word is given: its log-prob is not counted
    feed_words(c, WORD_VOCAB, "John")
    assert "John" in allowed_in(c, WORD_VOCAB) and "(NP" in allowed_in(c, WORD_VOCAB)  # a leaf or a bracket again
    feed_words(c, WORD_VOCAB, "XX left NN")
    assert allowed_in(c, WORD_VOCAB) == {"<unk>": 0.0}  # "Mary" is outside the target vocabulary
    feed_words(c, WORD_VOCAB, "<unk>")
    assert set(allowed_in(c, WORD_VOCAB)) == {")S"}


def test_ahead_forces_the_first_word_first_and_each_next_word_after_a_leaf_at_no_cost():
    c = TreeConstraint(ListTokenizer(WORD_VOCAB), words_in_target="ahead")
    c.start(request_for(["John left Mary"]), torch.tensor([0]))
    assert allowed_in(c, WORD_VOCAB) == {"John": 0.0}  # the first word comes before the tree
    feed_words(c, WORD_VOCAB, "John")
    assert set(allowed_in(c, WORD_VOCAB)) == {"(S", "(NP", "(VP"}
    feed_words(c, WORD_VOCAB, "(S NN")
    assert allowed_in(c, WORD_VOCAB) == {"left": 0.0}  # the next word, given
    feed_words(c, WORD_VOCAB, "left XX")
    assert allowed_in(c, WORD_VOCAB) == {"<unk>": 0.0}  # "Mary" is outside the target vocabulary
    feed_words(c, WORD_VOCAB, "<unk> NN")
    assert set(allowed_in(c, WORD_VOCAB)) == {")S"}  # no word after the last leaf


def test_before_leaf_scores_placing_a_word_then_asks_for_its_tag():
    c = TreeConstraint(ListTokenizer(WORD_VOCAB), words_in_target="before_leaf")
    c.start(request_for(["John left Mary"]), torch.tensor([0]))
    feed_words(c, WORD_VOCAB, "(S")
    allowed = allowed_in(c, WORD_VOCAB)
    # all log-probs are -1: "a word here" gathers the mass of every word-like entry (XX, NN, John, left, <unk>)
    word_like = len(WORD_VOCAB) - 3 - sum(t.startswith(("(", ")")) for t in WORD_VOCAB)
    assert allowed.pop("John") == pytest.approx(-1.0 + math.log(word_like))
    assert set(allowed) == {"(S", "(NP", "(VP"} and set(allowed.values()) == {-1.0}
    feed_words(c, WORD_VOCAB, "John")
    assert set(allowed_in(c, WORD_VOCAB)) == {"XX", "NN", "John", "left"}  # its tag: any leaf entry
    feed_words(c, WORD_VOCAB, "NN")
    assert "left" in allowed_in(c, WORD_VOCAB) and ")S" not in allowed_in(c, WORD_VOCAB)
    feed_words(c, WORD_VOCAB, "left XX")
    assert set(allowed_in(c, WORD_VOCAB)) >= {"<unk>", "(NP"}  # "Mary" is outside the target vocabulary
    feed_words(c, WORD_VOCAB, "<unk> NN")
    assert set(allowed_in(c, WORD_VOCAB)) == {")S"}


def test_before_leaf_gives_a_punctuation_word_its_tag_after_it():
    vocab = PUNCT_VOCAB + ["John"]
    c = TreeConstraint(ListTokenizer(vocab), words_in_target="before_leaf", **PUNCT_RULE)
    c.start(request_for(["John ."]), torch.tensor([0]))
    feed_words(c, vocab, "(S John")
    assert leaves_allowed(c, vocab) == {"XX", "NN", "POS", "John"}
    feed_words(c, vocab, "NN .")
    assert leaves_allowed(c, vocab) == {",", ".", "''"}


def test_as_leaf_makes_the_next_source_word_the_only_leaf():
    c = TreeConstraint(ListTokenizer(WORD_VOCAB), words_in_target="as_leaf")
    c.start(request_for(["John left"]), torch.tensor([0]))
    feed_words(c, WORD_VOCAB, "(S")
    assert set(allowed_in(c, WORD_VOCAB)) == {"John", "(S", "(NP", "(VP"}
    feed_words(c, WORD_VOCAB, "John")
    assert set(allowed_in(c, WORD_VOCAB)) == {"left", "(S", "(NP", "(VP"}
    feed_words(c, WORD_VOCAB, "left")
    assert set(allowed_in(c, WORD_VOCAB)) == {")S"}


@pytest.mark.parametrize("mode", ["after_leaf", "before_leaf", "as_leaf", "ahead"])
def test_beam_search_with_words_in_target_writes_the_source_words(mode):
    tokenizer = ListTokenizer(WORD_VOCAB)
    sources = ["John", "John left", "left John Mary left", "Mary John left John left"]
    constraint = TreeConstraint(tokenizer, max_len_a=1.0, max_len_b=16, words_in_target=mode)
    hyps = beam_search(RandomModel(len(WORD_VOCAB), 4), request_for(sources),
                       BeamSettings(beam=4, alpha=0.3, max_len_a=1.0, max_len_b=16, nbest=4), constraint=constraint)
    for source, nbest in zip(sources, hyps):
        for hyp in nbest:
            tokens = [WORD_VOCAB[i] for i in hyp.tokens if i != tokenizer.eos_id]
            leaves = [t for t in tokens if not t.startswith(("(", ")"))]
            # leaves and words alternate (a word may also have been chosen as a leaf)
            written = {"after_leaf": leaves[1::2], "before_leaf": leaves[0::2], "ahead": leaves[0::2]}.get(mode, leaves)
            assert written == [w if w in WORD_VOCAB else "<unk>" for w in source.split()], tokens
            result = delinearize(" ".join(tokens), source.split(), mode)
            assert result.repairs == 0 and result.tree.leaves() == source.split(), tokens


def test_words_in_target_needs_one_target_token_per_word():
    class CharListTokenizer(ListTokenizer):
        def encode(self, text: str) -> list[int]:
            return [self.unk_id] * len(text)

    c = TreeConstraint(CharListTokenizer(WORD_VOCAB), words_in_target="after_leaf")
    with pytest.raises(UserError, match="words_in_target.*one target token per source word"):
        c.start(request_for(["John left"]), torch.tensor([0]))


PUNCT_VOCAB = VOCAB + ["NN", ",", ".", "POS", "''"]
PUNCT_RULE = {"punctuation_tags": ["``", "''", ".", ":", ","], "punctuation_words": [",", "."],
              "either_words": ["'"]}


def leaves_allowed(constraint: TreeConstraint, vocab: list[str], row: int = 0) -> set[str]:
    return {t for t in allowed_in(constraint, vocab, row) if not t.startswith(("(", ")")) and t != "</s>"}


def test_punctuation_words_take_punctuation_tags_and_other_words_none():
    c = TreeConstraint(ListTokenizer(PUNCT_VOCAB), **PUNCT_RULE)
    c.start(request_for(["John , left ' left"]), torch.tensor([0]))
    feed_words(c, PUNCT_VOCAB, "(S")
    assert leaves_allowed(c, PUNCT_VOCAB) == {"XX", "NN", "POS"}  # "John"
    feed_words(c, PUNCT_VOCAB, "NN")
    assert leaves_allowed(c, PUNCT_VOCAB) == {",", ".", "''"}  # ","
    feed_words(c, PUNCT_VOCAB, ", NN")
    assert leaves_allowed(c, PUNCT_VOCAB) == {"XX", "NN", ",", ".", "POS", "''"}  # "'" may be either
    feed_words(c, PUNCT_VOCAB, "POS")
    assert leaves_allowed(c, PUNCT_VOCAB) == {"XX", "NN", "POS"}  # "left"


def test_a_free_word_right_after_punctuation_takes_a_punctuation_tag():
    c = TreeConstraint(ListTokenizer(PUNCT_VOCAB), **PUNCT_RULE)
    c.start(request_for(["John . '", "John '"]), torch.tensor([0, 1]))
    for token in "(S NN".split():
        c.advance(torch.arange(2), torch.tensor([PUNCT_VOCAB.index(token)] * 2))
    assert leaves_allowed(c, PUNCT_VOCAB, row=1) == {"XX", "NN", ",", ".", "POS", "''"}  # "John '": either
    c.advance(torch.arange(2), torch.tensor([PUNCT_VOCAB.index(".")] * 2))
    assert leaves_allowed(c, PUNCT_VOCAB, row=0) == {",", ".", "''"}  # ". '": a closing quote


def test_the_punctuation_rule_reads_the_next_word_after_each_written_word():
    vocab = PUNCT_VOCAB + ["John"]
    c = TreeConstraint(ListTokenizer(vocab), words_in_target="after_leaf", **PUNCT_RULE)
    c.start(request_for(["John ."]), torch.tensor([0]))
    feed_words(c, vocab, "(S NN John")
    assert leaves_allowed(c, vocab) == {",", ".", "''"}


def test_without_punctuation_tags_among_the_leaves_the_rule_is_off():
    c = TreeConstraint(ListTokenizer(VOCAB), **PUNCT_RULE)  # XX leaves only: "," must still get a leaf
    c.start(request_for(["John ,"]), torch.tensor([0]))
    feed_words(c, VOCAB, "(S XX")
    assert leaves_allowed(c, VOCAB) == {"XX"}


def test_beam_search_keeps_the_sentences_punctuation():
    tokenizer = ListTokenizer(PUNCT_VOCAB)
    sources = ["a , b .", ". a", "a b , , c"]
    constraint = TreeConstraint(tokenizer, max_len_a=1.0, max_len_b=16, **PUNCT_RULE)
    hyps = beam_search(RandomModel(len(PUNCT_VOCAB), 7), request_for(sources),
                       BeamSettings(beam=4, alpha=0.3, max_len_a=1.0, max_len_b=16, nbest=4), constraint=constraint)
    for source, nbest in zip(sources, hyps):
        for hyp in nbest:
            tokens = [PUNCT_VOCAB[i] for i in hyp.tokens if i != tokenizer.eos_id]
            leaves = [t for t in tokens if not t.startswith(("(", ")"))]
            assert [t in {",", ".", "''"} for t in leaves] == [w in {",", "."} for w in source.split()], tokens


class CountingModel(RandomModel):
    steps = 0

    def step(self, tokens, memory, cache):
        self.steps += 1
        return super().step(tokens, memory, cache)


@pytest.mark.parametrize("mode", ["none", "after_leaf"])
def test_beam_search_under_the_constraint_reads_the_device_at_most_once_per_step(mode):
    """The constraint adds no host read of its own to the search's one per step (a GPU would wait at each)."""
    sources = ["John", "John left", "left John Mary left John left"]
    constraint = TreeConstraint(ListTokenizer(WORD_VOCAB), max_len_a=1.0, max_len_b=16, words_in_target=mode)
    model = CountingModel(len(WORD_VOCAB), 1)
    with HostReads() as reads:
        beam_search(model, request_for(sources), BeamSettings(beam=4, alpha=0.3, max_len_a=1.0, max_len_b=16),
                    constraint=constraint)
    assert len(reads.seen) <= model.steps, reads.seen


TAGGED_VOCAB = VOCAB + ["NN", "VBD", "John", "left"]


@pytest.mark.parametrize("mode", ["after_leaf", "before_leaf", "ahead"])
def test_with_the_words_in_the_target_the_decoder_writes_no_word_as_a_tag(mode):
    """The target vocabulary holds words and tags alike: the decoder's leaves are the treebank's tags (and XX)."""
    tokenizer = ListTokenizer(TAGGED_VOCAB)
    sources = ["John", "John left", "left John left", "left left John John left"]
    decoder = build_tree_beam(TreeBeamSettings(beam=4, nbest=4, max_len_a=1.0, max_len_b=16,
                                               words_in_target=mode), tokenizer)
    hyps = decoder.decode(RandomModel(len(TAGGED_VOCAB), 7), request_for(sources))
    for source, nbest in zip(sources, hyps):
        assert len(nbest) == 4
        for hyp in nbest:
            tokens = [TAGGED_VOCAB[i] for i in hyp.tokens if i != tokenizer.eos_id]
            leaves = [t for t in tokens if not t.startswith(("(", ")"))]
            words, tags = (leaves[1::2], leaves[0::2]) if mode == "after_leaf" else (leaves[0::2], leaves[1::2])
            assert words == source.split() and set(tags) <= {"NN", "VBD", "XX"}, tokens


def test_leaf_tokens_given_are_the_decoders_leaves_with_the_words_in_the_target():
    decoder = build_tree_beam(TreeBeamSettings(words_in_target="ahead", leaf_tokens=["VBD"]),
                              ListTokenizer(TAGGED_VOCAB))
    decoder.constraint.start(request_for(["John left"]), torch.tensor([0]))
    feed_words(decoder.constraint, TAGGED_VOCAB, "John (S")
    assert leaves_allowed(decoder.constraint, TAGGED_VOCAB) == {"VBD"}
