"""Training an ensemble of independently trained members of one recipe: `[train] members = N`.

Independent runs of the same recipe with other seeds make the strongest decode-time ensembles (Vinyals et al.
2015 and Vaswani et al. 2017 parse with them); fairseq and Marian leave training them to the user, and their
tokenizers must then match by luck. Here `seqxduce train` trains the N members itself, with one set of
tokenizer files, and `seqxduce decode RUN` averages their predictions (seqxduce.decoding.ensemble). Where each
member lives is `seqxduce.members`'s.

Each member trains in its own `seqxduce train` process (resume, signals and validation are the trainer's own);
on the CPU several run at once with the threads split between them, since two 1-thread runs on two cores do more
than one 2-thread run. This process forwards Ctrl-C or SIGTERM to them, prefixes their lines with the member,
and stops the others when one fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from seqxduce.api import UserError
from seqxduce.atomic import atomic_write_text
from seqxduce.cpus import usable_cpus
from seqxduce.errors import TrainingStopped
from seqxduce.members import MEMBERS_DIR, MEMBERS_RECIPE, TOKENIZERS_DIR, member_dir
from seqxduce.recipe import Recipe
from seqxduce.run_start import RunStart
from seqxduce.rundir import RunDir
from seqxduce.tokenizer_files import TokenizerFiles
from seqxduce.torchrun import world_size

POLL_SECONDS = 0.2


def parallel_count(recipe: Recipe, cores: int) -> int:
    """How many members train at once: the recipe's parallel_members, else one per core on the CPU (at most the
    members) and one at a time on a GPU (each would want all of it)."""
    settings = recipe.train
    if settings.parallel_members:
        return min(settings.parallel_members, settings.members)
    on_gpu = settings.device.startswith("cuda") or (settings.device == "auto" and _cuda_available())
    return 1 if on_gpu else max(1, min(settings.members, cores))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def member_command(k: int, recipe: Recipe, run: Path, resume: bool, overwrite: bool,
                   overrides: Sequence[str] = ()) -> list[str]:
    """The `seqxduce train` command line of member k; the user's overrides go on to it (a resumed member reads
    its own saved recipe), its seed last."""
    members = Path(run) / MEMBERS_DIR
    command = [sys.executable, "-m", "seqxduce", "train", str(members / MEMBERS_RECIPE), "--out",
               str(member_dir(run, k))]
    for override in overrides:
        command += ["--set", override]
    if k == 1:
        command.append("--single")  # the run directory keeps the recipe with members = N
    else:
        command += ["--set", f"train.seed={recipe.train.seed + k - 1}", "--set", "train.members=1"]
    if resume:
        command.append("--resume")
    else:
        command += ["--tokenizers-from", str(members / TOKENIZERS_DIR)] + (["--overwrite"] if overwrite else [])
    return command


def _set_up_members(recipe: Recipe, run: Path, resume: bool, overwrite: bool) -> None:
    """Check the run directory, then write the members' recipe and train their one set of tokenizers (a resumed
    run keeps the ones it has)."""
    from seqxduce.components import build_task, data_dir
    from seqxduce.corpus.prepare import train_tokenizers_shown

    if world_size() > 1:
        raise UserError(f"[train] members = {recipe.train.members} under torchrun: train the ensemble's members in "
                        "one process (they run side by side), or each member with its own torchrun and "
                        "--tokenizers-from")
    RunDir(run).check_start(resume, overwrite)
    members = Path(run) / MEMBERS_DIR
    if not resume and members.exists():
        if not overwrite:
            raise UserError(f"--out {run}: holds another ensemble's members ({members}); continue it with "
                            "--resume, replace it with --overwrite, or train into another --out")
        shutil.rmtree(members)
    tokenizers = TokenizerFiles(members / TOKENIZERS_DIR)
    if resume and tokenizers.has(recipe) and (members / MEMBERS_RECIPE).is_file():
        return
    members.mkdir(parents=True, exist_ok=True)
    atomic_write_text(members / MEMBERS_RECIPE, recipe.relocated(members).to_toml())
    if resume and RunDir(run).tokenizers.has(recipe):
        tokenizers.copy(recipe, Path(run))
        return
    task = build_task(recipe)
    where = data_dir(recipe)
    task.prepare(where)
    train_tokenizers_shown(tokenizers, recipe, task.examples("train", where), task=task)


@dataclass
class _Member:
    k: int
    command: list[str]
    process: subprocess.Popen | None = None
    reader: threading.Thread | None = None
    returncode: int | None = None
    lines: list[str] = field(default_factory=list)


def _forward_lines(member: _Member, lock: threading.Lock) -> None:
    assert member.process is not None and member.process.stdout is not None
    for line in member.process.stdout:
        with lock:
            sys.stderr.write(f"[member {member.k}] {line}")
            sys.stderr.flush()
        member.lines = (member.lines + [line.rstrip()])[-5:]


def _threads_env(per_member: int) -> dict[str, str]:
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:  # a user's own setting wins
        env["OMP_NUM_THREADS"] = str(per_member)
    return env


class _Supervisor:
    """Runs the members' processes, at most `parallel` at a time, and passes signals on to them."""

    def __init__(self, members: list[_Member], parallel: int, env: dict[str, str]):
        self.waiting = list(members)
        self.running: list[_Member] = []
        self.done: list[_Member] = []
        self.parallel = parallel
        self.env = env
        self.lock = threading.Lock()
        self.signal = 0
        self.failed: _Member | None = None

    def _start(self, member: _Member) -> None:
        # a session of its own: the terminal's Ctrl-C reaches this process only, which passes it on once
        member.process = subprocess.Popen(member.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, env=self.env, start_new_session=True)
        member.reader = threading.Thread(target=_forward_lines, args=(member, self.lock), daemon=True)
        member.reader.start()
        self.running.append(member)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signal = signum
        for member in self.running:
            if member.process is not None and member.process.poll() is None:
                member.process.send_signal(signum)

    def _reap(self) -> None:
        for member in list(self.running):
            assert member.process is not None
            code = member.process.poll()
            if code is None:
                continue
            if member.reader is not None:
                member.reader.join()
            member.returncode = code
            self.running.remove(member)
            self.done.append(member)
            if code != 0 and not self.signal and self.failed is None:
                self.failed = member
                self._on_signal(signal.SIGTERM, None)  # the others save their step and stop
                self.signal = 0

    def run(self) -> None:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while self.waiting or self.running:
                if not self.signal and self.failed is None:
                    while self.waiting and len(self.running) < self.parallel:
                        self._start(self.waiting.pop(0))
                elif not self.running:
                    break
                self._reap()
                time.sleep(POLL_SECONDS)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


def train_members(recipe: Recipe, out: str | Path, start: RunStart, overrides: Sequence[str] = ()) -> int:
    """Train the recipe's N members (see the module's help), started as `start` says (resolved: new or resume);
    returns the step the first member reached."""
    run = Path(out)
    if start.tokenizers_from is not None:
        raise UserError("--tokenizers-from with [train] members > 1: the members train their own shared "
                        "tokenizers; give one or the other")
    resume, overwrite = start.resume, start.overwrite
    _set_up_members(recipe, run, resume, overwrite)
    count = recipe.train.members
    cores = usable_cpus()
    parallel = parallel_count(recipe, cores)
    members = []
    for k in range(1, count + 1):
        goes_on = resume and bool(RunDir(member_dir(run, k)).step_checkpoints())
        # a member that never saved a checkpoint starts anew, clearing what an earlier start left
        members.append(_Member(k, member_command(k, recipe, run, goes_on, overwrite=overwrite if k == 1 else True,
                                                overrides=overrides)))
    sys.stderr.write(f"training {count} members, {parallel} at a time: {run} (seed {recipe.train.seed}) and "
                     f"{run / MEMBERS_DIR}/2..{count}\n")
    supervisor = _Supervisor(members, parallel, _threads_env(max(1, cores // parallel)))
    supervisor.run()
    if supervisor.failed is not None:
        failed = supervisor.failed
        raise UserError(f"member {failed.k} of {count} ({member_dir(run, failed.k)}) stopped with exit status "
                        f"{failed.returncode}: {failed.lines[-1] if failed.lines else 'no output'}; the others "
                        f"saved their step; mend the cause and continue with `seqxduce train "
                        f"{run / 'recipe.toml'} --out {run} --resume`")
    if supervisor.signal:
        raise TrainingStopped(f"the members stopped and saved their step; continue with `seqxduce train "
                              f"{run / 'recipe.toml'} --out {run} --resume`", exit_code=128 + supervisor.signal)
    _record_member_count(RunDir(run), count)
    return int(RunDir(run).newest_readable(mmap=True)[1].get("step", 0))


def _record_member_count(run: RunDir, count: int) -> None:
    """A resumed ensemble may grow (`--resume --set train.members=N`): decode reads how many members to ensemble
    from the run's recipe, which member 1 does not write again when it had nothing left to train."""
    if run.load_recipe().train.members != count:
        run.write_recipe(run.load_recipe([f"train.members={count}"]))
