"""The files a streamed job writes, so that a job stopped at any moment loses at most the buffers it had not
written and continues where it stopped (`decode ... --output OUT --resume`).

While the job runs, each output (OUT, and the --alignments and --annotations files) grows as OUT.partial beside
its final name, a piece at a time, flushed and fsynced; after each piece a small record, OUT.resume.json
(written atomically), says how many input lines are done and how long each partial file was then. A stop, a kill
or a power cut leaves partial files that hold every line of the pieces the record counts (and perhaps some of the
next one, which a resume cuts off). When the job ends, each partial file is renamed to its final name and the
record removed: a file at the final name is always a complete output.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write_text
from seqxduce.decoding.streaming import Piece

KEPT = "kept"  # the scratch stream of Piece.kept (JSON lines): read back on resume, removed at the end


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def record_path(path: Path) -> Path:
    return path.with_name(path.name + ".resume.json")


def job_path(path: Path) -> Path:
    """Beside a finished output, the key of the job that wrote it (hidden: the output is what the user reads), so
    that --resume on a complete output of another input, run or settings is refused, not taken as done."""
    return path.with_name(f".{path.name}.job.json")


class OutputFiles:
    """The outputs of one job: `finals` maps each stream (output, alignments, annotations) to its final path;
    the first is the main output, beside which the record lives. `job` describes what is decoded and how
    (checkpoint, settings, input, buffer size): a resume with another job is refused, as its lines would not
    continue these. Opened fresh, or resumed (`resume`), by open()."""

    def __init__(self, finals: Mapping[str, Path], job: dict[str, Any], keep: bool = False):
        self.finals = dict(finals)
        self.main = next(iter(self.finals.values()))
        self.record = record_path(self.main)
        self.scratch = {KEPT: self.main.with_name(f".{self.main.name}.kept.partial")} if keep else {}
        self.job = json.loads(json.dumps(job, default=str))  # as it reads back from the record
        self.done = 0
        self.kept: list = []  # with keep: Piece.kept of the lines done before this process (a resumed job)
        self.handles: dict[str, Any] = {}

    @property
    def partials(self) -> dict[str, Path]:
        return {**{name: partial_path(path) for name, path in self.finals.items()}, **self.scratch}

    def open(self, resume: bool) -> bool:
        """Start the files, or with resume continue a stopped job's (its position in self.done). False: nothing
        to do, the output is complete already (resume, no record, the final output there)."""
        saved = self._read_record()
        if saved is None and resume and self.main.exists() and not partial_path(self.main).exists():
            self._check_finished_job()
            return False
        if saved is None and not resume and partial_path(self.main).exists():
            raise UserError(f"--output {self.main}: {partial_path(self.main)} is there without a record "
                            f"{self.record.name}, so no stopped job of seqxduce's can be continued from it; delete it "
                            "(or move it away) and decode again")
        if saved is not None and not resume:
            raise UserError(f"--output {self.main}: a stopped job left {partial_path(self.main)} ({saved['done']:,} "
                            f"input lines done); add --resume to continue it, or delete {self.record.name} and the "
                            "*.partial files beside it to start again")
        if saved is None:
            if resume and partial_path(self.main).exists():
                raise UserError(f"--resume: {partial_path(self.main)} has no record {self.record.name} beside it, "
                                "so where it stopped is unknown; delete it and decode again without --resume")
            self._start()
            return True
        self._check_same_job(saved)
        if saved.get("complete"):  # stopped while renaming the finished files
            self.done = saved["done"]
            self.finish()
            return False
        self._continue(saved)
        return True

    def _read_record(self) -> dict | None:
        if not self.record.exists():
            return None
        try:
            saved = json.loads(self.record.read_text())
            int(saved["done"]), dict(saved["sizes"]), dict(saved["job"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"{self.record}: unreadable ({err}); delete it and the *.partial files beside it, and "
                            "decode again without --resume") from None
        return saved

    def _check_same_job(self, saved: dict) -> None:
        shown = self._differences(saved["job"])
        if shown:
            raise UserError(f"--resume: {partial_path(self.main)} was written by another job ({shown}); continue it "
                            f"with the same command line, or delete {self.record.name} and the *.partial files to "
                            "start again")

    def _differences(self, then: dict) -> str:
        differ = sorted(key for key in {*then, *self.job} if then.get(key) != self.job.get(key))
        return "; ".join(f"{key}: {then.get(key)!r} then, {self.job.get(key)!r} now" for key in differ)

    def _check_finished_job(self) -> None:
        """--resume on a complete output: it must be this job's, else its lines are another input's or model's."""
        fix = "run without --resume to write it anew, or give another --output"
        try:
            then = json.loads(job_path(self.main).read_text())["job"]
        except FileNotFoundError:
            raise UserError(f"--resume: {self.main} is there, but nothing records which job wrote it (a seqxduce "
                            f"before this one, or another program); {fix}") from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"--resume: {job_path(self.main)} is unreadable ({err}); {fix}") from None
        shown = self._differences(then)
        if shown:
            raise UserError(f"--resume: {self.main} is complete, but another job wrote it ({shown}); {fix}")

    def _start(self) -> None:
        # the record first: a job stopped or killed while these files are made then leaves a record of 0 lines
        # done, which a resume continues, never partial files without a record, which it must refuse
        self._save_record(fresh=True)
        for path in self.partials.values():
            path.parent.mkdir(parents=True, exist_ok=True)
            self.handles[path.name] = open(path, "wb")  # noqa: SIM115 (closed by close())

    def _continue(self, saved: dict) -> None:
        for name, path in self.partials.items():
            size = saved["sizes"].get(name)
            if size == 0 and not path.exists():  # stopped before _start made it
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            if size is None or not path.exists() or path.stat().st_size < size:
                raise UserError(f"--resume: {path} is missing or shorter than its record says ({size} bytes); delete "
                                f"{self.record.name} and the *.partial files and decode again without --resume")
            handle = open(path, "r+b")  # noqa: SIM115 (closed by close())
            handle.truncate(size)  # what a killed write left of a piece the record does not count
            handle.seek(size)
            self.handles[path.name] = handle
        self.done = saved["done"]
        if KEPT in self.scratch:
            with open(self.scratch[KEPT], encoding="utf-8") as kept:
                self.kept = [json.loads(line) for line in kept]

    def write(self, piece: Piece) -> None:
        """Append a piece (the next in input order) to every stream, make it durable, then count it."""
        if piece.start != self.done:
            raise RuntimeError(f"piece at {piece.start} written after {self.done} lines")  # a bug, not a user's
        for name, path in self.partials.items():
            lines = [json.dumps(k, ensure_ascii=False) for k in piece.kept] if name == KEPT else piece.lines[name]
            handle = self.handles[path.name]
            handle.write("".join(line + "\n" for line in lines).encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        self.done += piece.count
        self._save_record()

    def _save_record(self, complete: bool = False, fresh: bool = False) -> None:
        """fresh: the files are about to be made empty (a stale one of an earlier job may still be there)."""
        sizes = {name: 0 if fresh else self.handles[path.name].tell() if path.name in self.handles
                 else path.stat().st_size for name, path in self.partials.items()}
        atomic_write_text(self.record, json.dumps({"done": self.done, "sizes": sizes, "job": self.job,
                                                   "complete": complete}, indent=1) + "\n")

    def finish(self) -> None:
        """The job is done: every partial file takes its final name, the record and scratch files go."""
        if self.handles:
            self._save_record(complete=True)
        self.close()
        for path in self.finals.values():
            if partial_path(path).exists():
                os.replace(partial_path(path), path)
        for path in self.scratch.values():
            path.unlink(missing_ok=True)
        atomic_write_text(job_path(self.main), json.dumps({"job": self.job}, indent=1) + "\n")
        self.record.unlink(missing_ok=True)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()


class StdoutLines:
    """The main stream on stdout, a piece at a time (not resumable); other streams are refused without a file."""

    def __init__(self, stream: str = "output"):
        self.stream = stream

    def write(self, piece: Piece) -> None:
        sys.stdout.write("".join(line + "\n" for line in piece.lines[self.stream]))
        sys.stdout.flush()
