"""The Python EVALB: the reference output of the original program, and one hand-worked example per rule.

plugins/parsing/tests/test_parsing_evalb_adversarial.py compares it with the original on pairs made to break it."""

from __future__ import annotations

import pytest
from seqxduce_parsing import evalb
from seqxduce_parsing.evalb import ERROR, OK, SKIP
from seqxduce_parsing.evalb_read import Reader, file_lines


def evaluate(gold: str, test: str) -> evalb.Evaluation:
    """One gold and one test line, as files holding them would be read."""
    return evalb.score_lines([gold.encode() + b"\n"], [test.encode() + b"\n"])


def score(gold: str, test: str) -> evalb.SentenceScore:
    return evaluate(gold, test).scores[0]


def counts(s: evalb.SentenceScore) -> tuple[int, ...]:
    """(length, status, match, gold, test, crossing, words, correct tags)."""
    return (s.length, s.status, s.match, s.gold_brackets, s.test_brackets, s.crossing, s.words, s.correct_tags)


def test_reproduces_the_original_evalb_output_byte_for_byte(evalb_reference):
    ev = evalb.score_lines(file_lines((evalb_reference / "gold.mrg").read_bytes()),
                           file_lines((evalb_reference / "test.mrg").read_bytes()))
    ours = evalb.format_report(ev.scores)
    expected = (evalb_reference / "evalb_COLLINS.out").read_text()
    for number, (line, want) in enumerate(zip(ours.splitlines(), expected.splitlines()), start=1):
        assert line == want, f"line {number}"
    assert ours == expected
    assert ev.messages == [] and ev.stop_line is None


def test_identical_trees_score_100():
    tree = "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"
    assert counts(score(tree, tree)) == (4, OK, 3, 3, 3, 0, 3, 3)


def test_top_brackets_are_deleted():
    gold = "(TOP (S (NP (PRP He)) (VP (VBD left))))"
    s = score(gold, "(S (NP (PRP He)) (VP (VBD left)))")
    assert counts(s) == (2, OK, 3, 3, 3, 0, 2, 2)


def test_empty_elements_and_the_brackets_they_leave_empty_are_deleted():
    gold = "(S (NP-SBJ (-NONE- *-1)) (VP (VBD left) (NP (-NONE- *T*))))"
    s = score(gold, "(S (VP (VBD left)))")
    # gold keeps S and VP (NP spans nothing); length does not count the two -NONE- words
    assert counts(s) == (1, OK, 2, 2, 2, 0, 1, 1)


def test_punctuation_is_deleted_by_each_trees_own_tags_before_aligning():
    gold = "(S (NP (PRP He)) (VP (VBD left)) (. .))"
    # a test attaching the period inside VP, or dropping it, still aligns: VP matches
    assert counts(score(gold, "(S (NP (PRP He)) (VP (VBD left) (. .)))")) == (3, OK, 3, 3, 3, 0, 2, 2)
    assert counts(score(gold, "(S (NP (PRP He)) (VP (VBD left)))")) == (3, OK, 3, 3, 3, 0, 2, 2)
    # tagged NN, the period is a test word the gold does not have
    tagged_nn = evaluate(gold, "(S (NP (PRP He)) (VP (VBD left) (NN .)))")
    assert tagged_nn.scores[0].status == ERROR and [str(m) for m in tagged_nn.messages] == ["1 : Length unmatch (2|3)"]


@pytest.mark.parametrize("tag", [",", ":", "``", "''", "."])
def test_each_punctuation_tag_is_deleted(tag):
    gold = f"(S (NP (PRP He)) ({tag} x) (VP (VBD left)))"
    s = score(gold, f"(S (NP (PRP He) ({tag} x)) (VP (VBD left)))")
    assert (s.match, s.gold_brackets, s.words) == (3, 3, 2)


def test_other_symbols_are_not_punctuation():
    gold = "(S (NP ($ $) (CD 5)) (VP (VBD fell)) (-LRB- -LRB-))"
    s = score(gold, "(S (NP ($ $) (CD 5)) (VP (VBD fell) (-LRB- -LRB-)))")
    assert (s.words, s.match, s.gold_brackets) == (4, 2, 3)  # VP spans differ: -LRB- is a word


def test_a_bracket_over_punctuation_only_is_dropped():
    gold = "(S (NP (PRP He)) (PRN (, ,)) (VP (VBD left)))"
    s = score(gold, "(S (NP (PRP He)) (, ,) (VP (VBD left)))")
    assert counts(s) == (3, OK, 3, 3, 3, 0, 2, 2)


@pytest.mark.parametrize("label, compared", [
    (b"NP-SBJ-1", b"NP"), (b"PP=2", b"PP"), (b"S-TPC-1", b"S"), (b"-LRB-", b""), (b"-NONE-", b""),
    (b"ADVP-TMP", b"ADVP"), (b"", b""),
])
def test_bracket_labels_are_cut_at_the_first_dash_or_equals(label, compared):
    assert evalb.cut_label(label) == compared


def test_function_tags_and_indices_do_not_matter():
    gold = "(S (NP-SBJ-1 (PRP He)) (VP (VBD left) (PP-TMP=2 (IN at) (NP (NN noon)))))"
    s = score(gold, "(S (NP (PRP He)) (VP (VBD left) (PP (IN at) (NP (NN noon)))))")
    assert (s.match, s.gold_brackets, s.test_brackets) == (5, 5, 5)


def test_advp_and_prt_are_equal_for_brackets_and_tags():
    gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))"
    s = score(gold, "(S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up))))")
    assert (s.match, s.gold_brackets) == (4, 4)
    assert evalb.same_label(b"PRT", b"ADVP") and not evalb.same_label(b"RP", b"RB")


def test_brackets_match_as_multisets():
    gold = "(S (NP (NP (NN Stocks))) (VP (VBD fell)))"
    one_np = score(gold, "(S (NP (NN Stocks)) (VP (VBD fell)))")
    assert (one_np.match, one_np.gold_brackets, one_np.test_brackets) == (3, 4, 3)
    three_np = score(gold, "(S (NP (NP (NP (NN Stocks)))) (VP (VBD fell)))")
    assert (three_np.match, three_np.gold_brackets, three_np.test_brackets) == (4, 4, 5)


def test_labels_must_match():
    s = score("(S (NP (PRP He)) (VP (VBD left)))", "(S (VP (PRP He)) (NP (VBD left)))")
    assert (s.match, s.recall, s.precision) == (1, pytest.approx(100 / 3), pytest.approx(100 / 3))


def test_crossing_brackets_are_counted_per_test_bracket():
    gold = "(S (NP (DT the) (NN dog)) (VP (VBD ran)))"
    s = score(gold, "(S (DT the) (X (NN dog) (VBD ran)))")
    assert (s.crossing, s.match) == (1, 1)


def test_tagging_accuracy_skips_punctuation():
    s = score("(S (NP (PRP He)) (VP (VBD left)) (. .))", "(S (NP (NN He)) (VP (VBD left)) (. .))")
    assert (s.words, s.correct_tags) == (2, 1)


def test_totals_are_micro_averaged_and_complete_match_counted():
    scores = [
        score("(S (NP (PRP He)) (VP (VBD left)))", "(S (NP (PRP He)) (VP (VBD left)))"),  # 3 / 3
        score("(S (NP (DT The) (NN man)) (VP (VBD saw) (NP (PRP it))))",
              "(S (DT The) (NN man) (VP (VBD saw) (PRP it)))"),  # 2 of 4 gold, 2 test
    ]
    totals = evalb.Totals.of(scores)
    assert (totals.match, totals.gold_brackets, totals.test_brackets) == (5, 7, 5)
    assert totals.recall == pytest.approx(500 / 7)  # not the mean of 100 and 50
    assert totals.precision == pytest.approx(100.0)
    assert totals.complete_match == pytest.approx(50.0)
    assert totals.fmeasure == pytest.approx(2 * 100 * (500 / 7) / (100 + 500 / 7))


def test_a_sentence_with_other_words_is_an_error_left_out_of_the_totals():
    gold = "(S (NP (PRP He)) (VP (VBD left)))"
    other = evaluate(gold, "(S (NP (PRP She)) (VP (VBD left)))")
    error = other.scores[0]
    assert error.status == ERROR and [str(m) for m in other.messages] == ["1 : Words unmatch (He|She)"]
    shorter = evaluate(gold, "(S (NP (PRP He)))")
    too_short = shorter.scores[0]
    assert too_short.status == ERROR and [str(m) for m in shorter.messages] == ["1 : Length unmatch (2|1)"]
    totals = evalb.Totals.of([score(gold, gold), error, too_short])
    assert (totals.sentences, totals.errors, totals.valid, totals.gold_brackets) == (3, 2, 1, 3)
    assert evalb.format_sentence(2, error) == (
        "   2    2    1    0.00   0.00     0      0    0      0      0     0     0.00")


def test_an_empty_unbalanced_or_unreadable_test_line():
    gold = "(S (NP (PRP He)) (VP (VBD left)))"
    assert score(gold, "").status == SKIP
    assert score(gold, "(S (NP (. .)))").status == SKIP  # no words left after deletion, as EVALB skips
    unclosed = score(gold, "(S (NP (PRP He)) (VP (VBD left))")
    # an error found while reading keeps the row's figures (S never closes, so it matches nothing)
    assert counts(unclosed) == (2, ERROR, 2, 3, 3, 0, 2, 2)
    unreadable = evaluate(gold, "(S (NP He) left)")  # the original loops on this line and stops
    assert counts(unreadable.scores[0]) == (2, ERROR, 0, 0, 0, 0, 0, 0)
    assert [str(m) for m in unreadable.messages] == ["1 : Reading sentence"] and unreadable.stop_line == 1


def test_length_for_the_cutoff_counts_gold_words_without_empty_elements():
    words = " ".join(f"(NN w{i})" for i in range(40))
    forty = score(f"(S (NP (-NONE- *)) (NP {words}) (. .))", f"(S (NP {words}) (. .))")
    assert forty.length == 41  # the period counts, the trace does not
    gold = f"(S (NP (-NONE- *)) (NP {words}))"
    exactly_forty = score(gold, f"(S (NP {words}))")
    assert exactly_forty.length == 40
    totals = evalb.Totals.of([forty, exactly_forty], cutoff=40)
    assert totals.sentences == 1


def test_report_layout_of_the_summaries():
    s = score("(S (NP (PRP He)) (VP (VBD left)) (. .))", "(S (NP (PRP He)) (VP (VBD left)) (. .))")
    text = evalb.format_report([s])
    assert "   1    3    0  100.00 100.00     3      3    3      0      2     2   100.00" in text
    assert "                100.00 100.00      3     3     3      0      2     2   100.00" in text
    assert "-- All --\nNumber of sentence        =      1\n" in text
    assert "\n-- len<=40 --\n" in text and text.endswith("Tagging accuracy          = 100.00\n")


def test_metrics_names():
    tree = "(S (NP (PRP He)) (VP (VBD left)))"
    m = evalb.metrics([score(tree, tree)])
    assert m["f1"] == m["f1_len40"] == m["recall"] == m["complete_match"] == m["tagging_accuracy"] == 100.0
    assert m["error_sentences"] == 0


def test_gold_tags_are_written_over_placeholders_in_order():
    reader = Reader()
    gold = reader.read(b"(S (NP (-NONE- *)) (NP (PRP He)) (VP (VBD left)) (. .))\n")
    line = b"(S (NP (XX He)) (VP (XX left) (XX .)))\n"
    assert evalb.with_gold_tags(line, reader.read(line), gold) == b"(S (NP (PRP He)) (VP (VBD left) (. .)))\n"
    assert evalb.with_gold_tags(b"(S (XX He))\n", reader.read(b"(S (XX He))\n"), gold) is None  # fewer words
    ev = evalb.score_lines([b"(S (NP (-NONE- *)) (NP (PRP He)) (VP (VBD left)) (. .))\n"], [line],
                           retag=lambda read: True)
    assert (ev.reattached, ev.test_trees) == (1, 1)
    assert counts(ev.scores[0]) == (3, OK, 3, 3, 3, 0, 2, 2)  # the period, re-tagged, is deleted


def test_the_state_below_the_stack_carries_from_line_to_line():
    reader = Reader()
    # the stray ')' after NP pops below the empty stack; the '(' of S then writes its id (1) there
    first = reader.read(b"(NP (PRP He))) (S (VP (VBD left)))\n")
    assert [(b.start, b.end, b.label) for b in first.brackets] == [(0, 1, b"NP"), (1, 2, b"S"), (1, 2, b"VP")]
    assert first.errors == ["Bracketing is unbalanced (too many open bracket)"]
    # on the next line, a ')' too many sets the end of bracket 1 (NP) from that left-over id
    second = reader.read(b"(S (NP (PRP He)) (VP (VBD left))))\n")
    assert [(b.start, b.end) for b in second.brackets] == [(0, 2), (0, 2), (1, 2)]
    assert Reader().read(b"(S (NP (PRP He)) (VP (VBD left))))\n").brackets[1].end == 1  # a fresh reader


@pytest.mark.parametrize("line, words", [
    (b"(S (NNP New\xc2\xa0York))\n", [(b"New\xc2\xa0York", b"NNP")]),  # a no-break space is not C whitespace
    (b"(S\t(NN a)\x0b(NN b)\x0c(NN c)\r)\n", [(b"a", b"NN"), (b"b", b"NN"), (b"c", b"NN")]),
    (b"(S (NP ) ( x) ( ))\n", [(b"", b"NP"), (b"x", b""), (b"", b"")]),  # words with empty tags or words
    (b"(S (NN a\x00b))\n", [(b"a", b"NN")]),  # a NUL ends the C string
    (b"(S (NN a)) (S (NN b))\n", [(b"a", b"NN"), (b"b", b"NN")]),  # two trees: one sentence
    (b"(S (TOP a) (-NONE- *) (. .) (NN b))\n", [(b"b", b"NN")]),  # deleted as read
])
def test_the_reader_takes_words_as_evalb_does(line, words):
    assert [(t.word, t.tag) for t in Reader().read(line).words] == words


def test_empty_brackets_and_unclosed_ones():
    read = Reader().read(b"(S (NP) (NN a)\n")
    assert [(b.start, b.end, b.label) for b in read.brackets] == [(0, -1, b"S"), (0, 0, b"NP")]
    assert read.errors == ["Bracketing is unbalanced (too many open bracket)"]
    assert evalb.scored_brackets(read) == [(0, -1, b"S")]  # unclosed: kept with end -1, as in evalb.c


def test_an_undefined_fmeasure_prints_as_c_evalb_does():
    words = " ".join(f"(NN w{i})" for i in range(41))
    long_only = score(f"(S (NP {words}))", f"(S (NP {words}))")  # nothing in the len<=40 section
    text = evalb.format_report([long_only])
    all_section, short_section = text.split("-- len<=40 --")
    assert "Bracketing FMeasure       = 100.00\n" in all_section
    assert "Bracketing Recall         =   0.00\nBracketing Precision      =   0.00\n" in short_section
    assert "Bracketing FMeasure       =   -nan\n" in short_section  # glibc's %6.2f of 0.0/0.0
    assert evalb.metrics([long_only])["f1_len40"] == 0.0
    no_match = score("(S (NP (PRP He)) (VP (VBD left)))", "(X (Y (PRP He)) (Z (VBD left)))")
    assert "Bracketing FMeasure       =   -nan\n" in evalb.format_report([no_match]).split("-- len<=40 --")[0]


@pytest.mark.parametrize("value, printed", [(96.651, " 96.65"), (0.0, "  0.00"), (100.0, "100.00"),
                                            (float("nan"), "  -nan")])
def test_c_float(value, printed):
    assert evalb.c_float(value) == printed


def test_lines_on_which_the_original_is_undefined_are_error_sentences():
    gold = "(S (NP (PRP He)) (VP (VBD left)))"
    # a word read past the end of the longest line so far: bytes the original never wrote
    past_the_end = evaluate("(S (NP (PRP He)) (", gold)
    assert past_the_end.undefined == [1] and past_the_end.scores[0].status == ERROR
    # nine ')' too many: the ninth pops from below the four variables under the stack's padding
    nine = evaluate(gold, gold + ")" * 9)
    assert nine.undefined == [1] and counts(nine.scores[0])[:2] == (2, ERROR)
    eight = evaluate(gold, gold + ")" * 8)  # the eighth reads the line number: still defined
    assert eight.undefined == [] and len(eight.messages) == 8  # 7 close-bracket messages and 1 open-bracket


def test_a_line_past_the_end_of_a_longer_one_reads_what_it_left():
    reader = Reader()
    reader.read(b"(S (NN a) (NN b))\n")
    # '(' then only spaces to the end: the original reads a word in the buffer past this line's NUL
    read = reader.read(b"(X (\n")
    assert not read.undefined
    assert read.errors == ["More than two elements in a bracket", "Bracketing is unbalanced (too many open bracket)"]
