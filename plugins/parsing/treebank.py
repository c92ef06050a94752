"""Penn Treebank .mrg files: split file ranges, reading with nltk, malformed-file checks, the NLTK sample download."""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
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
    candidates = [file_id(n, layout) for n in parse_ranges(ranges, key)]
    for fid in candidates:
        check_link(root / fid)
    ids = [fid for fid in candidates if (root / fid).is_file()]
    if not ids:
        example = root / file_id(parse_ranges(ranges, key)[0], layout) if ranges.strip() else root
        raise UserError(f"[task] {key} = {ranges!r}: no .mrg file of that range under {root} (looked for "
                        f"{example}); check data_dir, layout ({layout}) and the range")
    return root, ids


def check_link(path: Path) -> None:
    """A UserError for a dangling symlink, which would otherwise be skipped like a gap in an LDC section."""
    if path.is_symlink() and not path.exists():
        raise UserError(f"{path}: a symlink to {os.readlink(path)}, which does not exist; fix or remove the link")


def authorize(directory: Path) -> None:
    """Let nltk read corpus files under directory: nltk 3.10+ refuses paths outside nltk.data.path."""
    resolved = str(Path(directory).resolve())
    if resolved not in nltk.data.path:
        nltk.data.path.append(resolved)


TOKEN = re.compile(r"[()]|[^\s()]+")  # nltk's bracketed-tree tokens: brackets and atoms (labels, words)


@dataclass
class ScannedTree:
    """One tree of a file as the checker read it: the line it starts on and its words, in order."""

    line: int
    words: list[str] = field(default_factory=list)


@dataclass
class _Bracket:
    """A bracket still open while scanning: its label (None until read), where it opened, what it holds."""

    line: int
    label: str | None = None
    words: list[str] = field(default_factory=list)
    subtrees: int = 0


def check_trees(path: Path) -> list[ScannedTree]:
    """The trees of one .mrg file, or a UserError at the line of the first bracket or structure problem.

    nltk's reader "recovers" from a bad tree by returning a flat parse and silently rewrites some malformed
    ones ((PRP He she) -> (PRP He)), which would corrupt the data, so the tokens are checked here: every
    bracket has a label (only a tree's outermost one may be unlabelled) and is either a POS bracket over
    exactly one word or a constituent over brackets only. Trees start with '(' in the first column, as
    nltk's block detection assumes.
    """
    trees: list[ScannedTree] = []
    stack: list[_Bracket] = []
    for line_no, line in enumerate(read_text(path).splitlines(), start=1):
        if line.startswith("(") and stack:
            raise UserError(f"{path}:{trees[-1].line}: tree has {len(stack)} unclosed bracket(s) when the next "
                            f"tree starts at line {line_no}; add the missing ')'")
        for match in TOKEN.finditer(line):
            token, column = match.group(), match.start() + 1
            if token == "(":
                if not stack:
                    trees.append(ScannedTree(line_no))
                _open(path, line_no, stack)
            elif token == ")":
                if not stack:
                    raise UserError(f"{path}:{line_no}:{column}: ')' closes no open bracket; remove it")
                _close(path, stack)
            elif not stack:
                raise UserError(f"{path}:{line_no}:{column}: text outside a tree; every tree must be bracketed")
            else:
                _atom(path, line_no, token, stack, trees[-1])
    if stack:
        raise UserError(f"{path}:{trees[-1].line}: tree has {len(stack)} unclosed bracket(s) at the end of the "
                        "file; add the missing ')'")
    return trees


def _open(path: Path, line_no: int, stack: list[_Bracket]) -> None:
    """'(' starts a bracket inside the innermost one, which must then be a constituent."""
    if stack:
        parent = stack[-1]
        if parent.label is None:
            if len(stack) > 1:  # the outermost bracket is the treebank's unlabelled root; no other may be
                raise UserError(f"{path}:{line_no}: a bracket without a label inside a tree; write its label "
                                "after the '(', e.g. (NP ...)")
            parent.label = ""
        if parent.words:
            raise UserError(f"{path}:{line_no}: ({parent.label} {parent.words[0]} ...) mixes a word with "
                            "brackets; put the word in its own POS bracket, e.g. (NN word)")
        parent.subtrees += 1
    stack.append(_Bracket(line_no))


def _atom(path: Path, line_no: int, token: str, stack: list[_Bracket], tree: ScannedTree) -> None:
    """A label right after '(', otherwise a word, which must be the only child of a POS bracket."""
    node = stack[-1]
    if node.label is None:
        node.label = token
        return
    if node.subtrees:
        raise UserError(f"{path}:{line_no}: word {token!r} stands among the constituents of ({node.label} ...); "
                        f"put it in a POS bracket, e.g. (NN {token}), or delete it")
    if node.words:
        raise UserError(f"{path}:{line_no}: ({node.label} {node.words[0]} {token} ...) has more than one word; "
                        "give each word its own POS bracket")
    node.words.append(token)
    tree.words.append(token)


def _close(path: Path, stack: list[_Bracket]) -> None:
    """')' ends the innermost bracket, which must hold a word or a bracket."""
    node = stack.pop()
    if not node.words and not node.subtrees:
        shown = "()" if node.label is None else f"({node.label})"
        raise UserError(f"{path}:{node.line}: {shown} holds no word and no bracket; give it its word, e.g. "
                        "(PRP he), or delete it")


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
    trees: list[Tree] = []
    for fid in fileids:
        path = Path(root) / fid
        scanned = check_trees(path)
        parsed = parse_file(path, allowed=Path(root).resolve())
        if len(parsed) != len(scanned):
            raise UserError(f"{path}: nltk read {len(parsed)} trees where the brackets hold {len(scanned)}; "
                            "check that every tree starts with '(' in the first column")
        for tree, seen in zip(parsed, scanned):
            if tree.leaves() != seen.words:  # an nltk normalisation that check_trees did not foresee
                raise UserError(f"{path}:{seen.line}: nltk read this tree's words as {tree.leaves()!r} instead "
                                f"of {seen.words!r}; correct the tree's brackets")
        trees.extend(parsed)
    return trees


def parse_file(path: Path, allowed: Path) -> list[Tree]:
    """nltk's trees of one file, read from the folder it really is in (`allowed` is already authorized).

    nltk refuses a file whose resolved path leaves the reader's root, which a data_dir of symlinks into
    another folder does; the user chose that folder by linking to it, so it is authorized too.
    """
    target = Path(path).resolve()
    if not target.is_relative_to(allowed):
        authorize(target.parent)
    try:
        reader = BracketParseCorpusReader(str(target.parent), [target.name], encoding="utf-8")
        return list(reader.parsed_sents(target.name))
    except (PermissionError, ValueError) as err:
        if "Security Violation" not in str(err):
            raise
        raise UserError(f"{path} (resolved to {target}): nltk refuses to read it ({err}); copy the file into "
                        "data_dir instead of linking it") from None


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
