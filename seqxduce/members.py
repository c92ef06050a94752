"""The layout of a run trained as several members (`[train] members = N`): where each member lives.

Layout: the run directory is member 1 (seed = the recipe's seed) and keeps the recipe with `members = N`;
member k lives in <run>/members/<k> (seed + k - 1, its recipe `members = 1`: each is an ordinary run that can be
decoded, averaged or resumed alone). <run>/members/tokenizers holds the tokenizer files all members copy, and
<run>/members/members.toml the recipe they are started from. Decoding, inspection and export read this layout;
training them is `seqxduce.training.supervisor`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from seqxduce.api import UserError
from seqxduce.recipe import Recipe
from seqxduce.rundir import CHECKPOINT_DIR, RunDir

MEMBERS_DIR = "members"
TOKENIZERS_DIR = "tokenizers"
MEMBERS_RECIPE = "members.toml"


def member_dir(run: Path, k: int) -> Path:
    """Where member k (1-based) of the run trains: the run directory itself for the first."""
    return Path(run) if k == 1 else Path(run) / MEMBERS_DIR / str(k)


def members_to_decode(run: RunDir, recipe: Recipe) -> list[Path]:
    """The run directories of members 2..N of a run whose recipe names N > 1 members, each checked to hold a
    checkpoint; [] for a single-model run. Refused, naming the fix, when a member has none."""
    count = recipe.train.members
    found = []
    for k in range(2, count + 1):
        where = member_dir(run.path, k)
        if not RunDir(where).step_checkpoints() and not RunDir(where).average_file.is_file():
            raise UserError(f"{run.path}: [train] members = {count}, but member {k} has no checkpoint in {where}; "
                            f"finish training with `seqxduce train {run.recipe_file} --out {run.path} --resume`, "
                            "or decode the first member alone with --set train.members=1")
        found.append(where)
    return found


def member_checkpoints(run: RunDir, recipe: Recipe, choice: str | None = None) -> list[Path]:
    """The checkpoints of members 2..N that decoding the run ensembles in, each member's chosen as the run's own
    is (RunDir.decode_checkpoint: its average if any, else its newest; or choice best, average or last)."""
    return [RunDir(where).decode_checkpoint(choice) for where in members_to_decode(run, recipe)]


def member_of(run_dir: Path) -> tuple[Path, int] | None:
    """(the whole run, k) when run_dir is member k of a run trained with [train] members > 1; None otherwise."""
    run_dir = Path(run_dir)
    if run_dir.parent.name == MEMBERS_DIR and run_dir.name.isdigit():
        return run_dir.parent.parent, int(run_dir.name)
    if (run_dir / MEMBERS_DIR / MEMBERS_RECIPE).is_file():
        return run_dir, 1
    return None


def member_dirs(run_dir: Path) -> list[Path]:
    """The run directories of all members found on disk, member 1 (run_dir itself) first; [run_dir] for a
    single-model run. Read from the folders, so that reading logs needs no recipe."""
    members = Path(run_dir) / MEMBERS_DIR
    if not (members / MEMBERS_RECIPE).is_file():
        return [Path(run_dir)]
    found = sorted((int(p.name), p) for p in members.iterdir() if p.is_dir() and p.name.isdigit())
    return [Path(run_dir), *(p for _, p in found)]


def check_one_member(checkpoints: Sequence[Path]) -> None:
    """Refuse, before any is read, a run directory among the checkpoints, or checkpoints of different members of
    a run trained with [train] members = N (`seqxduce average`): members start from different seeds, and the
    average of their weights is neither member (an ensemble averages their predictions instead)."""
    for path in checkpoints:
        if path.is_dir():
            raise UserError(f"average {path}: a folder; name the checkpoint files to average, e.g. "
                            f"{path / CHECKPOINT_DIR}/step_*.pt (of a run with several members, each member's apart)")
    found = {}
    for path in checkpoints:
        run_dir = path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent
        whole = member_of(run_dir.resolve())
        if whole is not None:
            found.setdefault(whole, path)
    runs = {whole for whole, _ in found}
    for run in runs:
        of_run = [(k, p) for (whole, k), p in found.items() if whole == run]
        if len(of_run) > 1:
            (k1, p1), (k2, p2) = sorted(of_run)[:2]
            raise UserError(f"average: {p1} and {p2} belong to members {k1} and {k2} of {run}, trained from different "
                            "seeds, whose weights do not average into a model; average each member's own checkpoints "
                            f"(-o average.pt in that member's folder), and decode {run} to ensemble the members")
