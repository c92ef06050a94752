"""Durable, atomic file writes: a file is either its old self or complete, even after a crash or a power cut.

The one way the core and plugins write a file that a later run trusts (checkpoints, the run's recipe, tokenizer
files, downloaded and unpacked data): write to `.NAME.XXXXXXXX.tmp` beside it, flush and fsync, rename over it,
fsync the directory. The new file gets the mode of any new file (0666 less the umask). A write that fails for
lack of room or rights (a full disk, a file-size limit) is one UserError naming the file; the temporary file is
removed and an earlier file of that name is kept.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from seqxduce.errors import UserError


class _Recorder:
    """A file object that keeps the OSError of a failed write: writers such as torch.save re-raise it as a
    RuntimeError that no longer says the disk was full."""

    def __init__(self, handle: IO):
        self.handle, self.error = handle, None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.handle.flush()


def temporary_name(path: Path) -> Path:
    """Where a write of path is staged: a hidden name beside it, which run directories clean up after a crash."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def temporary_name_pattern(names: str) -> str:
    """A regular expression of the staging names temporary_name gives the files whose names match `names`."""
    return rf"\.(?:{names})\.[0-9a-f]+\.tmp"


@contextlib.contextmanager
def atomic_write(path: Path | str, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Yield a file to write path's new content into; path is replaced by it only when the block ends without
    an error (else path is left as it was and the temporary file removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    recorder = None
    in_body = False  # an error of the caller's own (e.g. a bad gzip it reads) is its to report
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            recorder = _Recorder(handle)
            in_body = True
            yield recorder  # type: ignore[misc]
            in_body = False
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        cause = recorder.error if recorder is not None and recorder.error is not None else err
        if isinstance(cause, OSError) and (cause is not err or not in_body):
            raise UserError(f"{path}: not written ({cause.strerror or cause}); "
                            "any earlier file of that name is unchanged") from None
        raise
    fsync_directory(path.parent)


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write a UTF-8 text file atomically and durably."""
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_once_text(path: Path | str, text: str) -> bool:
    """Create a UTF-8 text file atomically and durably unless it exists; never replace it (a hard link to the
    staged file, which fails where the name is taken). Returns whether this call created it. For a file that
    several processes may create at once and whose identity is read (its time keys prepared data): the first
    one stays, so every process reads the same file."""
    path = Path(path)
    if path.is_file():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: a rename, which a racing writer may repeat
            if path.exists():
                return False
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(path.parent)
    return True


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
