"""Deterministic generation of copy, reverse and addition examples, each split from its own seed.

A source of length L is drawn by first drawing L uniformly from the split's range (as tensor2tensor's
algorithmic problems do), then its symbols uniformly. Symbols are written space-separated, so a word
tokenizer sees one token per symbol and a character tokenizer sees symbols and spaces.

Addition writes its two operands in one of two layouts (`operands`):
  separate  'a + b': the digits of a, a '+', the digits of b (tensor2tensor's and the paper's layout); the
            digit of b that goes with a's digit i sits len(a) + 1 positions further on, a distance that
            changes from example to example, so a model must find it from the '+'.
  paired    one token per digit position holding that position's digit of a and of b ('37' for 3 and 7),
            the shorter number padded with zeros to the longer's width: the digits to add share a position,
            and sum digit i reads source token i, as copy's output i reads source token i.
"""

from __future__ import annotations

import hashlib
import random
import string
from dataclasses import dataclass

from seqxduce.api import Example

ALPHABET = string.digits + string.ascii_lowercase + string.ascii_uppercase

# Each source belongs to exactly one split by a stable hash of its text, so valid and test never repeat
# a training source while every split still draws from its own seed, whatever the others' sizes.
# Lengths with fewer distinct sources than MIN_SPACE_TO_HOLD_OUT are shared by all splits: holding out
# part of a tiny space would hide some short inputs from training, and no split could avoid repeats.
MIN_SPACE_TO_HOLD_OUT = 10_000
HASH_BUCKETS = 10
HELD_OUT_BUCKETS = {"valid": 0, "test": 1}  # train owns the other buckets


def split_of(source: str) -> str:
    """The split a source belongs to when its length's space is large enough to hold out."""
    digest = hashlib.blake2b(source.encode("utf-8"), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") % HASH_BUCKETS
    for split, held_out in HELD_OUT_BUCKETS.items():
        if bucket == held_out:
            return split
    return "train"


def to_digits(number: int, base: int) -> list[str]:
    """The digits of a non-negative number in base (2..62), most significant first."""
    digits = []
    while True:
        number, digit = divmod(number, base)
        digits.append(ALPHABET[digit])
        if number == 0:
            return digits[::-1]


def number_count(digits: int, base: int) -> int:
    """How many numbers have exactly this many digits (no leading zero, except the number 0)."""
    return base if digits == 1 else (base - 1) * base ** (digits - 1)


@dataclass(frozen=True)
class Generator:
    """Draws copy, reverse or addition examples over `symbols` symbols (for addition, the base)."""

    kind: str
    symbols: int
    lsb_first: bool = False
    operands: str = "separate"

    @property
    def paired(self) -> bool:
        """Addition with one token per digit position holding both operands' digits."""
        return self.kind == "addition" and self.operands == "paired"

    @property
    def min_length(self) -> int:
        """The shortest possible source in tokens: one digit on each side of '+' for addition ('a + b'),
        one digit pair for paired addition."""
        return 3 if self.kind == "addition" and not self.paired else 1

    def space(self, length: int) -> int:
        """The number of distinct sources of this length."""
        if self.kind != "addition":
            return self.symbols**length
        if self.paired:  # pairs (a, b) whose longer number has `length` digits
            widest = number_count(length, self.symbols)
            return widest * (2 * self.symbols**length - widest)
        digits = length - 1
        base = self.symbols
        return sum(number_count(a, base) * number_count(digits - a, base) for a in range(1, digits))

    def sample(self, rng: random.Random, length: int) -> Example:
        """One example whose source has `length` tokens."""
        if self.kind == "addition":
            return self._addition(rng, length)
        sequence = rng.choices(ALPHABET[: self.symbols], k=length)
        target = sequence[::-1] if self.kind == "reverse" else sequence
        return Example(source=" ".join(sequence), target=" ".join(target))

    def _addition(self, rng: random.Random, length: int) -> Example:
        if self.paired:
            return self._paired_addition(rng, length)
        digits = length - 1  # one token is the '+'
        left_digits = rng.randint(1, digits - 1)
        left = self._number(rng, left_digits)
        right = self._number(rng, digits - left_digits)
        source = self._write(left) + ["+"] + self._write(right)
        return Example(source=" ".join(source), target=" ".join(self._write(left + right)))

    def _paired_addition(self, rng: random.Random, width: int) -> Example:
        """a and b of which one has exactly `width` digits (which one: a coin), the other 1..width digits."""
        long_number = self._number(rng, width)
        short_number = self._number(rng, rng.randint(1, width))
        left, right = (long_number, short_number) if rng.random() < 0.5 else (short_number, long_number)
        pad = ["0"] * width
        # msb first: zero-pad on the left of the shorter number, so each pair holds digits of one significance
        left_digits = (pad + to_digits(left, self.symbols))[-width:]
        right_digits = (pad + to_digits(right, self.symbols))[-width:]
        pairs = [a + b for a, b in zip(left_digits, right_digits)]
        source = pairs[::-1] if self.lsb_first else pairs
        return Example(source=" ".join(source), target=" ".join(self._write(left + right)))

    def _number(self, rng: random.Random, digits: int) -> int:
        low = 0 if digits == 1 else self.symbols ** (digits - 1)
        return rng.randrange(low, self.symbols**digits)

    def _write(self, number: int) -> list[str]:
        digits = to_digits(number, self.symbols)
        return digits[::-1] if self.lsb_first else digits


def generate_split(generator: Generator, split: str, size: int, min_len: int, max_len: int,
                   seed: int) -> list[Example]:
    """`size` examples of one split with source lengths uniform in [min_len, max_len]."""
    # a string seed is hashed with SHA-512 by random.Random, so it is stable across runs and platforms
    rng = random.Random(f"seqxduce-algorithmic:{seed}:{split}")
    held_out_lengths = {n for n in range(min_len, max_len + 1) if generator.space(n) >= MIN_SPACE_TO_HOLD_OUT}
    examples = []
    for _ in range(size):
        length = rng.randint(min_len, max_len)
        example = generator.sample(rng, length)
        while length in held_out_lengths and split_of(example.source) != split:
            example = generator.sample(rng, length)
        examples.append(example)
    return examples
