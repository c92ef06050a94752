"""CTranslate2 as an engine (decoding/engines.py): an export folder, or a run directory exported into a temporary
folder for the time of the load, decoded and scored through export/ct2_decoding.py (the run's tokenizers and task
around CTranslate2's greedy or beam search, ranked as seqxduce's beam ranks).

What it lacks is declared here: one exported model (no ensemble, no checkpoint choice: export the one wanted), no
attention or per-position figures, a batch that runs to its end once started, greedy and beam only, and of the
[decode] settings only those its search reads (ct2_decoding.HONOURED).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from seqxduce.api import Output, Report
from seqxduce.decoding.engines import Engine, Planned
from seqxduce.export.exporting import ACTS_AS, HONOURED, METADATA_FILE, is_export

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.decoding.jobs import RunSpec
    from seqxduce.decoding.phrases import PhraseText
    from seqxduce.decoding.scoring import PairScore
    from seqxduce.export.ct2_decoding import Ct2DecodeJob, Ct2ScoreJob, ExportedRun

# torch and CTranslate2's search are imported by the methods that use them: the class is read for its declarations
# (name, capabilities, settings) by `seqxduce plugins` and --help, which do not import torch


class CTranslate2Engine(Engine):
    """CTranslate2 over an export folder (`seqxduce export`) or a run directory exported on the fly."""

    name = "ctranslate2"
    capabilities = frozenset({"prefixes", "nbest", "scoring", "negative constraints"})  # suppress_sequences
    honoured = HONOURED
    acts_as = ACTS_AS
    auto_processes = False
    service = "seqxduce.serving.ct2_service:ct2_service"
    instead = ("decode with --engine seqxduce, or export the model you want (`seqxduce export RUN/best.pt -o DIR`) "
               "and decode that")

    @contextlib.contextmanager
    def open(self, spec: RunSpec) -> Iterator[ExportedRun]:
        from seqxduce.export.ct2_decoding import load_export

        with tempfile.TemporaryDirectory(prefix="seqxduce-ct2-") as work:
            yield load_export(spec.run, spec.overrides, Path(work), changes=spec.changes)

    def planned(self, spec: RunSpec) -> Planned | None:
        """An export folder's load, known before the translator loads (so a language it does not know is refused,
        and a complete output found, before it does); a run exported on the fly is known once exported."""
        if not is_export(spec.run):
            return None
        from seqxduce.decoding.changes import with_changes
        from seqxduce.rundir import RunDir

        recipe = with_changes(RunDir(Path(spec.run)).load_recipe(spec.overrides), spec.changes)
        return Planned(recipe, f"ctranslate2:{Path(spec.run).resolve()}",
                       sorted(p for p in Path(spec.run).iterdir() if p.is_file()))

    def check_processes(self, spec: RunSpec, processes: int | None) -> None:
        if (processes or 1) > 1 and not is_export(spec.run):  # before the export, the files and the workers
            from seqxduce.api import UserError

            raise UserError(f"--processes {processes} with --engine ctranslate2: {spec.run} is not an export folder "
                            f"(each worker would export the run again); `seqxduce export {spec.run} -o DIR` first "
                            "and decode DIR, or give --processes 1")

    def decode(self, loaded: ExportedRun, sources: Sequence[str], prefixes: Sequence[str] | None = None,
               prefix_where: str = "prefix ", annotate: bool = False,
               constraints: Sequence[PhraseText] | None = None) -> list[Output]:
        from seqxduce.decoding.decode import encode_prefixes
        from seqxduce.decoding.phrases import banned_ids
        from seqxduce.export import ct2_decoding

        if annotate:
            self.require("annotations", "decode")
        encoded = None if prefixes is None else encode_prefixes(loaded.tokenizers.tgt, prefixes, prefix_where)
        banned = None
        if constraints is not None and any(constraints):
            # CTranslate2's search has no dynamic beam allocation: phrases that must appear are refused, and those
            # that must not go through suppress_sequences, exactly
            if any(c.include for c in constraints):
                self.require("constraints", "decode")
            banned = banned_ids(loaded.tokenizers.tgt, constraints, "constraints of input ")
        return ct2_decoding.decode_sources(loaded, list(sources), encoded, banned)

    def decode_split(self, loaded: ExportedRun, split: str, annotate: bool = False) -> tuple[list[Output], Report]:
        from seqxduce.decoding.decode import score_outputs, split_examples
        from seqxduce.export import ct2_decoding

        if annotate:
            self.require("annotations", "decode")
        examples = split_examples(loaded.task, loaded.recipe, split)
        outputs = ct2_decoding.decode_sources(loaded, examples)
        for o, ex in zip(outputs, examples):
            o.reference = ex.ref
        return outputs, score_outputs(loaded.task, outputs, examples)

    def score(self, loaded: ExportedRun, sources: Sequence[str], targets: Sequence[str]) -> list[PairScore]:
        from seqxduce.export import ct2_decoding

        return ct2_decoding.score_pairs(loaded, sources, targets)

    def decode_job(self, spec: RunSpec, *, annotate: bool = False, align: bool = False, split: bool = False,
                   prefix_where: str = "prefix ", as_targets: bool = False, **named: str) -> Ct2DecodeJob:
        from seqxduce.export.ct2_decoding import Ct2DecodeJob

        return Ct2DecodeJob(spec.run, spec.overrides, spec.changes, split=split, prefix_where=prefix_where,
                            as_targets=as_targets, **named)

    def score_job(self, spec: RunSpec, normalize: bool = False) -> Ct2ScoreJob:
        from seqxduce.export.ct2_decoding import Ct2ScoreJob

        return Ct2ScoreJob(spec.run, spec.overrides, normalize)

    def described(self, loaded: ExportedRun, spec: RunSpec) -> str:
        return f"ctranslate2:{Path(spec.run).resolve()}"

    def announced(self, loaded: ExportedRun) -> str:
        return f"CTranslate2: {loaded.directory}"

    def model_files(self, loaded: ExportedRun, spec: RunSpec) -> list[Path]:
        """An export folder's own files; for a run exported on the fly into a temporary folder (a new one each
        time), the checkpoint the export was made from, as seqxduce's engine keys it, so that the same command
        with --resume finds the same job."""
        if is_export(spec.run):
            return sorted(p for p in Path(loaded.directory).iterdir() if p.is_file())
        metadata = json.loads((Path(loaded.directory) / METADATA_FILE).read_text(encoding="utf-8"))
        return [Path(metadata["checkpoint"])]

    def on_cpu(self, loaded: ExportedRun) -> bool:
        return loaded.translator.device == "cpu"

