"""Penn Treebank .mrg files: split file ranges, reading with nltk, malformed-file checks, the NLTK sample download."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import nltk
from nltk.corpus.reader import BracketParseCorpusReader
from nltk.tree import Tree

from seqxduce.api import UserError

RANGE = re.compile(r"^(\d{4})(?:-(\d{4}))?$")
SECTION_DIR = re.compile(r"^\d{2}$")
SAMPLE_PACKAGE = "treebank"  # nltk's id of the 5% WSJ sample (files wsj_0001..wsj_0199)


def parse_ranges(text: str, key: str) -> list[int]:
    """'0001-0159,0170' -> [1, ..., 159, 170]; `key` names the recipe setting in errors."""
    numbers: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        match = RANGE.match(part)
        if not match:
            raise UserError(f"[task] {key} = {text!r}: write file ranges as 4-digit wsj numbers, "
                            "e.g. '0001-0159' or '0200-2199,2300'")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if last < first:
            raise UserError(f"[task] {key}: range {part!r} ends before it starts")
        numbers.extend(range(first, last + 1))
    return numbers


def detect_layout(data_dir: Path) -> str:
    """'ldc' when data_dir (or data_dir/wsj) holds two-digit section folders, else 'flat'."""
    for base in (data_dir / "wsj", data_dir):
        if base.is_dir() and any(p.is_dir() and SECTION_DIR.match(p.name) for p in base.iterdir()):
            return "ldc"
    return "flat"


def corpus_root(data_dir: Path, layout: str) -> Path:
    """The folder the file ids are relative to: data_dir, or data_dir/wsj for an LDC tree that has one."""
    if layout == "ldc" and (data_dir / "wsj").is_dir():
        return data_dir / "wsj"
    return data_dir


def file_id(number: int, layout: str) -> str:
    """The path of file wsj_NNNN relative to the corpus root."""
    name = f"wsj_{number:04d}.mrg"
    return f"{number // 100:02d}/{name}" if layout == "ldc" else name


def split_files(data_dir: Path, ranges: str, layout: str, key: str) -> tuple[Path, list[str]]:
    """The corpus root and the ids of the existing files in the ranges (LDC sections have gaps, so missing
    numbers are skipped); a UserError when none exists."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise UserError(f"[task] data_dir {data_dir}: no such directory; point it at the treebank "
                        "(or run `seqxduce prepare` to fetch the NLTK sample)")
    if layout == "auto":
        layout = detect_layout(data_dir)
    root = corpus_root(data_dir, layout)
    ids = [fid for fid in (file_id(n, layout) for n in parse_ranges(ranges, key)) if (root / fid).is_file()]
    if not ids:
        example = root / file_id(parse_ranges(ranges, key)[0], layout) if ranges.strip() else root
        raise UserError(f"[task] {key} = {ranges!r}: no .mrg file of that range under {root} (looked for "
                        f"{example}); check data_dir, layout ({layout}) and the range")
    return root, ids


def authorize(directory: Path) -> None:
    """Let nltk read corpus files under directory: nltk 3.10+ refuses paths outside nltk.data.path."""
    resolved = str(Path(directory).resolve())
    if resolved not in nltk.data.path:
        nltk.data.path.append(resolved)


def check_brackets(path: Path) -> int:
    """Count the trees of one .mrg file, or raise a UserError at the line of the first bracket problem.

    nltk's reader "recovers" from a bad tree by returning a flat parse, which would silently corrupt the
    data; trees start with '(' in the first column, as nltk's block detection assumes.
    """
    text = read_text(path)
    depth = 0
    trees = 0
    start_line = 0
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.startswith("(") and depth > 0:
            raise UserError(f"{path}:{start_line}: tree has {depth} unclosed bracket(s) when the next tree "
                            f"starts at line {line_no}; add the missing ')'")
        for column, char in enumerate(line, start=1):
            if char == "(":
                if depth == 0:
                    trees += 1
                    start_line = line_no
                depth += 1
            elif char == ")":
                depth -= 1
                if depth < 0:
                    raise UserError(f"{path}:{line_no}:{column}: ')' closes no open bracket; remove it")
            elif depth == 0 and not char.isspace():
                raise UserError(f"{path}:{line_no}:{column}: text outside a tree; every tree must be bracketed")
    if depth > 0:
        raise UserError(f"{path}:{start_line}: tree has {depth} unclosed bracket(s) at the end of the file; "
                        "add the missing ')'")
    return trees


def read_text(path: Path) -> str:
    """A treebank file as text, with a UserError naming the file and line of undecodable bytes."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 ({err.reason}); convert the file to UTF-8") from None


def read_trees(root: Path, fileids: list[str]) -> list[Tree]:
    """The trees of the given files, in order, read with nltk's bracketed corpus reader (empty root dropped)."""
    authorize(root)
    reader = BracketParseCorpusReader(str(Path(root).resolve()), fileids, encoding="utf-8")
    trees: list[Tree] = []
    for fid in fileids:
        expected = check_brackets(Path(root) / fid)
        parsed = list(reader.parsed_sents(fid))
        if len(parsed) != expected:
            raise UserError(f"{Path(root) / fid}: nltk read {len(parsed)} trees where the brackets hold "
                            f"{expected}; check that every tree starts with '(' in the first column")
        trees.extend(parsed)
    return trees


def read_split(data_dir: Path, ranges: str, layout: str, key: str) -> list[Tree]:
    """All trees of the files a split's ranges name (see split_files)."""
    root, ids = split_files(Path(data_dir), ranges, layout, key)
    return read_trees(root, ids)


def has_treebank(data_dir: Path) -> bool:
    """Whether data_dir already holds .mrg files in either layout."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        return False
    return any(data_dir.glob("wsj_*.mrg")) or detect_layout(data_dir) == "ldc"


def download_sample(data_dir: Path) -> Path:
    """Fetch the NLTK Penn Treebank sample with nltk's downloader and put its wsj_*.mrg files in data_dir."""
    import nltk.downloader

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    # inside data_dir rather than the shared /tmp, which nltk refuses as a download directory
    staging = data_dir / ".nltk_download"
    try:
        ok = nltk.downloader.Downloader().download(SAMPLE_PACKAGE, download_dir=str(staging), quiet=True)
        files = _sample_files(staging) if ok else []
        if not files:
            raise UserError(f"could not download the NLTK treebank sample into {data_dir} (no internet?); "
                            "put the wsj_*.mrg files there yourself, or point [task] data_dir at a treebank")
        for f in files:
            shutil.copyfile(f, data_dir / f.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return data_dir


def _sample_files(staging: Path) -> list[Path]:
    """The sample's combined/wsj_*.mrg files, unzipping the package when the downloader left it zipped."""
    combined = staging / "corpora" / "treebank" / "combined"
    archive = staging / "corpora" / "treebank.zip"
    if not combined.is_dir() and archive.is_file():
        with zipfile.ZipFile(archive) as zf:
            members = [m for m in zf.namelist() if re.match(r"^treebank/combined/wsj_\d{4}\.mrg$", m)]
            zf.extractall(staging / "corpora", members=members)
    return sorted(combined.glob("wsj_*.mrg")) if combined.is_dir() else []
