"""Durable, atomic file writes: a file is either its old self or complete, even after a crash or a power cut.

The one way the core and plugins write a file that a later run trusts (checkpoints, the run's recipe, tokenizer
files, downloaded and unpacked data): write beside it, flush and fsync, rename over it, fsync the directory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_write(path: Path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Yield a file to write path's new content into; path is replaced by it only when the block ends without
    an error (else path is left as it was and the temporary file removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """Write a UTF-8 text file atomically and durably."""
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def replace_durably(finished: Path, path: Path) -> None:
    """Rename a file written elsewhere first (a resumable download, a staged tokenizer file) over path, with its
    content and the rename made durable."""
    with open(finished, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(finished, path)
    fsync_directory(Path(path).parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename in directory durable: without this a power cut can lose the new name (POSIX only)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows, where directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
