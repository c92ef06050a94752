"""`seqxduce serve --engine ctranslate2`: the same server over an exported model that CTranslate2 decodes.

The requests, limits, batching and answers are the server's own (serving.app, serving.batching); what differs is
the search, which is export.ct2_decoding's (the one `seqxduce decode --engine ctranslate2` runs: the run's
tokenizers, CTranslate2's search over our vocabulary, rescored and ranked as our beam ranks): a request may change
the settings that search honours (beam, alpha, the length limits, nbest) and nothing else. CTranslate2 cannot
stop a batch between its steps, so a batch whose clients all left or whose deadline passed ends when its call
returns (a batch is bounded by --max-batch-tokens and --max-work). A target prefix is CTranslate2's target_prefix,
ranked as seqxduce's search ranks it (export.ct2_decoding); /v1/attention needs seqxduce's own engine and is
refused with 422.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqxduce.decoding.decode import Output
from seqxduce.export.ct2_decoding import HONOURED, ExportedRun, decode_sources
from seqxduce.serving.batching import StopCheck
from seqxduce.serving.limits import Prefixed, RequestError, source_text
from seqxduce.serving.service import Asked, Service, model_positions
from seqxduce.settings_check import request_keys


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
        """Decode one batch with CTranslate2 (the batcher reads stop before the call, which cannot be cut
        short)."""
        return self.answers(sources, key)

    def _decode(self, sources: Sequence[str | Prefixed], key: Asked) -> list[Output]:
        run = self.decoder(key)
        return decode_sources(run, [source_text(s) for s in sources], self._prefixes(sources, run.tokenizers.tgt))

    def attention(self, source: str, target: str | None, key: Asked, stop: StopCheck | None = None
                  ) -> dict[str, Any]:
        raise RequestError(422, "/v1/attention needs seqxduce's own engine; this server runs --engine ctranslate2")
