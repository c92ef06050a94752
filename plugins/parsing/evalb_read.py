"""EVALB's reader of one bracketed line, as evalb.c's read_line() does it with COLLINS.prm, on bytes.

The original reads characters, not trees: whitespace is C's (space, tab, newline, vertical tab, form feed,
carriage return; a no-break space is part of a word), `(LABEL WORD)` is a word, `(LABEL` followed by `(` or
`)` opens a bracket, `(NP )` is the empty word tagged NP and `(NP)` an empty bracket. Words tagged with a
deleted label (TOP, -NONE-, punctuation) are dropped as they are read. Several trees on one line are one
sentence. Malformed lines give EVALB's messages; a character outside a label or a word makes the original loop
on 'Reading sentence' until it gives up, which is marked `unreadable` here.

An unmatched ')' makes the original pop below its stack: it reads (and a later '(' writes) the 16 bytes of
padding that precede the stack in memory, which keep their value from one line to the next. Reader keeps them,
so that such lines score as they do in the original; deeper than that it corrupts its own variables
(`undefined`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SPACE = frozenset(b" \t\n\v\f\r")  # isspace() in the C locale
OPEN, CLOSE = ord("("), ord(")")
TERMINATORS = SPACE | {OPEN, CLOSE}
EMPTY_TAG = b"-NONE-"  # DELETE_LABEL_FOR_LENGTH
DELETE_LABELS = frozenset({b"TOP", EMPTY_TAG, b",", b":", b"``", b"''", b"."})  # COLLINS.prm's DELETE_LABEL
BELOW_STACK = 4  # ints of padding between evalb.c's stack_top and stack (gcc's layout on x86-64)

# evalb.c's fixed buffers: beyond them the original overflows them, or reads the rest of a line as the next line
MAX_LINE_BYTES = 4999  # fgets(buff, 5000, ...), newline included
MAX_WORDS = 200
MAX_BRACKETS = 200
MAX_WORD_BYTES = 99
MAX_LABEL_BYTES = 29


@dataclass
class Bracket:
    """A bracket as read: the words before it and before its ')' (-1 while unclosed), and its raw label."""

    start: int
    end: int
    label: bytes


@dataclass
class Terminal:
    """A `(TAG WORD)` as read, deleted ones included, with where its tag sits in the line."""

    word: bytes
    tag: bytes
    tag_start: int
    tag_end: int


@dataclass
class ReadLine:
    """What EVALB takes from one line."""

    terminals: list[Terminal] = field(default_factory=list)
    brackets: list[Bracket] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # EVALB's messages, in order
    unreadable: bool = False  # the original loops on 'Reading sentence' here and stops
    undefined: bool = False  # so many unmatched ')' that the original overwrites its own variables
    beyond_limits: list[str] = field(default_factory=list)  # which of evalb.c's fixed buffers it exceeds

    @property
    def words(self) -> list[Terminal]:
        """The words EVALB keeps: those whose tag is not a deleted label."""
        return [t for t in self.terminals if t.tag not in DELETE_LABELS]

    @property
    def length(self) -> int:
        """EVALB's sentence length: words not tagged -NONE- (deleted punctuation counts)."""
        return sum(t.tag != EMPTY_TAG for t in self.terminals)


def c_string(data: bytes) -> bytes:
    """What strcpy keeps of a buffer: the bytes before the first NUL."""
    return data.split(b"\0", 1)[0]


def file_lines(data: bytes) -> list[bytes]:
    """A file's lines as fgets returns them (each with its newline, the last one possibly without)."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    return lines + [parts[-1]] if parts[-1] else lines


class Reader:
    """Reads lines in order, keeping the state the original carries from one line to the next."""

    def __init__(self) -> None:
        self.below = [0] * BELOW_STACK  # below[i] is stack[-1 - i]

    def read(self, line: bytes) -> ReadLine:
        """Read one line (its newline included), as read_line() does."""
        return _LineReader(line, self.below).run()

    def peek(self, line: bytes) -> ReadLine:
        """Read a line without keeping what reading it leaves behind."""
        return _LineReader(line, list(self.below)).run()


class _LineReader:
    """One pass of read_line() over one line."""

    def __init__(self, line: bytes, below: list[int]):
        self.buf = line
        self.below = below
        self.out = ReadLine()
        self.stack: list[int] = []  # stack[0 .. top-1] above the bottom
        self.top = 0
        self.ends_set: dict[int, int] = {}  # end written to a bracket slot not yet used (by a stray ')')
        self.wid = 0  # words kept so far
        if len(line) > MAX_LINE_BYTES:
            self.out.beyond_limits.append(f"a line of more than {MAX_LINE_BYTES} bytes")

    def run(self) -> ReadLine:
        buf, n, p = self.buf, len(self.buf), 0
        while p < n and buf[p] != 0 and not (self.out.unreadable or self.out.undefined):
            char = buf[p]
            if char in SPACE:
                p += 1
            elif char == OPEN:
                p = self.open(p + 1)
            elif char == CLOSE:
                self.close()
                p += 1
            else:
                self.out.errors.append("Reading sentence")
                self.out.unreadable = True
        if self.top != 0 and not (self.out.unreadable or self.out.undefined):
            self.out.errors.append("Bracketing is unbalanced (too many open bracket)")
        return self.out

    def token_end(self, p: int) -> int:
        """Where a label or word starting at p ends (a NUL does not end it, as in the original)."""
        while p < len(self.buf) and self.buf[p] not in TERMINATORS:
            p += 1
        return p

    def at(self, p: int) -> int:
        return self.buf[p] if p < len(self.buf) else 0

    def open(self, p: int) -> int:
        """After '(': a word `(TAG WORD)` (returns past its ')'), or a bracket (returns p after its label)."""
        end = self.token_end(p)
        label = c_string(self.buf[p:end])
        self.check_size(label, MAX_LABEL_BYTES, "label")
        if self.at(end) in SPACE:
            q = end + 1
            while self.at(q) in SPACE:
                q += 1
            word_end = self.token_end(q)
            if self.at(word_end) == CLOSE:
                word = c_string(self.buf[q:word_end])
                self.check_size(word, MAX_WORD_BYTES, "word")
                self.out.terminals.append(Terminal(word, label, p, end))
                if label not in DELETE_LABELS:
                    self.wid += 1
                    if self.wid == MAX_WORDS + 1:
                        self.out.beyond_limits.append(f"more than {MAX_WORDS} words")
                return word_end + 1
            if self.at(word_end) != OPEN:
                self.out.errors.append("More than two elements in a bracket")
        bid = len(self.out.brackets)
        if bid == MAX_BRACKETS:
            self.out.beyond_limits.append(f"more than {MAX_BRACKETS} brackets")
        self.out.brackets.append(Bracket(self.wid, self.ends_set.pop(bid, -1), label))
        self.push(bid)
        return end

    def check_size(self, token: bytes, limit: int, what: str) -> None:
        if len(token) > limit:
            self.out.beyond_limits.append(f"a {what} of more than {limit} bytes")

    def push(self, bid: int) -> None:
        if self.top < -BELOW_STACK:
            self.out.undefined = True
        elif self.top < 0:
            self.below[-1 - self.top] = bid
        elif self.top < len(self.stack):
            self.stack[self.top] = bid
        else:
            self.stack.append(bid)
        self.top += 1

    def close(self) -> None:
        """')': pop a bracket and set its end; below an empty stack the original reads its padding."""
        index = self.top - 1
        if index >= 0:
            bid = self.stack[index]
        elif index >= -BELOW_STACK:
            bid = self.below[-1 - index]
        else:
            bid = -1  # the original reads its own stack_top here, and writes outside its arrays
        if self.top < 0:  # `if(stack_top-- < 0)`: only the second ')' too many is reported
            self.out.errors.append("Bracketing unbalance (too many close bracket)")
        if bid < 0:
            self.out.undefined = True
            return
        self.top -= 1
        if bid < len(self.out.brackets):
            self.out.brackets[bid].end = self.wid
        else:
            self.ends_set[bid] = self.wid
