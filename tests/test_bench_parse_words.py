"""bench/parse_words.py: the (word, tag) pairs it compares and how it tells known words from unknown ones."""

from __future__ import annotations

from tests.bench_scripts import load_bench

parse_words = load_bench("parse_words.py")


class ClassTokenizer:
    """Knows 'the' and 'cat'; any other word becomes <unk-lc>."""

    entries = ["<pad>", "<s>", "</s>", "<unk>", "the", "cat", "<unk-lc>"]

    def encode(self, text):
        return [self.entries.index(w) if w in self.entries else 6 for w in text.split()]

    def id_to_token(self, index):
        return self.entries[index]


def test_the_tagged_words_leave_out_empty_elements():
    gold = "(S (NP-SBJ (-NONE- *)) (NP (DT the) (NN cat)) (VP (VBD sat)) (. .))"
    assert parse_words.tagged(gold) == [("the", "DT"), ("cat", "NN"), ("sat", "VBD"), (".", ".")]


def test_a_word_the_tokenizer_writes_as_a_class_is_unknown():
    assert parse_words.word_status(ClassTokenizer(), "the cat purred") == ["known", "known", "unknown"]


def test_the_baseline_tags_each_word_with_its_most_frequent_training_tag():
    class Example:
        def __init__(self, ref):
            self.ref = ref

    trees = ["(S (NP (DT the) (NN saw)) (VP (VBD saw)))", "(S (VP (VBD saw) (NP (DT the) (NN cat))))"]
    assert parse_words.most_frequent_tags([Example(t) for t in trees]) == {"the": "DT", "saw": "VBD", "cat": "NN"}
