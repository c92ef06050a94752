"""One interface over the engines that decode, score and serve (OpenNMT-py's InferenceEngine): seqxduce's own
search (SeqxduceEngine, here) and CTranslate2 (export/ct2_engine.py), each registered through the register_engines
hook as a plugin's engine is (this module's hookimpl registers seqxduce's); export/engine_choice.py finds one by name
in the registry. Public API: a plugin's engine subclasses Engine (CONTRIBUTING.md, "An inference engine").

An engine loads what a RunSpec names (a run directory, a checkpoint and an ensemble, or an export folder), decodes
a batch of sources (with target prefixes and n-best, each hypothesis scored), scores given pairs where it can,
makes the picklable jobs a streamed file's buffers are done by (decoding/jobs.py), and declares what it can do
(`capabilities`, a frozenset of FEATURES) and which [decode] settings its search reads (`honoured`): nothing is
probed. A feature or setting an engine lacks is refused in one line naming the engine and the feature, before
any work (Engine.require, Engine.check_settings). Each engine names the server's view of what it loaded
(`service`), which `seqxduce serve` builds: named, not imported, since serving sits above the engines.

A plugin's engine writes open() and decode() (and score() with "scoring"); the rest has a default here that works
through those two: a streamed file's jobs (decoding/jobs.py: EngineDecodeJob, EngineScoreJob), a split decoded and
scored, and a server's service (serving/engine_service.py).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from seqxduce.api import Output, PairScore, Report, UserError
from seqxduce.hookspecs import hookimpl

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.decode import LoadedRun
    from seqxduce.decoding.jobs import RunSpec
    from seqxduce.decoding.phrases import PhraseText
    from seqxduce.decoding.streaming import BufferJob

# what an engine may have, as a refusal names it: (the flag or route, what it is)
FEATURES: dict[str, tuple[str, str]] = {
    "prefixes": ("--prefix-file", "target prefixes"),
    "nbest": ("--nbest", "n-best lists"),
    "scoring": ("score", "scoring given pairs"),
    "ensemble": ("--ensemble", "several models' predictions averaged"),
    "checkpoint": ("--checkpoint", "one of a run's checkpoints"),
    "annotations": ("--annotations", "the model's per-position figures"),
    "alignments": ("--alignments", "word alignments from the attention"),
    "attention": ("/v1/attention", "the model's attention weights"),
    "any decoder": ("[decode] name", "a decoder other than greedy or beam"),
    "constraints": ("--constraints", "phrases every output must hold (lexically constrained search)"),
    "negative constraints": ("--constraints \"!words\"", "phrases no output may hold"),
    "stop within a batch": ("a stop between a batch's steps", "SIGTERM, a deadline or clients gone end a batch at "
                                                              "its next step"),
}


class Engine(abc.ABC):
    """What decodes: loading, a batch of sources decoded or scored, the jobs of a streamed file, and what it can
    do, declared. open() and decode() are a subclass's to write; every other method has a default over them."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[str]]  # keys of FEATURES
    # the server's view of what open() loaded, "module:callable" as an entry point names one; callable(engine,
    # loaded) -> a serving.service.Service. The default serves any engine through its decode()
    service: ClassVar[str] = "seqxduce.serving.engine_service:EngineService"
    # the [decode] keys its search reads (None: every one), and those it does not read but acts as at one value
    # (a key given at that value changes nothing, so it is not refused)
    honoured: ClassVar[frozenset[str] | None] = None
    acts_as: ClassVar[dict[str, Any]] = {}
    # a CPU decode of a long input spreads over worker processes unless --processes says otherwise
    auto_processes: ClassVar[bool] = True
    instead: ClassVar[str] = "decode with --engine seqxduce"  # what a refused user does instead

    def require(self, feature: str, where: str) -> None:
        """Refuse, in one line naming the engine and the feature, a feature this engine lacks."""
        if feature not in self.capabilities:
            flag, what = FEATURES[feature]
            raise UserError(f"{where} --engine {self.name}: {flag} is not supported there ({what}); {self.instead}")

    def check(self, spec: RunSpec, where: str, features: Iterable[str] = ()) -> None:
        """Refuse before any work what this engine cannot do of a load and a command: the features used, the
        ensemble and checkpoint named, and the settings given that its search does not read."""
        used = [*features, *(["ensemble"] if spec.ensemble else []),
                *(["checkpoint"] if spec.checkpoint is not None else []),
                *(["nbest"] if _asks_nbest(spec) else [])]
        for feature in used:
            self.require(feature, where)
        self.check_settings(spec, where)

    def check_settings(self, spec: RunSpec, where: str) -> None:
        """A [decode] key given (--set decode.KEY=VALUE, or a flag) that this engine's search does not read is
        refused naming both: it would change nothing, silently."""
        if self.honoured is None:
            return
        from seqxduce.recipe import override_value, split_override

        given = [(c.key, c.value, c.given_as) for c in spec.changes if c.key not in ("device", "precision")]
        for text in spec.overrides:
            section, key, value = split_override(text)
            if section == "decode" and key not in ("name", "batch_size", "precision"):
                given.append((key, override_value(value), f"--set {text}"))
        for key, value, given_as in given:
            if key in self.honoured or (key in self.acts_as and self.acts_as[key] == value):
                continue
            raise UserError(f"{given_as}: the {self.name} engine does not read [decode] {key} (its search reads "
                            f"{', '.join(sorted(self.honoured))}, batch_size and precision); drop it, or decode with "
                            "--engine seqxduce")

    @abc.abstractmethod
    def open(self, spec: RunSpec) -> contextlib.AbstractContextManager[Any]:
        """What decodes (loaded once), for the `with` block's time: a LoadedRun, or an engine's own."""

    @abc.abstractmethod
    def decode(self, loaded: Any, sources: Sequence[str], prefixes: Sequence[str] | None = None,
               prefix_where: str = "prefix ", annotate: bool = False,
               constraints: Sequence[PhraseText] | None = None) -> list[Output]:
        """Each source's output (n-best hypotheses, each with its score), in input order; prefixes: per source,
        target text its output starts with (refused naming `prefix_where` where the vocabulary cannot spell it);
        annotate: with the model's per-position figures (the feature "annotations"); constraints: per source,
        phrases its output must hold and phrases it must not (the features "constraints" and "negative
        constraints")."""

    def decode_split(self, loaded: Any, split: str, annotate: bool = False) -> tuple[list[Output], Report]:
        """A task's split decoded and scored with the task's metric (loaded: what open() gave, with its `task` and
        `recipe`); by default through decode(), each example's own target prefix forced."""
        from seqxduce.decoding.decode import score_outputs, split_examples

        if annotate:
            self.require("annotations", "decode")
        examples = split_examples(loaded.task, loaded.recipe, split)
        prefixes = [ex.prefix for ex in examples] if any(ex.prefix for ex in examples) else None
        outputs = self.decode(loaded, [ex.source for ex in examples], prefixes)
        for o, ex in zip(outputs, examples):
            o.reference = ex.ref
        return outputs, score_outputs(loaded.task, outputs, examples)

    def score(self, loaded: Any, sources: Sequence[str], targets: Sequence[str]) -> list[PairScore]:
        """Each target's log-probability given its source (seqxduce.api.PairScore); an engine with the
        feature "scoring" writes it."""
        self.require("scoring", "score")
        raise UserError(f"score --engine {self.name}: the engine declares scoring but writes no score(); fix the "
                        "plugin that registers it, or decode with --engine seqxduce")

    def decode_job(self, spec: RunSpec, *, annotate: bool = False, align: bool = False, split: bool = False,
                   prefix_where: str = "prefix ", as_targets: bool = False, **named: str) -> Any:
        """A picklable job (streaming.BufferJob) decoding a streamed file's buffers; processor_for(loaded) gives
        this process's work function over what open() loaded. as_targets: its output lines are the best
        hypotheses written as the task's training targets are (seqxduce.decoding.decode.target_lines). named:
        constraint_where, how the constraints file's lines are named (an engine with constraints). By default
        through decode() (jobs.EngineDecodeJob)."""
        from seqxduce.decoding.jobs import EngineDecodeJob

        if annotate or align:
            self.require("annotations" if annotate else "alignments", "decode")
        return EngineDecodeJob(self, spec, split=split, prefix_where=prefix_where, as_targets=as_targets)

    def score_job(self, spec: RunSpec, normalize: bool = False) -> Any:
        """A picklable job scoring buffers of (source, target) pairs, as decode_job; by default through score()."""
        from seqxduce.decoding.jobs import EngineScoreJob

        return EngineScoreJob(self, spec, normalize)

    def described(self, loaded: Any, spec: RunSpec) -> str:
        """What decoded, as a streamed job's record and StreamedFile name it."""
        return f"{self.name}:{Path(spec.run).resolve()}"

    def announced(self, loaded: Any) -> str:
        """What decodes, as `decoding with ...` says it."""
        return f"the {self.name} engine"

    def model_files(self, loaded: Any, spec: RunSpec) -> list[Path]:
        """The files a streamed job's record keys the model by (a changed file is another job); none by default."""
        return []

    def on_cpu(self, loaded: Any) -> bool:
        """Whether it decodes on the CPU (where worker processes pay)."""
        return True

    def check_processes(self, spec: RunSpec, processes: int | None) -> None:  # noqa: B027 - optional hook
        """Refuse, before any work, worker processes this engine cannot start for this load."""

    def planned(self, spec: RunSpec) -> Planned | None:
        """What open(spec) would load, known without loading it (the recipe, `described`, `model_files`), so
        that a resumed job whose output is complete is found so before any model loads; None: known only once
        loaded."""
        return None


def _asks_nbest(spec: RunSpec) -> bool:
    """Whether a load asks for n-best lists: --nbest N, or --set decode.nbest=N, above 1."""
    from seqxduce.recipe import override_value, split_override

    asked = [c.value for c in spec.changes if c.key == "nbest"]
    for text in spec.overrides:
        section, key, value = split_override(text)
        if section == "decode" and key == "nbest":
            asked.append(override_value(value))
    return any(isinstance(n, int) and n > 1 for n in asked)


@dataclass(frozen=True)
class Planned:
    """An engine's load, known before it is made: as described() and model_files() will say it, and the recipe
    its decode settings come from."""

    recipe: Any
    described: str
    model_files: list[Path]


class SeqxduceEngine(Engine):
    """seqxduce's own search: every decoder plugin, ensembles, prefixes, annotations, alignments, attention."""

    name = "seqxduce"
    capabilities = frozenset(FEATURES)
    service = "seqxduce.serving.service:native_service"

    @contextlib.contextmanager
    def open(self, spec: RunSpec) -> Iterator[LoadedRun]:
        yield spec.load()

    def planned(self, spec: RunSpec) -> Planned:
        from seqxduce.decoding.decode import plan_run

        plan = plan_run(Path(spec.run), spec.overrides, [Path(e) for e in spec.ensemble], spec.checkpoint,
                        changes=spec.changes)
        return Planned(plan.recipe, plan.described(), [plan.checkpoint, *plan.members])

    def decode(self, loaded: LoadedRun, sources: Sequence[str], prefixes: Sequence[str] | None = None,
               prefix_where: str = "prefix ", annotate: bool = False,
               constraints: Sequence[PhraseText] | None = None) -> list[Output]:
        from seqxduce.decoding.decode import decode_lines

        return decode_lines(loaded, sources, annotate=annotate, prefixes=prefixes, prefix_where=prefix_where,
                            constraints=constraints)

    def decode_split(self, loaded: LoadedRun, split: str, annotate: bool = False) -> tuple[list[Output], Report]:
        from seqxduce.decoding.decode import decode_split

        return decode_split(loaded, split, annotate=annotate)

    def score(self, loaded: LoadedRun, sources: Sequence[str], targets: Sequence[str]) -> list[PairScore]:
        from seqxduce.decoding.scoring import score_pairs

        return score_pairs(loaded, sources, targets)

    def decode_job(self, spec: RunSpec, *, annotate: bool = False, align: bool = False, split: bool = False,
                   prefix_where: str = "prefix ", as_targets: bool = False, **named: str) -> BufferJob:
        from seqxduce.decoding.jobs import DecodeJob

        return DecodeJob(spec, annotate=annotate, align=align, split=split, prefix_where=prefix_where,
                         as_targets=as_targets, **named)

    def score_job(self, spec: RunSpec, normalize: bool = False) -> BufferJob:
        from seqxduce.decoding.jobs import ScoreJob

        return ScoreJob(spec, normalize)

    def described(self, loaded: LoadedRun, spec: RunSpec) -> str:
        return loaded.described()

    def announced(self, loaded: LoadedRun) -> str:
        return loaded.described()

    def model_files(self, loaded: LoadedRun, spec: RunSpec) -> list[Path]:
        return [loaded.checkpoint, *loaded.members]

    def on_cpu(self, loaded: LoadedRun) -> bool:
        return loaded.device.type == "cpu"


@hookimpl
def register_engines(register: Any) -> None:
    """seqxduce's own search, registered as a plugin's engine is (registry.DEFAULT_PLUGINS)."""
    register("seqxduce", SeqxduceEngine, help="seqxduce's own search: every decoder plugin, ensembles, prefixes, "
                                              "annotations, alignments, attention")
