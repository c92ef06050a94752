"""What a run directory holds, in one place (`seqxduce info`, and the README.md written at the end of training):
its recipe in short, the model's size, how far it trained, its best validation figures, its vocabularies, its
checkpoints, which one `decode` uses and why, and the software it runs with."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqxduce import components, rundir
from seqxduce.api import UserError
from seqxduce.decoding.groups import compact_line
from seqxduce.inspection.curves import RunLog, read_run_log
from seqxduce.members import member_of, members_to_decode
from seqxduce.recipe import Recipe, toml_value
from seqxduce.rundir import AVERAGE_FILE, METRICS_FILE


@dataclass
class Best:
    """The best value of one validation figure, at which step and when."""

    name: str
    value: float
    step: int
    time: str  # ISO 8601, local time


@dataclass
class RunInfo:
    """The facts `seqxduce info` prints (and --json writes)."""

    run_dir: str
    checkpoint: str  # the file decode uses, or the one named
    checkpoint_reason: str
    recipe: dict[str, dict[str, Any]]  # section -> its plugin name and the keys that differ from their defaults
    parameters: int
    step: int
    target_tokens: int | None  # target tokens trained on, to logged_to_step (None: the log does not count them)
    logged_to_step: int | None
    best_metric: Best | None
    best_valid_loss: Best | None
    last_train: dict[str, float]
    last_valid: dict[str, float]
    vocabulary: dict[str, Any]
    checkpoints: list[dict[str, Any]]
    versions: dict[str, str]
    wall_time_s: float | None = None
    notes: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)  # the other members decode ensembles in ([train] members)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for --json."""
        return dataclasses.asdict(self)


def run_info(path: Path) -> RunInfo:
    """Gather the facts about a run directory, or about one checkpoint in it."""
    from seqxduce import checkpoint as ckpt

    run, chosen = rundir.locate(path)
    run_dir = run.path
    recipe = run.load_recipe()
    state = ckpt.load(chosen)
    tokenizers = run.tokenizers.load(recipe)
    log = read_run_log(run_dir) if (run_dir / METRICS_FILE).is_file() else RunLog(run_dir.name)
    step = int(state.get("step", 0))
    tokens, logged_to = tokens_seen(log, step)
    notes = []
    members: list[str] = []
    if Path(path).is_dir():
        try:
            members = [str(m) for m in members_to_decode(run, recipe)]
        except UserError as err:  # an unfinished member: say so, the rest of the facts still stand
            notes.append(str(err))
    whole = member_of(run_dir.resolve())
    if whole is not None and whole[1] > 1:
        notes.append(f"member {whole[1]} of the run {whole[0]} ([train] members); decoding that run ensembles its "
                     "members, decoding this folder uses this member alone")
    if tokens is None and log.train:
        notes.append("tokens seen: this run's metrics.jsonl predates the target_tokens figure")
    return RunInfo(
        run_dir=str(run_dir), checkpoint=str(chosen), checkpoint_reason=decode_reason(Path(path), run_dir, chosen),
        recipe=recipe_summary(recipe), parameters=count_parameters(recipe, tokenizers), step=step,
        target_tokens=tokens, logged_to_step=logged_to, best_metric=best_metric(log),
        best_valid_loss=best_of(log.valid, "loss", higher=False, label="valid loss"),
        last_train=_figures(log.train[-1]) if log.train else {},
        last_valid=_figures(log.valid[-1]) if log.valid else {},
        vocabulary=vocabulary(tokenizers), checkpoints=checkpoint_list(run_dir), versions=versions(recipe),
        wall_time_s=_wall_time(log), notes=notes, members=members,
    )


def decode_reason(asked: Path, run_dir: Path, chosen: Path) -> str:
    """Why `seqxduce decode` picks this file by default (the rule lives in seqxduce.rundir.RunDir.decode_checkpoint),
    and how to pick another."""
    if asked.is_file():
        return "named on the command line"
    other = "decode --checkpoint best|average|last|PATH picks another"
    if chosen.name == AVERAGE_FILE:
        return (f"the default: the run has a current {AVERAGE_FILE}, which decode prefers to any single step (an "
                f"average of the last checkpoints usually scores higher than the last alone); {other}")
    return f"the default: the newest readable step checkpoint, since the run has no {AVERAGE_FILE}; {other}"


def recipe_summary(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """Per section, the plugin it names and every key whose value differs from its default."""
    out: dict[str, dict[str, Any]] = {}
    for name in ("task", "tokenizer", "model", "train", "decode"):
        if name == "train":
            out[name] = {"changed": _changed(recipe.train)}
            continue
        section = getattr(recipe, name)
        changed = {k: v for k, v in _changed(section.core).items() if k != "name"}
        if section.settings is not None:
            changed.update(_changed(section.settings))
        out[name] = {"name": section.core.name, "changed": changed}
    return out


def _changed(settings: Any) -> dict[str, Any]:
    values = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if value != default:
            values[f.name] = value
    return values


def count_parameters(recipe: Recipe, tokenizers: components.Tokenizers) -> int:
    """Parameters of the recipe's model, one shared between two places (tied embeddings) counted once.

    The model is built on the meta device: no memory is allocated and nothing is initialised."""
    import torch

    with torch.device("meta"):
        model = components.build_model(recipe, tokenizers.vocab())
    return sum(p.numel() for p in model.parameters())


def tokens_seen(log: RunLog, step: int) -> tuple[int | None, int | None]:
    """Target tokens trained on up to the last logged step at or before `step`, and that step."""
    counted = [r for r in log.train if r["step"] <= step]
    if not counted or any("target_tokens" not in r for r in counted):
        return None, None
    return int(sum(r["target_tokens"] for r in counted)), int(counted[-1]["step"])


def best_of(records: list[dict], name: str, higher: bool, label: str = "") -> Best | None:
    """The record with the best value of one figure (named `label` if given)."""
    scored = [(float(r[name]), r) for r in records if isinstance(r.get(name), (int, float))]
    if not scored:
        return None
    value, record = max(scored, key=lambda x: x[0]) if higher else min(scored, key=lambda x: x[0])
    when = datetime.datetime.fromtimestamp(float(record.get("time", 0))).isoformat(timespec="seconds")
    return Best(label or name, value, int(record["step"]), when)


def best_metric(log: RunLog) -> Best | None:
    """The best validation value of the task's main metric (higher is better for a Report's primary)."""
    names = log.metric_names()
    return best_of(log.valid, names[0], higher=True) if names else None


def _figures(record: dict) -> dict[str, float]:
    return {k: v for k, v in record.items()
            if k not in ("kind", "time", "epoch", "primary", "target_tokens") and isinstance(v, (int, float))}


def _wall_time(log: RunLog) -> float | None:
    times = [float(r["time"]) for r in log.train + log.valid if "time" in r]
    return round(max(times) - min(times), 1) if len(times) > 1 else None


def vocabulary(tokenizers: components.Tokenizers) -> dict[str, Any]:
    """Source and target vocabulary sizes of the run's saved tokenizers."""
    return {"source": tokenizers.src.vocab_size, "target": tokenizers.tgt.vocab_size, "shared": tokenizers.shared}


def checkpoint_list(run_dir: Path) -> list[dict[str, Any]]:
    """The step checkpoints (oldest first), the average and best.pt, each with its step and size."""
    from seqxduce import checkpoint as ckpt

    run = rundir.RunDir(run_dir)
    found = [{"file": str(p.relative_to(run_dir)), "step": int(rundir.STEP_FILE.match(p.name).group(1)),
              "bytes": p.stat().st_size}
             for p in run.step_checkpoints()]
    average = run.average_file
    if average.is_file():
        state = ckpt.load(average)
        found.append({"file": AVERAGE_FILE, "step": int(state.get("step", 0)),
                      "bytes": average.stat().st_size,
                      "averaged_from": [Path(p).name for p in state.get("averaged_from", [])]})
    best = run.best_file
    if best.is_file():  # the best validation so far (seqxduce.training.trainer)
        state = ckpt.load(best, mmap=True)
        found.append({"file": rundir.BEST_FILE, "step": int(state.get("step", 0)), "bytes": best.stat().st_size,
                      "best": {"metric": state.get("metric", ""), "value": state.get("value")}})
    return found


def versions(recipe: Recipe) -> dict[str, str]:
    """Python, torch, seqxduce and the distributions of the plugins this recipe uses."""
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda or "none", "seqxduce": _version("seqxduce")}
    for name in ("task", "tokenizer", "model", "decode"):
        dist = getattr(recipe, name).component.distribution
        if dist and dist not in out and not dist.startswith("("):
            out[dist] = _version(dist)
    return out


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def format_info(info: RunInfo) -> str:
    """The facts as aligned text lines for a terminal."""
    lines = [("run", info.run_dir),
             ("decode uses", f"{info.checkpoint} ({info.checkpoint_reason})"
                             + "".join(f" + {m}" for m in info.members)),
             ("step", _step_line(info)),
             ("parameters", f"{info.parameters:,}")]
    for section, summary in info.recipe.items():
        keys = " ".join(f"{k}={short_value(v)}" for k, v in summary["changed"].items())
        lines.append((f"[{section}]", f"{summary.get('name', '')}  {keys}".strip()))
    vocab = info.vocabulary
    lines.append(("vocabulary", f"source {vocab['source']:,}, target {vocab['target']:,}"
                  + (" (one shared vocabulary)" if vocab["shared"] else "")))
    for best in (info.best_metric, info.best_valid_loss):
        if best is not None:
            lines.append((f"best {best.name}", f"{best.value:.4g} at step {best.step} ({best.time})"))
    if info.last_train:
        lines.append(("last train", figure_text(info.last_train)))
    if info.last_valid:
        # a task's groups folded beside their mean, as the progress line has them (metrics.jsonl holds them all)
        lines.append(("last valid", figure_text(compact_line(info.last_valid))))
    lines.append(("checkpoints", _checkpoint_text(info.checkpoints)))
    lines.append(("software", ", ".join(f"{k} {v}" for k, v in info.versions.items())))
    lines.extend(("note", note) for note in info.notes)
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


def _checkpoint_text(found: list[dict[str, Any]]) -> str:
    steps = [c for c in found if "averaged_from" not in c and "best" not in c]
    parts = []
    if steps:
        size = max(c["bytes"] for c in steps) / 1e6
        where = str(Path(steps[0]["file"]).parent)
        parts.append(f"steps {', '.join(str(c['step']) for c in steps)} in {where}/ ({size:.1f} MB each)")
    for c in found:
        if "averaged_from" in c:
            parts.append(f"{c['file']} (step {c['step']}, the average of {len(c['averaged_from'])}: "
                         f"{', '.join(c['averaged_from'])})")
        if "best" in c:
            value = c["best"]["value"]
            figure = f"{c['best']['metric']} {value:.4g}" if isinstance(value, float) else c["best"]["metric"]
            parts.append(f"{c['file']} (step {c['step']}, the best validation: {figure}; decode --checkpoint best)")
    return "; ".join(parts) or "none"


def _step_line(info: RunInfo) -> str:
    parts = [str(info.step)]
    if info.target_tokens is not None:
        parts.append(f"target tokens seen {count_text(info.target_tokens)} (to step {info.logged_to_step})")
    if info.wall_time_s is not None:
        parts.append(f"logged wall time {datetime.timedelta(seconds=round(info.wall_time_s))}")
    return "; ".join(parts)


def count_text(n: int) -> str:
    """A count in K, M or G with two decimals (58.38K)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def figure_text(figures: dict[str, float | str]) -> str:
    """'name value name value' with floats to four significant digits."""
    return " ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items())


def short_value(value: Any) -> str:
    """A recipe value as TOML writes it (true, "bpe", [0.9, 0.98]), cut to 40 characters."""
    try:
        text = toml_value(value)
    except TypeError:
        text = str(value)
    return text if len(text) <= 40 else text[:39] + "…"
