"""seqxduce_transformer: the Transformer (Vaswani et al. 2017) and the Universal Transformer (Dehghani et al.
2019, with Adaptive Computation Time).

Importing this package does not import torch: the factories import the model modules when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqxduce import hookimpl

from .settings import (
    TRANSFORMER_PRESETS,
    UNIVERSAL_PRESETS,
    TransformerSettings,
    UniversalSettings,
)

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.api import Model, VocabInfo


def build_transformer(settings: TransformerSettings, vocab: VocabInfo) -> Model:
    """Model factory: a Transformer for the given vocabularies."""
    from .transformer import Transformer

    return Transformer(settings, vocab)


def build_universal_transformer(settings: UniversalSettings, vocab: VocabInfo) -> Model:
    """Model factory: a Universal Transformer for the given vocabularies."""
    from .universal import UniversalTransformer

    return UniversalTransformer(settings, vocab)


@hookimpl
def register_models(register):
    """Register `transformer` and `universal_transformer`."""
    register("transformer", build_transformer, settings=TransformerSettings, presets=TRANSFORMER_PRESETS,
             help="Transformer encoder-decoder (Vaswani et al. 2017); presets base, big")
    register("universal_transformer", build_universal_transformer, settings=UniversalSettings,
             presets=UNIVERSAL_PRESETS,
             help="Universal Transformer (Dehghani et al. 2019), optional ACT; presets base, big")

