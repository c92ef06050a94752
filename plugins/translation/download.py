"""Fetch, verify and unpack data files; a file is only ever trusted after an atomic rename.

A download streams into `<name>.part`. An interrupted one keeps that file and the next call asks the
server for the rest with an HTTP Range request (or starts over when the server ignores it). Only a
complete file whose size and checksum (where known) match is renamed to `<name>`, so the presence of
`<name>` means "verified", and a second run downloads nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import http.client
import os
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write, atomic_write_text, replace_durably

CHUNK = 1 << 20
USER_AGENT = "seqxduce (https://github.com/seqxduce)"
NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)

Opener = Callable[[urllib.request.Request], "http.client.HTTPResponse"]


@dataclass(frozen=True)
class Source:
    """One remote file: where it is, the name it gets locally and what it must look like on arrival.

    Checksums are optional because not every publisher gives one: set `sha256` or `md5` only from a
    checksum the publisher (or a registry such as sacrebleu's) states, never one computed from an
    unverified copy. Without one, `size` and the archive's own CRC (gzip, zip) still catch truncation.
    """

    url: str
    filename: str
    sha256: str | None = None
    md5: str | None = None
    size: int | None = None


def log(message: str) -> None:
    """One progress line on stderr, so stdout stays free for results."""
    print(f"[seqxduce translation] {message}", file=sys.stderr, flush=True)


def fetch(source: Source, directory: Path, opener: Opener | None = None, retries: int = 3) -> Path:
    """Return directory/source.filename, downloading, resuming and verifying it first if it is not there."""
    directory = Path(directory)
    target = directory / source.filename
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    open_url = opener or _default_opener()
    for attempt in range(1, retries + 1):
        try:
            _download(source.url, part, open_url)
            break
        except urllib.error.HTTPError as err:  # the server answered: retrying will not change its mind
            raise UserError(f"{source.url}: HTTP {err.code} {err.reason}; check the address or your network") from None
        except NETWORK_ERRORS as err:
            kept = part.stat().st_size if part.exists() else 0
            log(f"{source.url}: attempt {attempt}/{retries} failed ({err}); {kept} bytes kept in {part}")
            if attempt == retries:
                raise UserError(
                    f"{source.url}: download failed after {retries} attempts ({err}); run again to resume "
                    f"from {part}, or place the file at {target} yourself"
                ) from None
    _verify(source, part)
    replace_durably(part, target)
    log(f"saved {target}")
    return target


def _default_opener() -> Opener:
    opener = urllib.request.build_opener()
    return lambda request: opener.open(request, timeout=60)


def _download(url: str, part: Path, open_url: Opener) -> None:
    """Stream url into part, continuing where an earlier attempt stopped if the server allows it."""
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = open_url(request)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # our .part is not a prefix the server recognises: start over
            part.unlink()
            return _download(url, part, open_url)
        raise
    with response:
        status = getattr(response, "status", None) or response.getcode() or 200
        resumed = have > 0 and status == 206
        if have and not resumed:
            log(f"{url}: server sent the whole file instead of a range; restarting")
        expected = _expected_total(response, have if resumed else 0)
        log(f"{'resuming' if resumed else 'downloading'} {url}" + (f" ({expected} bytes)" if expected else ""))
        with open(part, "ab" if resumed else "wb") as out:
            while chunk := response.read(CHUNK):
                out.write(chunk)
    got = part.stat().st_size
    if expected is not None and got < expected:
        raise ConnectionError(f"connection closed after {got} of {expected} bytes")


def _expected_total(response: http.client.HTTPResponse, offset: int) -> int | None:
    """The full file size the server announces (Content-Range total, or offset + Content-Length)."""
    content_range = response.headers.get("Content-Range", "")
    match = re.match(r"bytes \d+-\d+/(\d+)", content_range)
    if match:
        return int(match.group(1))
    length = response.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _verify(source: Source, part: Path) -> None:
    """Check size and checksum of a finished download; a bad file is removed so it is never trusted."""
    size = part.stat().st_size
    problem = ""
    if source.size is not None and size != source.size:
        problem = f"size {size} bytes, expected {source.size}"
    else:
        for algorithm, expected in (("sha256", source.sha256), ("md5", source.md5)):
            if expected:
                actual = file_digest(part, algorithm)
                if actual != expected.lower():
                    problem = f"{algorithm} {actual}, expected {expected}"
                    break
    if problem:
        part.unlink()
        raise UserError(
            f"{source.url}: downloaded file has {problem}; it was deleted. Run again to download it anew; "
            "if this repeats, the file on the server changed"
        )


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file, read in chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- unpacking


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack a .tgz/.tar.gz/.tar/.zip archive into the folder dest (kept if it exists); return dest."""
    archive, dest = Path(archive), Path(dest)
    if dest.is_dir():
        return dest
    staging = dest.with_name(dest.name + ".partial")
    if staging.exists():  # left by an interrupted unpack: never trusted
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    log(f"unpacking {archive.name} into {dest}")
    name = archive.name.lower()
    try:
        if name.endswith((".tgz", ".tar.gz", ".tar")):
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
        elif name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(staging)
        else:
            raise UserError(f"{archive}: unknown archive type; expected .tgz, .tar.gz, .tar or .zip")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(f"{archive}: cannot unpack ({err}); delete it and run again to download it anew") from None
    os.replace(staging, dest)
    return dest


def gunzip(source: Path, dest: Path) -> Path:
    """Decompress a .gz file to dest (kept if it exists), atomically; return dest."""
    source, dest = Path(source), Path(dest)
    if dest.is_file():
        return dest
    try:
        with gzip.open(source, "rb") as fin, atomic_write(dest) as fout:
            shutil.copyfileobj(fin, fout, CHUNK)
    except (OSError, EOFError) as err:
        raise UserError(f"{source}: cannot decompress ({err}); delete it and run again to download it anew") from None
    return dest


SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)


def extract_segments(markup: Path, dest: Path) -> Path:
    """Write the text of each `<seg id=..>` line of an SGM or XML test set to dest, one per line.

    Whitespace is collapsed as sacrebleu does, so references match what sacrebleu scores against.
    WMT's SGM files are "fake SGML" whose text is not entity-escaped, so only .xml files are unescaped.
    """
    markup, dest = Path(markup), Path(dest)
    if dest.is_file():
        return dest
    unescape = markup.suffix.lower() == ".xml"
    segments = []
    with open(markup, encoding="utf-8") as f:
        for line in f:
            match = SEG.search(line)
            if match:
                text = html.unescape(match.group(1)) if unescape else match.group(1)
                segments.append(re.sub(r"\s+", " ", text.strip()))
    if not segments:
        raise UserError(f"{markup}: no <seg> lines found; is this an SGM/XML test set?")
    atomic_write_text(dest, "".join(s + "\n" for s in segments))
    return dest


def concatenate(parts: list[Path], dest: Path) -> Path:
    """Join text files into dest (kept if it exists), atomically, adding a missing final newline."""
    dest = Path(dest)
    if dest.is_file():
        return dest
    with atomic_write(dest) as out:
        for path in parts:
            last = b"\n"
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    out.write(chunk)
                    last = chunk[-1:]
            if last != b"\n":
                out.write(b"\n")
    return dest
