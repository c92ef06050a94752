"""The Python EVALB: the reference output of the original program, and one hand-worked example per rule."""

from __future__ import annotations

import pytest
from seqxduce_parsing import evalb
from seqxduce_parsing.evalb import ERROR, OK, SKIP, parse_tree, score_line, score_sentence


def score(gold: str, test: str) -> evalb.SentenceScore:
    return score_line(parse_tree(gold), test)


def counts(s: evalb.SentenceScore) -> tuple[int, ...]:
    """(length, status, match, gold, test, crossing, words, correct tags)."""
    return (s.length, s.status, s.match, s.gold_brackets, s.test_brackets, s.crossing, s.words, s.correct_tags)


def test_reproduces_the_original_evalb_output_line_by_line(evalb_reference):
    golds = [parse_tree(line) for line in (evalb_reference / "gold.mrg").read_text().splitlines()]
    tests = (evalb_reference / "test.mrg").read_text().splitlines()
    ours = evalb.format_report([score_line(g, t) for g, t in zip(golds, tests)]).splitlines()
    expected = (evalb_reference / "evalb_COLLINS.out").read_text().splitlines()
    assert len(ours) == len(expected)
    for number, (line, want) in enumerate(zip(ours, expected), start=1):
        assert line.rstrip() == want.rstrip(), f"line {number}"


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


def test_punctuation_is_deleted_by_the_gold_tag():
    gold = "(S (NP (PRP He)) (VP (VBD left)) (. .))"
    # the test attaches the period inside VP and even tags it NN: it is still deleted, so VP matches
    s = score(gold, "(S (NP (PRP He)) (VP (VBD left) (NN .)))")
    assert counts(s) == (3, OK, 3, 3, 3, 0, 2, 2)


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
    ("NP-SBJ-1", "NP"), ("PP=2", "PP"), ("S-TPC-1", "S"), ("-LRB-", "-LRB-"), ("-RRB-", "-RRB-"), ("PRT", "ADVP"),
    ("ADVP-TMP", "ADVP"), ("", ""),
])
def test_scoring_labels(label, compared):
    assert evalb.scoring_label(label) == compared


def test_function_tags_and_indices_do_not_matter():
    gold = "(S (NP-SBJ-1 (PRP He)) (VP (VBD left) (PP-TMP=2 (IN at) (NP (NN noon)))))"
    s = score(gold, "(S (NP (PRP He)) (VP (VBD left) (PP (IN at) (NP (NN noon)))))")
    assert (s.match, s.gold_brackets, s.test_brackets) == (5, 5, 5)


def test_advp_and_prt_are_equal_for_brackets_and_tags():
    gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))"
    s = score(gold, "(S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up))))")
    assert (s.match, s.gold_brackets) == (4, 4)
    assert evalb.same_tag("PRT", "ADVP") and not evalb.same_tag("RP", "RB")


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
    error = score(gold, "(S (NP (PRP She)) (VP (VBD left)))")
    assert error.status == ERROR and "Words unmatch (He|She)" in error.error
    too_short = score(gold, "(S (NP (PRP He)))")
    assert too_short.status == ERROR and "Length unmatch (2|1)" in too_short.error
    totals = evalb.Totals.of([score(gold, gold), error, too_short])
    assert (totals.sentences, totals.errors, totals.valid, totals.gold_brackets) == (3, 2, 1, 3)
    assert evalb.format_sentence(2, error) == (
        "   2    2    1    0.00   0.00     0      0    0      0      0     0     0.00")


def test_an_empty_or_unreadable_test_line():
    gold = "(S (NP (PRP He)) (VP (VBD left)))"
    assert score(gold, "").status == SKIP
    assert score(gold, "(S (NP (. .)))").status == SKIP  # no words left after deletion, as EVALB skips
    assert score(gold, "(S (NP (PRP He)) (VP (VBD left))").status == ERROR


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


def test_reattach_gold_tags_replaces_placeholders_in_order():
    gold = parse_tree("(S (NP (-NONE- *)) (NP (PRP He)) (VP (VBD left)) (. .))")
    test = parse_tree("(S (NP (XX He)) (VP (XX left) (XX .)))")
    assert evalb.reattach_gold_tags(test, gold) == parse_tree("(S (NP (PRP He)) (VP (VBD left) (. .)))")
    shorter = parse_tree("(S (XX He))")
    assert evalb.reattach_gold_tags(shorter, gold) == shorter
    assert score_sentence(gold, evalb.reattach_gold_tags(test, gold)).match == 3


def test_punctuation_tag_disagreement_is_flagged_on_scored_sentences():
    gold = "(S (NP (PRP He)) (VP (VBD left)) (. .))"
    assert score(gold, "(S (NP (PRP He)) (VP (VBD left) (NN .)))").punctuation_mismatch
    assert score(gold, "(S (NP (PRP He)) (, left) (. .))").punctuation_mismatch  # a word tagged as a comma
    assert not score(gold, gold).punctuation_mismatch
    totals = evalb.Totals.of([score(gold, "(S (NP (PRP He)) (VP (VBD left) (NN .)))"), score(gold, gold)])
    assert totals.punctuation_mismatch == 1


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
