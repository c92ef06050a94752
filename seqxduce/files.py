"""Output paths checked before any work (the writes themselves go through seqxduce.atomic), and the digest of a
file's bytes."""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqxduce.api import UserError


def check_writable(path: Path | str, what: str) -> None:
    """A UserError naming `what` (e.g. "--output out.txt") unless a file can be written at path: its folder
    exists and takes new files, and path is not a folder. Checked by writing, not by permission bits, which
    say nothing for root or for a read-only mount."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise UserError(f"{what}: {path} is a folder; name a file")
    if not folder.exists():
        raise UserError(f"{what}: the folder {folder} does not exist; create it first")
    if not folder.is_dir():
        raise UserError(f"{what}: {folder} is not a folder")
    check_folder_writable(folder, what)
    if path.exists():
        try:
            with path.open("ab"):
                pass
        except OSError as err:
            raise UserError(f"{what}: {path} cannot be written ({err.strerror or err})") from None


WRITE_CHECK_PREFIX = ".write-check-"  # the probe check_folder_writable creates and removes


def check_folder_writable(folder: Path | str, what: str) -> None:
    """A UserError naming `what` unless a new file can be created (and removed) in folder."""
    folder = Path(folder)
    probe = folder / f"{WRITE_CHECK_PREFIX}{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as err:
        raise UserError(f"{what}: cannot write in {folder} ({err.strerror or err}); make it writable or "
                        "choose another place") from None
    os.close(fd)
    probe.unlink(missing_ok=True)


def file_digest(path: Path | str, make: Callable[[], Any] = hashlib.sha256) -> str:
    """The hex digest of a file's bytes by the hash `make` builds, read in chunks (a checkpoint or a dataset's array
    can be gigabytes). hashlib.file_digest does this from Python 3.11 on; the package supports 3.10."""
    digest = make()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()
