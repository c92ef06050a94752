"""EVALB (Sekine & Collins 1997) with COLLINS.prm in Python: the same figures and messages as evalb.c, byte for byte.

COLLINS.prm: words tagged TOP, -NONE- or punctuation (, : `` '' .) are deleted as each tree is read (by that
tree's own tags), so a test tree may drop or add punctuation; the remaining words must be the same in gold and
test, else the sentence is an error (Length unmatch, Words unmatch) and stays out of the totals; a test line
with no words left is skipped. Bracket labels are cut at the first '-' or '=' (so -LRB- as a phrase label
becomes the empty label), brackets labelled TOP or punctuation and brackets over no word are dropped, ADVP
equals PRT (for brackets and tags). Brackets match as multisets; sentence length counts the gold words not
tagged -NONE-; totals are summed over the corpus. Line reading follows evalb.c to the byte (evalb_read.py).

Where this scorer departs from the original program, on purpose:
- The original stops, without a summary, at its 12th error message (MAX_ERROR 10) and at any line it cannot
  read (a character outside a label or a word, as in `(S (NP He) left)`: it repeats 'Reading sentence' until
  that limit). A scorer that gives no figures at all for one bad line among thousands is no use to a training
  run, so every line is scored here: where the original's run with `-e 1000000` ends, the figures are that
  run's; an unreadable line is an error sentence (its message given once); `stop_line` says where the original
  would have stopped, and the task warns about every error sentence.
- The original's fixed buffers (lines of 4999 bytes, 200 words, 200 brackets, 99-byte words, 29-byte labels)
  overflow on larger input, or it reads the rest of a long line as the next line. There are no such limits
  here: such a line scores as in EVALB built with larger buffers and is listed in `beyond_limits`.
- Where the original reads memory it never wrote (a `(` or `(LABEL` ending a line longer than any read
  before), or its stack runs so far below empty that it reads or writes more than its padding and the four
  variables below it (more than eight unmatched ')' in a row, or a '(' after more than four), its output
  depends on its memory; here the sentence is an error sentence, listed in `undefined`.
The memory layout reproduced (evalb_read.py) is that of evalb.c built by gcc 12 for x86-64.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .evalb_read import DELETE_LABELS, EMPTY_TAG, SPACE, Reader, ReadLine

EQUIVALENT_LABELS = {b"PRT": b"ADVP"}  # EQ_LABEL ADVP PRT
CUTOFF_LEN = 40
MAX_ERROR = 10  # COLLINS.prm: the original stops at the message after the 11th
OK, ERROR, SKIP = 0, 1, 2  # EVALB's sentence status
READING_SENTENCE = "Reading sentence"


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
    """One sentence's line of the EVALB table (an error found while reading keeps its figures, as in EVALB)."""

    length: int  # gold words not tagged -NONE- (decides len<=40)
    status: int = OK
    match: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0  # words scored for tagging (deleted ones left out)
    correct_tags: int = 0
    gold_words: int = 0  # words the gold tree keeps, whatever the status (a skip with gold words lost them)

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


@dataclass
class Message:
    """One of EVALB's messages (the original prints them on stderr as `LINE : TEXT`)."""

    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.line} : {self.text}"


@dataclass
class Evaluation:
    """Every sentence's score, EVALB's messages, and what the original program would have done differently."""

    scores: list[SentenceScore] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    gold_lines: int = 0
    test_lines: int = 0
    unpaired: list[int] = field(default_factory=list)  # non-blank lines of the longer file with no partner
    beyond_limits: dict[int, list[str]] = field(default_factory=dict)  # line -> evalb.c buffers it exceeds
    undefined: list[int] = field(default_factory=list)  # lines on which the original's behaviour is undefined
    test_trees: int = 0  # paired test lines with at least one word
    reattached: int = 0  # of which were given the gold tags

    @property
    def stop_line(self) -> int | None:
        """Where the original stops without a summary (its 12th message, or a line it cannot read); None if not."""
        for count, message in enumerate(self.messages, start=1):
            if message.text == READING_SENTENCE or count > MAX_ERROR + 1:
                return message.line
        return None

    def lines_with(self, status: int) -> list[int]:
        """The line numbers of the sentences with one status."""
        return [i for i, s in enumerate(self.scores, start=1) if s.status == status]

    def note_read(self, number: int, line: ReadLine) -> None:
        """Record what reading one line of either file said."""
        self.messages += [Message(number, text) for text in line.errors]
        new = [limit for limit in line.beyond_limits if limit not in self.beyond_limits.get(number, [])]
        if new:
            self.beyond_limits.setdefault(number, []).extend(new)
        if line.undefined and number not in self.undefined:
            self.undefined.append(number)


# ---------------------------------------------------------------- scoring


def cut_label(label: bytes) -> bytes:
    """A bracket label as EVALB compares it: cut at the first '-' or '=' (a leading '-' leaves it empty)."""
    for i, char in enumerate(label):
        if char in b"-=":
            return label[:i]
    return label


def same_label(gold: bytes, test: bytes) -> bool:
    """EVALB's label_comp: equal, or an EQ_LABEL pair."""
    return EQUIVALENT_LABELS.get(gold, gold) == EQUIVALENT_LABELS.get(test, test)


def scored_brackets(line: ReadLine) -> list[tuple[int, int, bytes]]:
    """(start, end, label) of the brackets EVALB scores: over at least one word, label cut, not deleted."""
    out = []
    for b in line.brackets:
        if b.start == b.end:
            continue
        label = cut_label(b.label)
        if label not in DELETE_LABELS:
            out.append((b.start, b.end, EQUIVALENT_LABELS.get(label, label)))
    return out


def crosses(gold: tuple[int, int, bytes], test: tuple[int, int, bytes]) -> bool:
    """Whether two spans overlap without one containing the other (evalb.c's test, unclosed ends included)."""
    return (gold[0] < test[0] < gold[1] < test[1]) or (test[0] < gold[0] < test[1] < gold[1])


def text(word: bytes) -> str:
    """A word for a message: UTF-8, other bytes shown as \\xNN."""
    return word.decode("utf-8", errors="backslashreplace")


def score_pair(gold: ReadLine, test: ReadLine) -> tuple[SentenceScore, list[str]]:
    """Score one test line against its gold line (evalb.c's calc_result); the messages it adds."""
    gold_words, test_words = gold.words, test.words
    length = gold.length
    if gold.unreadable or test.unreadable or gold.undefined or test.undefined:
        return SentenceScore(length, ERROR, gold_words=len(gold_words)), []
    if not test_words:
        return SentenceScore(length, SKIP, gold_words=len(gold_words)), []
    if len(gold_words) != len(test_words):
        return (SentenceScore(length, ERROR, gold_words=len(gold_words)),
                [f"Length unmatch ({len(gold_words)}|{len(test_words)})"])
    for g, t in zip(gold_words, test_words):
        if g.word != t.word:
            return SentenceScore(length, ERROR, gold_words=len(gold_words)), [
                f"Words unmatch ({text(g.word)}|{text(t.word)})"]
    gold_brackets, test_brackets = scored_brackets(gold), scored_brackets(test)
    match = sum((Counter(gold_brackets) & Counter(test_brackets)).values())
    # counted over test brackets (Collins): each test bracket crossing any gold bracket counts once
    crossing = sum(any(crosses(g, t) for g in gold_brackets) for t in test_brackets)
    status = ERROR if gold.errors or test.errors else OK  # a reading error keeps the figures in the row
    return SentenceScore(
        length, status, match, len(gold_brackets), len(test_brackets), crossing, words=len(gold_words),
        correct_tags=sum(same_label(g.tag, t.tag) for g, t in zip(gold_words, test_words)),
        gold_words=len(gold_words),
    ), []


def with_gold_tags(line: bytes, test: ReadLine, gold: ReadLine) -> bytes | None:
    """The test line with the gold tags written over its own, word by word (-NONE- words left out on both
    sides); None when the numbers of words differ or the line cannot be read."""
    gold_tags = [t.tag for t in gold.terminals if t.tag != EMPTY_TAG]
    spots = [t for t in test.terminals if t.tag != EMPTY_TAG]
    if len(spots) != len(gold_tags) or test.unreadable or any(spot.tag_end > len(line) for spot in spots):
        return None  # (a tag past the line's end was read from what an earlier line left in the buffer)
    parts, last = [], 0
    for spot, tag in zip(spots, gold_tags):
        parts += [line[last:spot.tag_start], tag]
        last = spot.tag_end
    parts.append(line[last:])
    return b"".join(parts)


def is_blank(line: bytes) -> bool:
    """Whether a line holds only C whitespace."""
    return all(char in SPACE for char in line)


def score_lines(gold_lines: list[bytes], test_lines: list[bytes],
                retag: Callable[[ReadLine], bool] | None = None) -> Evaluation:
    """EVALB over two files' lines (each with its newline, as file_lines gives them), in evalb.c's order.

    retag: given a test line as read, whether to write the gold tags over its own before scoring (for outputs
    with placeholder tags)."""
    reader = Reader()
    ev = Evaluation(gold_lines=len(gold_lines), test_lines=len(test_lines))
    for number, gold_line in enumerate(gold_lines, start=1):
        gold = reader.read(gold_line, number, len(ev.messages))
        ev.note_read(number, gold)
        if number > len(test_lines):
            ev.messages.append(Message(number, "Number of lines unmatch (too many lines in gold file)"))
            ev.unpaired = [i for i in range(number, len(gold_lines) + 1) if not is_blank(gold_lines[i - 1])]
            break
        test_line = test_lines[number - 1]
        before = reader.saved()
        test = reader.read(test_line, number, len(ev.messages))
        if test.terminals:
            ev.test_trees += 1
            if retag is not None and retag(test):
                ev.reattached += 1
                retagged = with_gold_tags(test_line, test, gold)
                if retagged is not None:
                    reader.restore(before)
                    test = reader.read(retagged, number, len(ev.messages))
        ev.note_read(number, test)
        score, errors = score_pair(gold, test)
        ev.messages += [Message(number, e) for e in errors]
        ev.scores.append(score)
    if len(test_lines) > len(gold_lines):
        ev.messages.append(Message(len(gold_lines) + 1, "Number of lines unmatch (too many lines in test file)"))
        ev.unpaired = [i for i in range(len(gold_lines) + 1, len(test_lines) + 1) if not is_blank(test_lines[i - 1])]
    return ev


# ---------------------------------------------------------------- report

HEADER = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
    "============================================================================"
)
RULE = "============================================================================"


def format_sentence(number: int, s: SentenceScore) -> str:
    """One row of the table, byte for byte as EVALB prints it."""
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


def format_table(scores: list[SentenceScore]) -> str:
    """The header and the per-sentence rows: what the original has printed when it stops early."""
    return "\n".join([HEADER] + [format_sentence(i, s) for i, s in enumerate(scores, start=1)]) + "\n"


def format_report(scores: list[SentenceScore], cutoff: int = CUTOFF_LEN) -> str:
    """The whole of EVALB's standard output: per-sentence table, corpus line, the All and len<=cutoff summaries."""
    every = Totals.of(scores)
    lines = [RULE]
    total = ""
    if every.gold_brackets > 0 and every.test_brackets > 0:
        total = (f"                {every.recall:6.2f} {every.precision:6.2f} {every.match:6d} "
                 f"{every.gold_brackets:5d} {every.test_brackets:5d}  {every.crossing:5d}")
    lines.append(total + f"  {every.words:5d} {every.correct_tags:5d}   {every.tagging_accuracy:6.2f}")
    lines += ["=== Summary ===", ""]
    lines += format_summary("All", every)
    lines.append("")
    lines += format_summary(f"len<={cutoff}", Totals.of(scores, cutoff))
    return format_table(scores) + "\n".join(lines) + "\n"


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
    out.update(sentences=every.sentences, error_sentences=every.errors, skipped_sentences=every.skipped)
    return out
