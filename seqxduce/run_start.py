"""How a training run starts, as one typed value made and checked once where a run starts (the CLI, engine.train)
and carried from there to the trainer: a new run, a resumed one, or `auto` (start when the run directory holds no
checkpoint of this run, continue when it does: the one command line a requeued job and torchrun's restarts run
again); a new run may take its tokenizer files from another folder or its weights from another run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from seqxduce.errors import UserError

Mode = Literal["new", "resume", "auto"]
MODES: tuple[str, ...] = ("new", "resume", "auto")


@dataclass(frozen=True)
class RunStart:
    """mode: new, resume or auto (resolved against the run directory by `resolved`); overwrite (new runs only):
    replace the run already in the directory; tokenizers_from: a folder whose tokenizer files a new run takes;
    init_from: a run directory or checkpoint a new run starts from (fine-tuning), its optimizer state too with
    keep_optimizer. Contradictions are refused in one line when the value is made, however it is made."""

    mode: Mode = "new"
    overwrite: bool = False
    tokenizers_from: Path | None = None
    init_from: Path | None = None
    keep_optimizer: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"RunStart: mode {self.mode!r} is none of {', '.join(MODES)}")
        for name in ("tokenizers_from", "init_from"):  # a str from the Python API is a path as the CLI gives it
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        problem = self._contradiction()
        if problem:
            raise UserError(f"train: {problem}")

    def _contradiction(self) -> str:
        """What in these flags contradicts itself, or ''."""
        if self.mode == "resume" and self.overwrite:
            return "give --resume (continue the run) or --overwrite (replace it), not both"
        if self.mode == "auto" and self.overwrite:
            return ("give --auto-resume (continue the run, or start it) or --overwrite (replace it), not both: "
                    "a requeued --overwrite would throw away what the job before it trained")
        if self.mode == "resume" and self.init_from is not None:
            return "--init-from starts a new run from another's weights, --resume continues this one; give one of them"
        if self.mode == "resume" and self.tokenizers_from is not None:
            return "--resume continues with the run's own tokenizer files; leave out --tokenizers-from"
        if self.init_from is not None and self.tokenizers_from is not None:
            return "--init-from takes the tokenizer files of the run it names; leave out --tokenizers-from"
        if self.keep_optimizer and self.init_from is None:
            return "--keep-optimizer keeps the optimizer of --init-from's checkpoint; give --init-from"
        return ""

    @classmethod
    def from_flags(cls, resume: bool = False, auto_resume: bool = False, overwrite: bool = False,
                   tokenizers_from: Path | str | None = None, init_from: Path | str | None = None,
                   keep_optimizer: bool = False) -> RunStart:
        """The start the command line's flags describe."""
        if resume and auto_resume:
            raise UserError("train: give --resume (continue a run, refused where there is none) or --auto-resume "
                            "(continue it, or start it), not both")
        mode: Mode = "resume" if resume else "auto" if auto_resume else "new"
        return cls(mode, overwrite, None if tokenizers_from is None else Path(tokenizers_from),
                   None if init_from is None else Path(init_from), keep_optimizer)

    @property
    def resume(self) -> bool:
        """Whether the run continues from its checkpoints (an `auto` start must be resolved first)."""
        if self.mode == "auto":
            raise ValueError("RunStart: an auto start is resolved against the run directory first (resolved)")
        return self.mode == "resume"

    def resolved(self, has_checkpoint: bool, has_leftovers: bool) -> RunStart:
        """An auto start as what it is here: resume where the run directory holds a checkpoint of this run, else a
        new run (replacing the files an earlier attempt of the same run left before its first checkpoint). The
        caller checks first that the directory holds this recipe's run. Other modes are returned unchanged."""
        if self.mode != "auto":
            return self
        if has_checkpoint:
            return replace(self, mode="resume", tokenizers_from=None, init_from=None, keep_optimizer=False)
        return replace(self, mode="new", overwrite=has_leftovers)
