"""EVALB's reader of one bracketed line, as evalb.c's read_line() does it with COLLINS.prm, on bytes.

The original reads characters, not trees: whitespace is C's (space, tab, newline, vertical tab, form feed,
carriage return; a no-break space is part of a word), `(LABEL WORD)` is a word, `(LABEL` followed by `(` or
`)` opens a bracket, `(NP )` is the empty word tagged NP and `(NP)` an empty bracket. Words tagged with a
deleted label (TOP, -NONE-, punctuation) are dropped as they are read. Several trees on one line are one
sentence. Malformed lines give EVALB's messages; a character outside a label or a word makes the original loop
on 'Reading sentence' until it gives up, which is marked `unreadable` here.

Two pieces of the original's memory outlive a line, and Reader keeps both, so that malformed lines score as
they do there. Its one line buffer: a line ending in `(` or `(LABEL` and spaces makes it read a word past the
line's end, in what the longer line read before (from either file) left there. And the 16 bytes of padding
below its bracket stack: an unmatched ')' pops from there (and further down, from its variables stack_top,
Status, Error_count and Line), and a '(' after it pushes there. Reading buffer bytes never written, or going
further down, is undefined in the original (`undefined`). The layout is that of gcc 12 on x86-64.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SPACE = frozenset(b" \t\n\v\f\r")  # isspace() in the C locale
OPEN, CLOSE = ord("("), ord(")")
TOKEN = re.compile(rb"[^ \t\n\v\f\r()]*")  # a label or a word: up to whitespace or a bracket
SPACES = re.compile(rb"[ \t\n\v\f\r]*")
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
    undefined: bool = False  # the original reads memory it never wrote or writes over its variables here
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
    return bytes(data).split(b"\0", 1)[0]


def file_lines(data: bytes) -> list[bytes]:
    """A file's lines as fgets returns them (each with its newline, the last one possibly without)."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    return lines + [parts[-1]] if parts[-1] else lines


class Reader:
    """Reads lines in order, keeping the state the original carries from one line to the next: its one line
    buffer, which both files are read into (a label or word running past a line's end reads what an earlier,
    longer line left there), and the padding below its bracket stack."""

    def __init__(self) -> None:
        self.memory = Memory(bytearray(), [0] * BELOW_STACK)

    def read(self, line: bytes, number: int = 1, messages: int = 0) -> ReadLine:
        """Read one line (its newline included), as read_line() does; number is its line number and messages
        the count of messages the original has printed before (both can be read below its stack)."""
        return _LineReader(line, self.memory, number, messages).run()

    def saved(self) -> Memory:
        """A copy of the state, for restore()."""
        return Memory(bytearray(self.memory.buffer), list(self.memory.below))

    def restore(self, memory: Memory) -> None:
        """Go back to a saved state (to read a line again, changed)."""
        self.memory = memory


@dataclass
class Memory:
    """The original's memory that outlives a line: the bytes of its line buffer written so far (what lies beyond
    was never written: reading it is undefined), and below[i], its stack[-1 - i]."""

    buffer: bytearray
    below: list[int]


class Undefined(Exception):
    """The original reads memory it never wrote, or writes over its own variables."""


class _LineReader:
    """One pass of read_line() over one line."""

    def __init__(self, line: bytes, memory: Memory, number: int, messages: int):
        buffer = memory.buffer
        if len(buffer) <= len(line):
            buffer.extend(bytes(len(line) + 1 - len(buffer)))
        buffer[:len(line) + 1] = line + b"\0"  # fgets: the line and a NUL over what was there
        self.buf = buffer
        self.below = memory.below
        self.number = number
        self.messages = messages
        self.out = ReadLine()
        self.stack: list[int] = []  # stack[0 .. top-1] above the bottom
        self.top = 0
        self.ends_set: dict[int, int] = {}  # end written to a bracket slot not yet used (by a stray ')')
        self.wid = 0  # words kept so far
        if len(line) > MAX_LINE_BYTES:
            self.out.beyond_limits.append(f"a line of more than {MAX_LINE_BYTES} bytes")

    def run(self) -> ReadLine:
        try:
            self.read()
        except Undefined:
            self.out.undefined = True
        return self.out

    def read(self) -> None:
        p = 0
        while True:
            p = SPACES.match(self.buf, p).end()
            char = self.at(p)
            if char == 0:
                break
            if char == OPEN:
                p = self.open(p + 1)
            elif char == CLOSE:
                self.close()
                p += 1
            else:
                self.out.errors.append("Reading sentence")
                self.out.unreadable = True
                return
        if self.top != 0:
            self.out.errors.append("Bracketing is unbalanced (too many open bracket)")

    def at(self, p: int) -> int:
        if p >= len(self.buf):
            raise Undefined
        return self.buf[p]

    def token_end(self, p: int) -> int:
        """Where a label or word starting at p ends (a NUL does not end it, as in the original)."""
        end = TOKEN.match(self.buf, p).end()
        self.at(end)
        return end

    def open(self, p: int) -> int:
        """After '(': a word `(TAG WORD)` (returns past its ')'), or a bracket (returns p after its label)."""
        end = self.token_end(p)
        label = c_string(self.buf[p:end])
        self.check_size(label, MAX_LABEL_BYTES, "label")
        if self.at(end) in SPACE:
            q = SPACES.match(self.buf, end).end()
            self.at(q)
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
            raise Undefined  # the original writes over its own stack_top
        if self.top < 0:
            self.below[-1 - self.top] = bid
        elif self.top < len(self.stack):
            self.stack[self.top] = bid
        else:
            self.stack.append(bid)
        self.top += 1

    def close(self) -> None:
        """')': pop a bracket and set its end; below an empty stack the original reads its padding, then its
        variables stack_top, Status, Error_count and Line, which lie below that."""
        index = self.top - 1
        if self.top < 0:  # `if(stack_top-- < 0)`: only the second ')' too many is reported
            self.out.errors.append("Bracketing unbalance (too many close bracket)")
        if index >= 0:
            bid = self.stack[index]
        elif index >= -BELOW_STACK:
            bid = self.below[-1 - index]
        else:
            below = {-5: self.top, -6: 1, -7: self.messages + len(self.out.errors) - 1, -8: self.number}
            bid = below.get(index, MAX_BRACKETS)  # Status is 1 by then: the ')' before this one was reported
            if bid >= MAX_BRACKETS:
                raise Undefined  # a line number past the bracket array, or deeper: the totals and more
        self.top -= 1
        if bid < 0:
            return  # written before the bracket array: into memory the scoring never reads
        if bid < len(self.out.brackets):
            self.out.brackets[bid].end = self.wid
        else:
            self.ends_set[bid] = self.wid
