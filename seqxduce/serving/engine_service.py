"""`seqxduce serve --engine NAME` for an engine that declares no service of its own (Engine.service's default): the
server's requests, limits and batching around the engine's decode(), with the recipe's decode settings.

What the engine loaded must carry the run's `recipe` and `tokenizers` (as seqxduce's LoadedRun does): the server
batches by their lengths. A request may change no [decode] setting (the engine's search is its own); nbest above 1,
a target prefix and an input's constraints (phrases that must appear, "constraints", or must not, "negative
constraints") are refused with a 422 when the engine lacks the feature, /v1/attention unless it has "attention"
(which only an engine with a service of its own can give). An engine is handed constraints only where a batch has
some, as seqxduce.decode hands them: one written before them keeps its decode().
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqxduce.api import Output
from seqxduce.decoding.phrases import PhraseText
from seqxduce.serving.limits import DecodeAsk, Prefixed, RequestError, source_text
from seqxduce.serving.service import Asked, Service


class EngineService(Service):
    """Any engine's loaded run, served through Engine.decode."""

    def __init__(self, engine: Any, loaded: Any):
        self.engine = engine
        super().__init__(loaded)

    def decode_keys(self) -> dict[str, Any]:
        """None: the engine's search reads its own settings, not a request's."""
        return {}

    def key_for(self, ask: DecodeAsk) -> Asked:
        if ask.changes:
            raise RequestError(422, f"{', '.join(sorted(ask.changes))}: the {self.engine.name} engine takes no decode "
                                    "setting from a request; send inputs (and nbest) only")
        if ask.nbest and ask.nbest > 1 and "nbest" not in self.engine.capabilities:
            raise RequestError(422, f"nbest: the {self.engine.name} engine gives one output per source; send nbest 1")
        if "prefixes" not in self.engine.capabilities and any(isinstance(s, Prefixed) and s.prefix
                                                               for s in ask.inputs):
            raise RequestError(422, f"prefix: the {self.engine.name} engine takes no target prefix; leave it out")
        return Asked((), self.settings)

    def refuse_phrases(self, phrases: PhraseText, where: str) -> None:
        """A 422 naming the input when the engine lacks the feature its phrases need."""
        for feature, given, what in (("constraints", phrases.include, "phrases that must appear"),
                                     ("negative constraints", phrases.exclude, "phrases that must not appear")):
            if given and feature not in self.engine.capabilities:
                raise RequestError(422, f"{where}: the {self.engine.name} engine takes no {what} (the feature "
                                        f"{feature!r}); leave them out, or serve with --engine seqxduce")

    def described(self) -> str:
        return self.engine.announced(self.run)

    def positions(self) -> int | None:
        return None

    def served(self) -> dict[str, Any]:
        return {"engine": self.engine.name}

    def facts(self, run: Path) -> dict[str, Any]:
        from seqxduce.inspection.run_info import run_info

        try:
            return run_info(run).as_dict()
        except Exception:  # noqa: BLE001 - a plugin's engine may load what is no run directory
            return {"engine": self.engine.name}

    def _decode(self, sources: Sequence[str | Prefixed], key: Asked) -> list[Output]:
        prefixes = None
        if any(isinstance(s, Prefixed) and s.prefix for s in sources):  # key_for refused them where the engine
            prefixes = [s.prefix if isinstance(s, Prefixed) else "" for s in sources]  # has none
        given = [s.constraints if isinstance(s, Prefixed) else () for s in sources]
        # refuse_phrases refused those the engine lacks; an engine is handed them only where there are some
        phrased = {"constraints": [PhraseText.from_list(g, "constraints") for g in given]} if any(given) else {}
        return self.engine.decode(self.run, [source_text(s) for s in sources], prefixes, **phrased)

    def attention(self, source: str, target: str | None, key: Asked, stop: Any = None) -> dict[str, Any]:
        raise RequestError(422, f"/v1/attention needs seqxduce's own engine; this server runs --engine "
                                f"{self.engine.name}")
