"""The run directory: what a training run writes there, whether a run may start or resume in it, and which
checkpoint decoding uses.

A run directory holds:

    recipe.toml          the resolved recipe, its relative paths resolved against the run directory
    tokenizer*           the trained tokenizer (src_tokenizer* and tgt_tokenizer* when not shared)
    checkpoints/         step_<8 digits>.pt: model, optimizer and data position, the newest kept
    average.pt           the average of the last checkpoints (train.average_last), if asked for
    metrics.jsonl        one JSON object per training log line and validation
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqxduce import components
from seqxduce.api import Example, UserError
from seqxduce.recipe import Recipe, load_recipe

RECIPE_FILE = "recipe.toml"
CHECKPOINT_DIR = "checkpoints"
AVERAGE_FILE = "average.pt"
METRICS_FILE = "metrics.jsonl"
STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


def atomic_write_text(path: Path, text: str) -> None:
    """Write a text file through a temporary file and a rename, so a crash never leaves half of it."""
    path = Path(path)
    part = path.with_name(f".{path.name}.part")
    part.write_text(text, encoding="utf-8")
    os.replace(part, path)


def step_checkpoints(directory: Path) -> list[Path]:
    """Step checkpoints in a directory, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := STEP_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def step_path(directory: Path, step: int) -> Path:
    """Where the checkpoint of an optimizer step goes in a directory."""
    return Path(directory) / f"step_{step:08d}.pt"


def prune(directory: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` step checkpoints; returns what was removed."""
    removed = step_checkpoints(directory)[:-keep] if keep > 0 else []
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def tokenizer_prefixes(shared: bool) -> tuple[str, str]:
    """The file prefixes of the source and target tokenizers."""
    return ("tokenizer", "tokenizer") if shared else ("src_tokenizer", "tgt_tokenizer")


class RunDir:
    """One run directory and the files in it."""

    def __init__(self, path: Path | str):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def recipe_file(self) -> Path:
        return self.path / RECIPE_FILE

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def average_file(self) -> Path:
        return self.path / AVERAGE_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    # ------------------------------------------------------------ checkpoints

    def step_checkpoints(self) -> list[Path]:
        """The step checkpoints, oldest first."""
        return step_checkpoints(self.checkpoint_dir)

    def step_path(self, step: int) -> Path:
        """Where the checkpoint of an optimizer step goes."""
        return step_path(self.checkpoint_dir, step)

    def load_latest(self) -> tuple[Path, dict[str, Any]]:
        """The newest readable step checkpoint and its state; a damaged newer one (a crash while the disk was
        full, say) is reported and passed over, so a resume never depends on it."""
        from seqxduce import checkpoint
        from seqxduce.console import console

        found = self.step_checkpoints()
        if not found:
            raise UserError(f"{self.checkpoint_dir}: holds no step checkpoint")
        for path in reversed(found):
            try:
                return path, checkpoint.load(path)
            except UserError as err:
                console.print(f"warning: skipping {err}")
        raise UserError(f"{self.checkpoint_dir}: none of its {len(found)} checkpoints is readable; "
                        "train into a new --out")

    def decode_checkpoint(self) -> Path:
        """The checkpoint decoding uses: the average when there is one, else the latest step."""
        if self.average_file.is_file():
            return self.average_file
        steps = self.step_checkpoints()
        if not steps:
            raise UserError(f"{self.path}: no checkpoint in {self.checkpoint_dir}; train first")
        return steps[-1]

    # ------------------------------------------------------------ starting and resuming

    def check_start(self, resume: bool) -> None:
        """A new run needs a directory without checkpoints; a resumed one needs a checkpoint to go on from."""
        existing = self.step_checkpoints()
        if existing and not resume:
            raise UserError(
                f"{self.path} already holds checkpoints (latest {existing[-1].name}); "
                "continue it with --resume or train into another --out"
            )
        if resume and not existing:
            raise UserError(f"--resume: {self.checkpoint_dir} holds no checkpoint to resume from")

    def drop_average(self) -> None:
        """Remove the average: it no longer stands for a run that goes on."""
        self.average_file.unlink(missing_ok=True)

    # ------------------------------------------------------------ recipe

    def load_recipe(self, overrides: Sequence[str] = ()) -> Recipe:
        """The resolved recipe saved here, with command-line overrides applied."""
        if not self.recipe_file.is_file():
            raise UserError(f"{self.path}: not a run directory (no {RECIPE_FILE}); give the --out of `seqxduce train`")
        return load_recipe(self.recipe_file, tuple(overrides))

    def write_recipe(self, recipe: Recipe) -> None:
        """Save the recipe, its relative paths resolved against this directory (the caller's recipe is kept)."""
        atomic_write_text(self.recipe_file, recipe.relocated(self.path).to_toml())

    # ------------------------------------------------------------ tokenizers

    def has_tokenizers(self, recipe: Recipe) -> bool:
        """Whether the recipe's (target) tokenizer files are here."""
        prefix = tokenizer_prefixes(recipe.tokenizer.core.shared)[1]
        if not self.path.is_dir():
            return False
        return any(p.name.startswith(prefix) and p.is_file() for p in self.path.iterdir())

    def train_tokenizers(self, recipe: Recipe, examples: list[Example]) -> None:
        """Train the tokenizer(s) on training text and save them here.

        The tokenizer plugin saves into a staging folder whose files are then renamed into the run directory,
        so an interrupted save never leaves a half-written tokenizer that a later run would load; files of an
        earlier tokenizer with the same prefix are removed first.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".tokenizer-work-", dir=self.path) as work:
            staging = Path(work) / "saved"
            staging.mkdir()
            tokenizers = components.train_tokenizers(recipe, examples, Path(work))
            src_prefix, tgt_prefix = tokenizer_prefixes(tokenizers.shared)
            tokenizers.src.save(staging, src_prefix)
            if not tokenizers.shared:
                tokenizers.tgt.save(staging, tgt_prefix)
            for prefix in {src_prefix, tgt_prefix}:
                for old in self.path.glob(f"{prefix}*"):
                    old.unlink()
            for saved in staging.iterdir():
                os.replace(saved, self.path / saved.name)

    def load_tokenizers(self, recipe: Recipe) -> components.Tokenizers:
        """The tokenizer(s) saved here."""
        src_prefix, tgt_prefix = tokenizer_prefixes(recipe.tokenizer.core.shared)
        src = components.new_tokenizer(recipe)
        src.load(self.path, src_prefix)
        if recipe.tokenizer.core.shared:
            return components.Tokenizers(src, src)
        tgt = components.new_tokenizer(recipe)
        tgt.load(self.path, tgt_prefix)
        return components.Tokenizers(src, tgt)

    def components(self, recipe: Recipe, task=None) -> components.Components:
        """The recipe's task, the tokenizers saved here and a fresh model for them (training and decoding alike)."""
        return components.assemble(recipe, self.load_tokenizers(recipe), task)


def locate(path: Path | str) -> tuple[RunDir, Path]:
    """(run directory, checkpoint file) for a run directory or a checkpoint inside one."""
    path = Path(path)
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent
        return RunDir(run_dir), path
    if not path.is_dir():
        raise UserError(f"{path}: no such run directory or checkpoint")
    run = RunDir(path)
    return run, run.decode_checkpoint()
