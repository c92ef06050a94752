"""A folder's tokenizer files: a run directory's, a prepared dataset's (corpus.prepare, where no run exists yet)
or the members' shared ones. Trained from the training text, copied from another folder, or loaded; a save cut
off never leaves half-written files that a later run would load (they are staged, then renamed into place)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from seqxduce import components
from seqxduce.api import Example, UserError
from seqxduce.atomic import replace_durably
from seqxduce.recipe import Recipe

TOKENIZER_WORK_PREFIX = ".tokenizer-work-"  # tokenizer files staged before they move into the folder


def tokenizer_prefixes(shared: bool) -> tuple[str, str]:
    """The file prefixes of the source and target tokenizers."""
    return ("tokenizer", "tokenizer") if shared else ("src_tokenizer", "tgt_tokenizer")


class TokenizerFiles:
    """The tokenizer files in one folder."""

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)

    def __repr__(self) -> str:
        return f"TokenizerFiles({str(self.folder)!r})"

    def has(self, recipe: Recipe) -> bool:
        """Whether the recipe's (target) tokenizer files are here."""
        prefix = tokenizer_prefixes(recipe.tokenizer.core.shared)[1]
        if not self.folder.is_dir():
            return False
        return any(p.name.startswith(prefix) and p.is_file() for p in self.folder.iterdir())

    def files(self, recipe: Recipe) -> list[Path]:
        """The files of the recipe's tokenizer(s) saved here."""
        prefixes = set(tokenizer_prefixes(recipe.tokenizer.core.shared))
        return sorted(p for p in self.folder.iterdir() if p.is_file() and p.name.startswith(tuple(prefixes)))

    def any_files(self) -> list[Path]:
        """Every tokenizer file here, shared or per side (what --overwrite removes)."""
        prefixes = {*tokenizer_prefixes(True), *tokenizer_prefixes(False)}
        return [p for p in sorted(self.folder.iterdir()) if p.is_file() and p.name.startswith(tuple(prefixes))]

    def train(self, recipe: Recipe, examples: Iterable[Example], reserved: tuple[str, ...] = ()) -> None:
        """Train the tokenizer(s) on training text and save them here.

        The tokenizer plugin saves into a staging folder whose files are then renamed into this folder, so an
        interrupted save never leaves a half-written tokenizer that a later run would load; files of an earlier
        tokenizer with the same prefix are removed first.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=TOKENIZER_WORK_PREFIX, dir=self.folder) as work:
            staging = Path(work) / "saved"
            staging.mkdir()
            tokenizers = components.train_tokenizers(recipe, examples, Path(work), reserved)
            src_prefix, tgt_prefix = tokenizer_prefixes(tokenizers.shared)
            tokenizers.src.save(staging, src_prefix)
            if not tokenizers.shared:
                tokenizers.tgt.save(staging, tgt_prefix)
            for prefix in {src_prefix, tgt_prefix}:
                for old in self.folder.glob(f"{prefix}*"):
                    old.unlink()
            for saved in staging.iterdir():
                replace_durably(saved, self.folder / saved.name)

    def copy(self, recipe: Recipe, source: Path) -> None:
        """Take the recipe's tokenizer files from another folder (a run, or the members' shared tokenizers) instead
        of training new ones, so that the two runs read and write the same ids and can be ensembled."""
        source_files = TokenizerFiles(source)
        if not source_files.has(recipe):
            raise UserError(f"--tokenizers-from {source}: holds no tokenizer files for [tokenizer] name = "
                            f"{recipe.tokenizer.core.name!r} (shared = {recipe.tokenizer.core.shared}); name the "
                            "folder of a run trained with the same [tokenizer] settings")
        self.folder.mkdir(parents=True, exist_ok=True)
        if source_files.folder.resolve() == self.folder.resolve():
            return
        for prefix in set(tokenizer_prefixes(recipe.tokenizer.core.shared)):
            for old in self.folder.glob(f"{prefix}*"):
                old.unlink()
        with tempfile.TemporaryDirectory(prefix=TOKENIZER_WORK_PREFIX, dir=self.folder) as work:
            for original in source_files.files(recipe):
                staged = Path(work) / original.name
                shutil.copyfile(original, staged)
                replace_durably(staged, self.folder / original.name)

    def load(self, recipe: Recipe) -> components.Tokenizers:
        """The tokenizer(s) saved here."""
        src_prefix, tgt_prefix = tokenizer_prefixes(recipe.tokenizer.core.shared)
        src = components.new_tokenizer(recipe)
        src.load(self.folder, src_prefix)
        if recipe.tokenizer.core.shared:
            return components.Tokenizers(src, src)
        tgt = components.new_tokenizer(recipe)
        tgt.load(self.folder, tgt_prefix)
        return components.Tokenizers(src, tgt)
