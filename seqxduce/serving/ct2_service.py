"""`seqxduce serve --engine ctranslate2`: the same server over an exported model that CTranslate2 decodes.

The requests, limits, batching and answers are the server's own (serving.app, serving.batching); what differs is
the search, which is export.ct2_decoding's (the one `seqxduce decode --engine ctranslate2` runs: the run's
tokenizers, CTranslate2's search over our vocabulary, rescored and ranked as our beam ranks): a request may change
the settings that search honours (beam, alpha, the length limits, nbest) and nothing else. CTranslate2 cannot
stop a call between its steps, so a batch is decoded in calls of at most CALL_SOURCES sources, the stop check read
between them: a batch whose clients all left or whose deadline passed, or a server stopping, ends after the call
under way. A target prefix is CTranslate2's target_prefix,
ranked as seqxduce's search ranks it (export.ct2_decoding); an input's phrases that must not appear ("!words" in
its constraints) are CTranslate2's suppress_sequences, those that must appear need seqxduce's own search (dynamic
beam allocation) and are refused with 422, as /v1/attention is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqxduce.decoding.decode import Output
from seqxduce.decoding.phrases import PhraseText
from seqxduce.decoding.search import SearchStopped
from seqxduce.export.ct2_decoding import HONOURED, ExportedRun, decode_sources
from seqxduce.serving.batching import StopCheck
from seqxduce.serving.limits import Prefixed, RequestError, source_text
from seqxduce.serving.service import Asked, Service, model_positions
from seqxduce.settings_check import request_keys

# sources per CTranslate2 call: a batch's work that a stop must wait for (a call cannot be cut), against the
# batching a call gains (on CPU, little past a few sources x beam 4)
CALL_SOURCES = 8


class CT2Service(Service):
    """An exported model and the search settings requests ask for (each set of changes a recipe of its own)."""

    def __init__(self, run: ExportedRun):
        self.exported = run
        super().__init__(run)  # type: ignore[arg-type]  (the attributes Service reads: recipe, tokenizers)

    def decode_keys(self) -> dict[str, Any]:
        """The [decode] keys a request may set: those of the recipe's decoder that CTranslate2's search honours."""
        return {name: getattr(self.settings, name) for name in request_keys(self.settings)
                if name in HONOURED and name != "nbest"}

    def unchanged(self) -> ExportedRun:
        return self.exported

    def build(self, settings: Any) -> ExportedRun:
        """The export with a request's settings in its recipe (the translator shared)."""
        recipe = self.exported.recipe
        return dataclasses.replace(self.exported, recipe=dataclasses.replace(
            recipe, decode=dataclasses.replace(recipe.decode, settings=settings)))

    def described(self) -> str:
        translator = self.exported.translator
        return f"{self.exported.directory} with CTranslate2 ({translator.device}, {translator.compute_type})"

    def positions(self) -> int | None:
        """The length the model was built for, read from the model its recipe builds on no device (its shapes,
        no weights)."""
        import torch

        from seqxduce import components

        with torch.device("meta"):
            return model_positions(components.build_model(self.exported.recipe, self.exported.tokenizers.vocab()))

    def served(self) -> dict[str, Any]:
        return {"engine": "ctranslate2", "export": str(self.exported.directory)}

    def facts(self, run: Path) -> dict[str, Any]:
        """/v1/info's facts of an export folder as run_info gives them of a run (`seqxduce info` reads run
        directories); of a run exported on the fly, the run's own."""
        from seqxduce.inspection.run_info import count_parameters, recipe_summary, run_info, versions, vocabulary

        if Path(self.exported.directory) != run:
            return run_info(run).as_dict()
        exported = self.exported
        return {"export_dir": str(exported.directory), "recipe": recipe_summary(exported.recipe),
                "parameters": count_parameters(exported.recipe, exported.tokenizers),
                "vocabulary": vocabulary(exported.tokenizers), "versions": versions(exported.recipe)}

    def decode(self, sources: Sequence[str | Prefixed], key: Asked, stop: StopCheck | None = None) -> list[Any]:
        """Decode one batch with CTranslate2, in calls of at most CALL_SOURCES sources (a call cannot be cut
        short): SearchStopped between two calls once stop() is true, as seqxduce's search stops between steps."""
        answers: list[Any] = []
        for start in range(0, len(sources), CALL_SOURCES):
            if stop is not None and stop():
                raise SearchStopped("nobody waits for this batch")
            answers.extend(self.answers(sources[start:start + CALL_SOURCES], key))
        return answers

    def refuse_phrases(self, phrases: PhraseText, where: str) -> None:
        """Phrases that must appear are a 422: CTranslate2's search cannot hold an output to them."""
        if phrases.include:
            raise RequestError(422, f"{where}: phrases that must appear need seqxduce's own engine (CTranslate2's "
                                    "search has no dynamic beam allocation); this server runs --engine ctranslate2: "
                                    "send only \"!words\" phrases, or serve with --engine seqxduce")

    def _decode(self, sources: Sequence[str | Prefixed], key: Asked) -> list[Output]:
        run = self.decoder(key)
        tgt = run.tokenizers.tgt
        # only phrases that must not appear reach here (refuse_phrases): suppress_sequences, batched by them
        phrases = self._constraints(sources, tgt)
        banned = None if phrases is None else [p.exclude for p in phrases]
        return decode_sources(run, [source_text(s) for s in sources], self._prefixes(sources, tgt), banned)

    def attention(self, source: str, target: str | None, key: Asked, stop: StopCheck | None = None
                  ) -> dict[str, Any]:
        raise RequestError(422, "/v1/attention needs seqxduce's own engine; this server runs --engine ctranslate2")


def ct2_service(engine: Any, run: ExportedRun) -> CT2Service:
    """CTranslate2's engine's service (CTranslate2Engine.service names it): the export it loaded."""
    return CT2Service(run)
