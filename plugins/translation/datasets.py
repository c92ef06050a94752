"""The data sets a translation recipe can name, each knowing where its splits' text files are."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from seqxduce.api import UserError

from .settings import TranslationSettings


class Dataset(Protocol):
    """Where a data set's plain parallel text lives, and how to get it there."""

    def prepare(self, data_dir: Path) -> None:
        """Download and unpack what is missing under data_dir; a second call does nothing."""

    def files(self, split: str, data_dir: Path) -> tuple[Path, Path]:
        """The (source, target) plain-text files of a split, after prepare()."""


class ParallelFiles:
    """The user's own text: <data_dir>/<prefix>.<lang> per split, nothing to download."""

    def __init__(self, settings: TranslationSettings):
        self.settings = settings
        self.prefixes = {"train": settings.train_prefix, "valid": settings.valid_prefix,
                         "test": settings.test_prefix}

    def prepare(self, data_dir: Path) -> None:
        """Nothing to fetch: files() reports a missing file with the recipe key that names it."""

    def files(self, split: str, data_dir: Path) -> tuple[Path, Path]:
        """<data_dir>/<prefix>.<src_lang> and .<tgt_lang> for the split."""
        prefix = self.prefixes[split]
        paths = (Path(data_dir) / f"{prefix}.{self.settings.src_lang}",
                 Path(data_dir) / f"{prefix}.{self.settings.tgt_lang}")
        for path in paths:
            if not path.is_file():
                raise UserError(
                    f"{path}: no such file; [task] dataset = \"files\" reads <data_dir>/<{split}_prefix>.<lang>: "
                    f"set [task] data_dir and {split}_prefix to where your {split} text is"
                )
        return paths


def make_dataset(settings: TranslationSettings) -> Dataset:
    """The data set named by [task] dataset."""
    if settings.dataset == "wmt14":
        from .wmt14 import Wmt14

        return Wmt14(settings)
    if settings.dataset == "multi30k":
        from .multi30k import Multi30k

        return Multi30k(settings)
    return ParallelFiles(settings)
