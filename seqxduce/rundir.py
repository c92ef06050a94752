"""The run directory: what a training run writes there, whether a run may start or resume in it, and which
checkpoint decoding uses.

A run directory holds:

    recipe.toml          the resolved recipe, its relative paths resolved against the run directory
    tokenizer*           the trained tokenizer (src_tokenizer* and tgt_tokenizer* when not shared)
    checkpoints/         step_<8 digits>.pt: model, optimizer and data position, the newest kept
    average.pt           the average of the last checkpoints (train.average_last), if asked for
    best.pt              the checkpoint of the best validation so far, where the trainer keeps one
    metrics.jsonl        one JSON object per training log line and validation
    sampled/             the current epoch's training pairs when a tokenizer samples (corpus.sampled_epochs)
    README.md            what was trained, its figures and the commands that use it (inspection.run_readme)
    tensorboard/         TensorBoard event files, when [train] tensorboard = true (training.tensorboard_log)
    members/             members 2..N and their shared tokenizers, when [train] members = N (members.py)
    word_kd.json         which teacher's distributions a [distill] word_kd run trains with (training.run)
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write_text, temporary_name_pattern
from seqxduce.files import WRITE_CHECK_PREFIX, check_folder_writable
from seqxduce.recipe import Recipe, load_recipe
from seqxduce.tokenizer_files import TOKENIZER_WORK_PREFIX, TokenizerFiles

RECIPE_FILE = "recipe.toml"
CHECKPOINT_DIR = "checkpoints"
AVERAGE_FILE = "average.pt"
BEST_FILE = "best.pt"
# what `decode --checkpoint` may name besides a file (RunDir.decode_checkpoint)
CHECKPOINT_CHOICES = ("best", "average", "last")
METRICS_FILE = "metrics.jsonl"
SAMPLED_DIR = "sampled"
STEP_NAME = r"step_(\d+)\.pt"
STEP_FILE = re.compile(rf"^{STEP_NAME}$")
# what a save cut off leaves behind, built from the names above so that a new file of the run is covered: the
# staging names of atomic writes (seqxduce.atomic), tokenizer staging folders, write checks (seqxduce.files)
_SAVED = "|".join([STEP_NAME.replace("(", "(?:"),
                   *(re.escape(name) for name in (AVERAGE_FILE, BEST_FILE, RECIPE_FILE, METRICS_FILE))])
ORPHAN = re.compile(rf"^(?:{temporary_name_pattern(_SAVED)}|{re.escape(TOKENIZER_WORK_PREFIX)}.*"
                    rf"|{re.escape(WRITE_CHECK_PREFIX)}[0-9a-f]+)$")


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


def _is_orphan(path: Path) -> bool:
    return bool(ORPHAN.match(path.name))


def _remove(path: Path) -> bool:
    """Remove a file or folder; False when it is already gone (another process of the run, e.g. a rank whose
    write check removes its own probe, got there first)."""
    try:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    except FileNotFoundError:
        return False
    return True


def _describe(paths: Sequence[Path], base: Path) -> str:
    """'recipe.toml, checkpoints/step_00000004.pt and 3 more' for a message."""
    names = [str(p.relative_to(base)) if p.is_relative_to(base) else str(p) for p in paths]
    shown = ", ".join(names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


class RunDir:
    """One run directory and the files in it."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.tokenizers = TokenizerFiles(self.path)  # the run's tokenizer files, beside its checkpoints

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
    def best_file(self) -> Path:
        return self.path / BEST_FILE

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

    def newest_readable(self, mmap: bool = False) -> tuple[Path, dict[str, Any]]:
        """The newest readable step checkpoint and its state (with mmap, its tensors mapped, not read); a
        damaged newer one (a save cut off by a full disk, say) is reported and passed over."""
        from seqxduce import checkpoint
        from seqxduce.console import console

        found = self.step_checkpoints()
        if not found:
            raise UserError(f"{self.path}: no checkpoint in {self.checkpoint_dir}; train first")
        for path in reversed(found):
            try:
                return path, checkpoint.load(path, mmap=mmap)
            except UserError as err:
                console.print(f"warning: passing over {err}")
        raise UserError(f"{self.checkpoint_dir}: none of its {len(found)} checkpoints is readable; "
                        "train into a new --out")

    def resume_state(self) -> tuple[Path, dict[str, Any]]:
        """The checkpoint a resume continues from: the newest readable one, which must hold the optimizer state
        and data position that training writes."""
        path, state = self.newest_readable()
        missing = [key for key in ("optimizer", "step", "epoch", "step_in_epoch", "rng") if key not in state]
        if missing:
            raise UserError(f"--resume: {path}: holds no {missing[0]} (an averaged checkpoint? `seqxduce average` "
                            f"writes only weights); move it out of {self.checkpoint_dir} and resume from the step "
                            "checkpoints training wrote")
        return path, state

    def decode_checkpoint(self, choice: str | None = None) -> Path:
        """The checkpoint decoding uses: by default the average when there is one (and it is current), else the
        newest readable step checkpoint; choice "best", "average" or "last" asks for that one (refused in one
        line when the run has none)."""
        if choice is None:
            return self.decode_checkpoint("average" if self.average_file.is_file() else "last")
        if choice == "best":
            if not self.best_file.is_file():
                raise UserError(f"--checkpoint best: {self.path} kept no best checkpoint ({BEST_FILE}); the trainer "
                                "keeps one at each validation improvement of runs that validate ([train] "
                                "validate_every > 0); decode --checkpoint average or last, or train with validation")
            return self.best_file
        if choice == "average":
            if not self.average_file.is_file():
                raise UserError(f"--checkpoint average: {self.path} has no {AVERAGE_FILE}; make one with `seqxduce "
                                f"average CHECKPOINTS... -o {self.average_file}` (or [train] average_last), or decode "
                                "--checkpoint last")
            self.check_average()
            return self.average_file
        if choice == "last":
            return self.newest_readable(mmap=True)[0]
        raise UserError(f"--checkpoint {choice}: choose one of {', '.join(CHECKPOINT_CHOICES)}, or name a file")

    def check_average(self) -> None:
        """A UserError unless the average stands for this run as it is now: made from its checkpoints (the same
        run) and none of them newer than the ones it averages."""
        from seqxduce import checkpoint

        average = checkpoint.load(self.average_file, mmap=True)
        if not self.step_checkpoints():
            return  # the step checkpoints were removed to save space: nothing contradicts the average
        newest_path, newest = self.newest_readable(mmap=True)
        steps = average.get("averaged_steps") or [int(average.get("step", 0))]
        same_run = None in (average.get("run_id"), newest.get("run_id")) or average["run_id"] == newest["run_id"]
        if not same_run:
            reason = f"it averages checkpoints of another run than {newest_path.name}"
        elif int(newest.get("step", 0)) > max(steps):
            reason = (f"it averages steps {', '.join(map(str, steps))} but the run went on to "
                      f"{newest_path.name}")
        else:
            return
        raise UserError(f"{self.average_file}: stale, {reason}; finish the run with `seqxduce train --resume`, "
                        "average again with `seqxduce average`, or decode a checkpoint by its path")

    def write_average(self, last: int) -> Path:
        """Average the last `last` step checkpoints into the average file (replacing it whole)."""
        from seqxduce import checkpoint

        paths = self.step_checkpoints()[-last:]
        checkpoint.atomic_save(checkpoint.average(paths), self.average_file)
        return self.average_file

    # ------------------------------------------------------------ starting and resuming

    def run_files(self) -> list[Path]:
        """The files here that a training run wrote: recipe, metrics, average and step checkpoints (and best.pt,
        which `open` removes with them: it never comes alone)."""
        named = [self.recipe_file, self.metrics_file, self.average_file]
        return [p for p in named if p.exists()] + self.step_checkpoints()

    def check_start(self, resume: bool, overwrite: bool = False, resumable: bool = True) -> None:
        """Whether a run may start here, checked before any work: a new run needs a directory free of another
        run's files (unless overwrite); a resumed one a checkpoint to go on from; both a place to write.
        resumable: whether the command can --resume (`import` cannot: its refusal names only what it can do)."""
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"--out {self.path}: is a file, not a folder; name a folder for the run")
        if self.checkpoint_dir.exists() and not self.checkpoint_dir.is_dir():
            raise UserError(f"{self.checkpoint_dir}: is a file, not a folder; move it away")
        if resume:
            if not self.step_checkpoints():
                raise UserError(f"--resume: {self.checkpoint_dir} holds no checkpoint to resume from; "
                                "train anew with --overwrite")
            check_folder_writable(self.path, "--resume")
            check_folder_writable(self.checkpoint_dir, "--resume")
            return
        found = self.run_files()
        if found and not overwrite:
            advice = ("continue that run with --resume, replace it with --overwrite, or train into another --out"
                      if resumable else "replace it with --overwrite, or write into another --out")
            raise UserError(f"--out {self.path}: holds another run's files ({_describe(found, self.path)}); {advice}")
        existing = next(p for p in (self.path, *self.path.absolute().parents) if p.exists())
        if not existing.is_dir():
            raise UserError(f"--out {self.path}: {existing} is a file, not a folder")
        check_folder_writable(existing, f"--out {self.path}")

    def open(self, overwrite: bool = False) -> list[str]:
        """Make the directory ready for a run (main process only): with overwrite, remove the earlier run's
        files; always, the temporary files of saves a kill cut off. Returns lines saying what was removed."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)  # (and the run directory)
        said = []
        if overwrite:
            best = [self.best_file] if self.best_file.exists() else []
            removed = self.run_files() + self.tokenizers.any_files() + best
            for path in removed:
                path.unlink()
            shutil.rmtree(self.path / SAMPLED_DIR, ignore_errors=True)
            if removed:
                said.append(f"--overwrite: removed the earlier run's {_describe(removed, self.path)}")
        found = [p for folder in (self.path, self.checkpoint_dir) for p in folder.iterdir() if _is_orphan(p)]
        orphans = [path for path in found if _remove(path)]
        if orphans:
            said.append(f"removed {_describe(orphans, self.path)}, left by a save that was cut off")
        return said

    # ------------------------------------------------------------ recipe

    def load_recipe(self, overrides: Sequence[str] = ()) -> Recipe:
        """The resolved recipe saved here, with command-line overrides applied."""
        if not self.recipe_file.is_file():
            raise UserError(f"{self.path}: not a run directory (no {RECIPE_FILE}); give the --out of `seqxduce train`")
        return load_recipe(self.recipe_file, tuple(overrides), saved=True)

    def write_recipe(self, recipe: Recipe) -> None:
        """Save the recipe, its relative paths resolved against this directory (the caller's recipe is kept)."""
        atomic_write_text(self.recipe_file, recipe.relocated(self.path).to_toml())


def last_step_checkpoints(run: Path, last: int) -> list[Path]:
    """A run directory's last `last` step checkpoints, oldest first (what `average RUN --last N` averages),
    refused in one line when it is no run directory or has fewer."""
    if not Path(run).is_dir():
        raise UserError(f"average --last {last}: {run} is not a run directory; name checkpoints one by one instead")
    found = RunDir(run).step_checkpoints()
    if len(found) < last:
        raise UserError(f"average --last {last}: {run} has {len(found)} step checkpoint(s) in "
                        f"{RunDir(run).checkpoint_dir}; average fewer, or keep more ([train] keep_checkpoints)")
    return found[-last:]


def locate(path: Path | str, choice: str | None = None) -> tuple[RunDir, Path]:
    """(run directory, checkpoint file) for a run directory or a checkpoint inside one; a run's average is
    checked to be current however it is named. choice (`decode --checkpoint`): best, average or last of a run
    directory (see RunDir.decode_checkpoint), or a checkpoint file to read with the run's recipe."""
    path = Path(path)
    if path.is_dir() and path.suffix == ".pt":
        raise UserError(f"{path}: not a file; name a checkpoint file or a run directory")
    if path.is_dir():
        run = RunDir(path)
        if not run.recipe_file.is_file():
            raise UserError(f"{path}: not a run directory (no {RECIPE_FILE}); give the --out of `seqxduce train`")
        if choice is None or choice in CHECKPOINT_CHOICES:
            return run, run.decode_checkpoint(choice)
        named = Path(choice)
        if not named.is_file():
            raise UserError(f"--checkpoint {choice}: no such file; choose {', '.join(CHECKPOINT_CHOICES)} or name a "
                            "checkpoint file")
        return run, named
    if not path.exists():
        raise UserError(f"{path}: no such run directory or checkpoint")
    if path.suffix == ".toml":
        if path.name == RECIPE_FILE and (path.parent / CHECKPOINT_DIR).is_dir():
            raise UserError(f"{path}: the recipe of a run; give the run directory {path.parent}")
        raise UserError(f"{path}: that is a recipe: train it first with `seqxduce train {path}`, then give the run "
                        "directory it writes")
    if choice is not None:
        raise UserError(f"--checkpoint {choice}: {path} is one checkpoint already; give the run directory to choose "
                        "among its checkpoints")
    run = RunDir(path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent)
    if path.name == AVERAGE_FILE and path.parent == run.path:
        run.check_average()
    return run, path
