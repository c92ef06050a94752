"""Read a parallel corpus with checks, and clean training pairs the way WMT systems usually do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from seqxduce.api import UserError

from .download import log


@dataclass
class CorpusStats:
    """What reading (and cleaning) one parallel corpus found."""

    source_file: str
    target_file: str
    read: int = 0
    kept: int = 0
    empty: int = 0  # pairs with an empty side, whether dropped (training) or kept (evaluation)
    empty_dropped: int = 0
    too_long: int = 0
    bad_ratio: int = 0

    def summary(self) -> str:
        """One line for the log: pairs read, dropped per reason, kept."""
        return (
            f"{self.source_file} | {self.target_file}: {self.read} pairs read, {self.kept} kept; dropped "
            f"{self.empty_dropped} empty, {self.too_long} too long, {self.bad_ratio} by length ratio"
            + (f"; kept {self.empty - self.empty_dropped} with an empty side" if self.empty > self.empty_dropped
               else "")
        )


@dataclass(frozen=True)
class CleanRules:
    """Which pairs to drop: empty sides, too many whitespace tokens, too unequal lengths (0 = off)."""

    drop_empty: bool = True
    max_len: int = 0
    max_ratio: float = 0.0


def read_lines_checked(path: Path) -> Iterator[str]:
    """Yield the lines of a UTF-8 file (split on \\n only), raising a UserError that names a bad line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                yield raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(
                    f"{path}:{number}: invalid UTF-8 ({err.reason} at byte {err.start}); convert the file to UTF-8"
                ) from None


def _count_rest(lines: Iterator[str]) -> int:
    return sum(1 for _ in lines)


def read_parallel(source: Path, target: Path) -> Iterator[tuple[str, str]]:
    """Yield aligned (source, target) lines; a UserError names both files and counts if they differ."""
    src_lines, tgt_lines = read_lines_checked(source), read_lines_checked(target)
    count = 0
    while True:
        src = next(src_lines, None)
        tgt = next(tgt_lines, None)
        if src is None or tgt is None:
            if src is None and tgt is None:
                return
            src_count = count + (0 if src is None else 1 + _count_rest(src_lines))
            tgt_count = count + (0 if tgt is None else 1 + _count_rest(tgt_lines))
            raise UserError(
                f"{source} has {src_count} lines but {target} has {tgt_count}: a parallel corpus needs one "
                "target line per source line"
            )
        count += 1
        yield src, tgt


def drop_reason(src: str, tgt: str, rules: CleanRules) -> str:
    """Why a pair is dropped under rules ("empty", "too_long", "bad_ratio"), or "" to keep it."""
    src_len, tgt_len = len(src.split()), len(tgt.split())
    if src_len == 0 or tgt_len == 0:
        return "empty" if rules.drop_empty else ""
    if rules.max_len and (src_len > rules.max_len or tgt_len > rules.max_len):
        return "too_long"
    if rules.max_ratio and max(src_len / tgt_len, tgt_len / src_len) > rules.max_ratio:
        return "bad_ratio"
    return ""


def stream_parallel(source: Path, target: Path, rules: CleanRules | None, stats: CorpusStats
                    ) -> Iterator[tuple[str, str]]:
    """Yield the checked pairs that rules keep (None: all), one at a time, counting into stats as it goes: a corpus
    of millions of pairs is never held whole."""
    for src, tgt in read_parallel(source, target):
        stats.read += 1
        if not src.strip() or not tgt.strip():
            stats.empty += 1  # counted even where kept: an evaluation split is never filtered
        reason = drop_reason(src, tgt, rules) if rules else ""
        if reason:
            field = "empty_dropped" if reason == "empty" else reason
            setattr(stats, field, getattr(stats, field) + 1)
            continue
        stats.kept += 1
        yield src, tgt


def load_parallel(source: Path, target: Path, rules: CleanRules | None = None,
                  quiet: bool = False) -> tuple[list[tuple[str, str]], CorpusStats]:
    """Read a checked parallel corpus, drop pairs by rules (None: keep all), and log the counts."""
    stats = CorpusStats(str(source), str(target))
    pairs = list(stream_parallel(source, target, rules, stats))
    if not quiet:
        log(stats.summary())
    return pairs, stats
