"""The plain-text vocabulary file: one token per line, in id order, with whitespace and backslashes escaped.

Escaping keeps one token per line for a character vocabulary, whose entries include the space,
newline and other invisible characters: such a character is written as \\uXXXX (or \\UXXXXXXXX) and a
backslash as \\\\. Every other character is written as itself, so the file stays readable.
"""

from __future__ import annotations

import re
from pathlib import Path

from seqxduce.api import UserError, read_lines

_ESCAPE = re.compile(r"\\(\\|u[0-9a-f]{4}|U[0-9a-f]{8})")


def escape(token: str) -> str:
    """A token as it is written on its line."""
    return "".join(_escape_char(char) for char in token)


def _escape_char(char: str) -> str:
    if char == "\\":
        return "\\\\"
    if char.isprintable() and not char.isspace():
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def unescape(line: str) -> str:
    """The token a line holds."""
    return _ESCAPE.sub(lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1)[1:], 16)), line)


def write_vocab(path: Path, tokens: list[str]) -> None:
    """Write tokens, one per line, in id order."""
    Path(path).write_text("".join(escape(token) + "\n" for token in tokens), encoding="utf-8")


def read_vocab(path: Path, specials: list[str]) -> list[str]:
    """Read a vocabulary file, checking it starts with the special tokens and holds no duplicate."""
    tokens = [unescape(line) for line in read_lines(path)]
    if tokens[: len(specials)] != specials:
        raise UserError(f"{path}:1: a vocabulary starts with the lines {' '.join(specials)}; "
                        "this file was not written by the char or word tokenizer")
    seen: dict[str, int] = {}
    for number, token in enumerate(tokens, start=1):
        if not token:
            raise UserError(f"{path}:{number}: empty line; a vocabulary holds one token per line")
        if token in seen:
            raise UserError(f"{path}:{number}: token {token!r} already on line {seen[token]}; remove one")
        seen[token] = number
    return tokens
