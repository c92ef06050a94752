"""EVALB (Sekine & Collins 1997) with COLLINS.prm in Python: the same figures, printed in EVALB's layout.

COLLINS.prm: brackets labelled TOP or -NONE- are deleted; preterminals tagged , : `` '' . are deleted with
their words; a bracket whose span is then empty is dropped; labels are cut at the first '-' or '=' (labels
that start with '-', such as -LRB-, are kept whole); ADVP equals PRT; sentence length counts the gold words
that are not -NONE-. Brackets match as multisets and totals are summed over the corpus. A sentence whose
words differ from the gold ones is an error and stays out of the totals; one with no test words is skipped.

One deliberate difference: punctuation is deleted at the positions the *gold* tags mark, in both trees,
so a test tree that tags a comma as NN is scored rather than reported as a length mismatch. Such sentences
are counted (punctuation_mismatch) so that a report can say how far it departs from the original program.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from nltk.tree import Tree

from .preprocess import EMPTY_ELEMENT, is_preterminal, strip_label

PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
# EMPTY_ELEMENT (-NONE-) is also COLLINS.prm's DELETE_LABEL_FOR_LENGTH
DELETE_LABELS = frozenset({"TOP", EMPTY_ELEMENT}) | PUNCTUATION_TAGS
EQUIVALENT_LABELS = {"PRT": "ADVP"}  # EQ_LABEL ADVP PRT
CUTOFF_LEN = 40
OK, ERROR, SKIP = 0, 1, 2  # EVALB's sentence status


class BracketRates:
    """Recall and precision (percent) of the matched, gold and test bracket counts a subclass holds."""

    match: int
    gold_brackets: int
    test_brackets: int

    @property
    def recall(self) -> float:
        return 100.0 * self.match / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.match / self.test_brackets if self.test_brackets else 0.0


@dataclass
class SentenceScore(BracketRates):
    """One sentence's line of the EVALB table."""

    length: int  # gold words that are not -NONE- (decides len<=40)
    status: int = OK
    match: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0  # words scored for tagging (punctuation deleted)
    correct_tags: int = 0
    error: str = ""
    punctuation_mismatch: bool = False  # test and gold tags disagree on which words are punctuation

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words else 0.0


@dataclass
class Totals(BracketRates):
    """Corpus totals of one section of the summary (all sentences, or those of length <= cutoff)."""

    sentences: int = 0
    errors: int = 0
    skipped: int = 0
    match: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    complete: int = 0
    words: int = 0
    correct_tags: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less_crossing: int = 0
    punctuation_mismatch: int = 0  # scored sentences whose tags disagree on punctuation (errors in EVALB)

    @classmethod
    def of(cls, scores: list[SentenceScore], cutoff: int | None = None) -> Totals:
        """Sum the sentences (only those with length <= cutoff when given)."""
        totals = cls()
        for s in scores:
            if cutoff is None or s.length <= cutoff:
                totals.add(s)
        return totals

    def add(self, s: SentenceScore) -> None:
        """Count one sentence; errors and skips add nothing but their number."""
        self.sentences += 1
        if s.status == ERROR:
            self.errors += 1
            return
        if s.status == SKIP:
            self.skipped += 1
            return
        self.match += s.match
        self.gold_brackets += s.gold_brackets
        self.test_brackets += s.test_brackets
        self.complete += int(s.match == s.gold_brackets == s.test_brackets)
        self.words += s.words
        self.correct_tags += s.correct_tags
        self.crossing += s.crossing
        self.no_crossing += int(s.crossing == 0)
        self.two_or_less_crossing += int(s.crossing <= 2)
        self.punctuation_mismatch += int(s.punctuation_mismatch)

    @property
    def valid(self) -> int:
        return self.sentences - self.errors - self.skipped

    @property
    def fmeasure(self) -> float:
        """2PR/(P+R) of the percentages; NaN when both are 0, as EVALB prints it."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else math.nan

    def _per_valid(self, count: float, scale: float = 100.0) -> float:
        return scale * count / self.valid if self.valid > 0 else 0.0

    @property
    def complete_match(self) -> float:
        return self._per_valid(self.complete)

    @property
    def average_crossing(self) -> float:
        return self._per_valid(self.crossing, scale=1.0)

    @property
    def no_crossing_rate(self) -> float:
        return self._per_valid(self.no_crossing)

    @property
    def two_or_less_crossing_rate(self) -> float:
        return self._per_valid(self.two_or_less_crossing)

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words else 0.0


# ---------------------------------------------------------------- trees


def parse_tree(text: str) -> Tree:
    """One bracketed tree, as EVALB reads a line; ValueError when the brackets are malformed."""
    tree = Tree.fromstring(text)
    if isinstance(tree, str):
        raise ValueError(f"not a bracketed tree: {text!r}")
    return tree


def terminals(tree: Tree) -> list[tuple[str, str]]:
    """(word, tag) of every preterminal, -NONE- included, left to right."""
    return [(node[0], node.label()) for node in tree.subtrees(is_preterminal)]


def scoring_label(label: str) -> str:
    """A bracket label as EVALB compares it: cut at the first '-' or '=' (as preprocessing strips function tags),
    ADVP and PRT merged."""
    label = strip_label(label)
    return EQUIVALENT_LABELS.get(label, label)


def same_tag(gold: str, test: str) -> bool:
    """EVALB's label_comp on POS tags: equal, or an EQ_LABEL pair."""
    return EQUIVALENT_LABELS.get(gold, gold) == EQUIVALENT_LABELS.get(test, test)


def brackets(tree: Tree, keep: list[bool]) -> list[tuple[int, int, str]]:
    """The scored brackets (start, end, label) over the kept words; keep has one flag per preterminal.

    Preterminals are words, not brackets; deleted labels and brackets left with an empty span are dropped.
    """
    out: list[tuple[int, int, str]] = []
    position = 0
    index = 0

    def visit(node: Tree) -> None:
        nonlocal position, index
        if is_preterminal(node):
            position += int(keep[index])
            index += 1
            return
        start = position
        for child in node:
            if isinstance(child, Tree):
                visit(child)
        label = scoring_label(node.label())
        if position > start and label not in DELETE_LABELS:
            out.append((start, position, label))

    visit(tree)
    return out


def keep_flags(tree: Tree, scored: list[bool]) -> list[bool]:
    """Per preterminal of tree: its own -NONE- elements are dropped, the other words take the flag `scored`
    gives their position (punctuation by the gold tags)."""
    flags = []
    index = 0
    for _, tag in terminals(tree):
        if tag == EMPTY_ELEMENT:
            flags.append(False)
        else:
            flags.append(scored[index])
            index += 1
    return flags


def crosses(a: tuple[int, int, str], b: tuple[int, int, str]) -> bool:
    """Whether two spans overlap without one containing the other."""
    return a[0] < b[0] < a[1] < b[1] or b[0] < a[0] < b[1] < a[1]


def score_sentence(gold: Tree, test: Tree | None) -> SentenceScore:
    """Score one test tree against its gold tree; None (an empty output line) is skipped, as EVALB does."""
    gold_words = [(w, t) for w, t in terminals(gold) if t != EMPTY_ELEMENT]
    length = len(gold_words)
    if test is None or all(t in DELETE_LABELS for _, t in terminals(test)):
        return SentenceScore(length, status=SKIP)
    test_words = [(w, t) for w, t in terminals(test) if t != EMPTY_ELEMENT]
    if len(test_words) != len(gold_words):
        return SentenceScore(length, status=ERROR, error=f"Length unmatch ({len(gold_words)}|{len(test_words)})")
    scored = [t not in PUNCTUATION_TAGS for _, t in gold_words]
    for (gw, _), (tw, _), counts in zip(gold_words, test_words, scored):
        if counts and gw != tw:
            return SentenceScore(length, status=ERROR, error=f"Words unmatch ({gw}|{tw})")

    gold_brackets = brackets(gold, keep_flags(gold, scored))
    test_brackets = brackets(test, keep_flags(test, scored))
    match = sum((Counter(gold_brackets) & Counter(test_brackets)).values())
    # counted over test brackets (Collins): each test bracket crossing any gold bracket counts once
    crossing = sum(any(crosses(g, t) for g in gold_brackets) for t in test_brackets)
    pairs = [(g[1], t[1]) for (g, t), counts in zip(zip(gold_words, test_words), scored) if counts]
    return SentenceScore(
        length, OK, match, len(gold_brackets), len(test_brackets), crossing,
        words=len(pairs), correct_tags=sum(same_tag(g, t) for g, t in pairs),
        punctuation_mismatch=any((g in PUNCTUATION_TAGS) != (t in PUNCTUATION_TAGS)
                                 for (_, g), (_, t) in zip(gold_words, test_words)),
    )


def score_line(gold: Tree, test_line: str) -> SentenceScore:
    """Score a test line: blank is skipped, malformed brackets are an error."""
    if not test_line.strip():
        return score_sentence(gold, None)
    try:
        test = parse_tree(test_line)
    except ValueError as err:
        length = sum(t != EMPTY_ELEMENT for _, t in terminals(gold))
        return SentenceScore(length, status=ERROR, error=f"Reading sentence ({err})")
    return score_sentence(gold, test)


def reattach_gold_tags(test: Tree, gold: Tree) -> Tree:
    """The test tree with the gold POS tags on its leaves, in order (for outputs with placeholder tags);
    unchanged when the word counts differ (EVALB then reports a length mismatch)."""
    gold_tags = [t for _, t in terminals(gold) if t != EMPTY_ELEMENT]
    leaves = [node for node in test.subtrees(is_preterminal) if node.label() != EMPTY_ELEMENT]
    if len(leaves) != len(gold_tags):
        return test
    out = test.copy(deep=True)
    for node, tag in zip([n for n in out.subtrees(is_preterminal) if n.label() != EMPTY_ELEMENT], gold_tags):
        node.set_label(tag)
    return out


# ---------------------------------------------------------------- report

HEADER = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
    "============================================================================"
)
RULE = "============================================================================"


def format_sentence(number: int, s: SentenceScore) -> str:
    """One row of the table, byte for byte as EVALB prints it (errors and skips print zeros)."""
    if s.status != OK:
        s = SentenceScore(s.length, s.status)
    return (f"{number:4d}  {s.length:3d}    {s.status:d}  "
            f"{s.recall:6.2f} {s.precision:6.2f}   {s.match:3d}    {s.gold_brackets:3d}  {s.test_brackets:3d}"
            f"    {s.crossing:3d}   {s.words:4d}  {s.correct_tags:4d}   {s.tagging_accuracy:6.2f}")


def c_float(value: float, width: int = 6) -> str:
    """C's printf("%6.2f") as glibc prints it; EVALB's undefined F-measure is 0.0/0.0, a NaN that x86 makes
    negative, hence '-nan'."""
    return f"{'-nan':>{width}}" if math.isnan(value) else f"{value:{width}.2f}"


def format_summary(title: str, t: Totals) -> list[str]:
    """One summary section (`-- All --` or `-- len<=40 --`)."""
    return [
        f"-- {title} --",
        f"Number of sentence        = {t.sentences:6d}",
        f"Number of Error sentence  = {t.errors:6d}",
        f"Number of Skip  sentence  = {t.skipped:6d}",
        f"Number of Valid sentence  = {t.valid:6d}",
        f"Bracketing Recall         = {t.recall:6.2f}",
        f"Bracketing Precision      = {t.precision:6.2f}",
        f"Bracketing FMeasure       = {c_float(t.fmeasure)}",
        f"Complete match            = {t.complete_match:6.2f}",
        f"Average crossing          = {t.average_crossing:6.2f}",
        f"No crossing               = {t.no_crossing_rate:6.2f}",
        f"2 or less crossing        = {t.two_or_less_crossing_rate:6.2f}",
        f"Tagging accuracy          = {t.tagging_accuracy:6.2f}",
    ]


def format_report(scores: list[SentenceScore], cutoff: int = CUTOFF_LEN) -> str:
    """The whole EVALB output: per-sentence table, corpus line, and the All and len<=cutoff summaries."""
    every = Totals.of(scores)
    lines = [HEADER]
    lines += [format_sentence(i, s) for i, s in enumerate(scores, start=1)]
    lines.append(RULE)
    total = ""
    if every.gold_brackets > 0 and every.test_brackets > 0:
        total = (f"                {every.recall:6.2f} {every.precision:6.2f} {every.match:6d} "
                 f"{every.gold_brackets:5d} {every.test_brackets:5d}  {every.crossing:5d}")
    lines.append(total + f"  {every.words:5d} {every.correct_tags:5d}   {every.tagging_accuracy:6.2f}")
    lines += ["=== Summary ===", ""]
    lines += format_summary("All", every)
    lines.append("")
    lines += format_summary(f"len<={cutoff}", Totals.of(scores, cutoff))
    return "\n".join(lines) + "\n"


def metrics(scores: list[SentenceScore], cutoff: int = CUTOFF_LEN) -> dict[str, float]:
    """The figures a run logs: F1, recall, precision, complete match, tagging accuracy, for all and len<=cutoff."""
    out: dict[str, float] = {}
    for suffix, t in (("", Totals.of(scores)), (f"_len{cutoff}", Totals.of(scores, cutoff))):
        f1 = t.fmeasure
        out[f"f1{suffix}"] = 0.0 if math.isnan(f1) else f1
        out[f"recall{suffix}"] = t.recall
        out[f"precision{suffix}"] = t.precision
        out[f"complete_match{suffix}"] = t.complete_match
        out[f"tagging_accuracy{suffix}"] = t.tagging_accuracy
    every = Totals.of(scores)
    out.update(sentences=every.sentences, error_sentences=every.errors, skipped_sentences=every.skipped,
               punctuation_mismatch_sentences=every.punctuation_mismatch)
    return out

