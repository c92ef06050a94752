"""seqxduce_marian: Marian / OPUS-MT models in the Hugging Face format as seqxduce runs.

`seqxduce import DIR --from marian -o RUN` reads config.json, the weights (model.safetensors, or
pytorch_model.bin read with torch.load(weights_only=True)), source.spm, target.spm and vocab.json; the model
becomes the Transformer plugin's (`[model] name = "transformer"` with Marian's activation, position layout,
embedding scale and logits bias as its settings), the tokenizers this plugin's `marian` tokenizer: a
SentencePiece model per side whose pieces are numbered by Marian's vocab.json.

Importing this module imports neither torch nor sentencepiece; the factories do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqxduce import hookimpl

if TYPE_CHECKING:  # pragma: no cover
    from seqxduce.api import Importer, Tokenizer


def build_marian_tokenizer(settings) -> Tokenizer:
    """Tokenizer factory: an empty Marian tokenizer; the core loads it from a run directory."""
    from .tokenizer import MarianTokenizer

    return MarianTokenizer(settings)


def build_marian_importer(settings: None) -> Importer:
    """Importer factory: reads a Hugging Face Marian folder."""
    from .importer import MarianImporter

    return MarianImporter()


@hookimpl
def register_tokenizers(register):
    """Register `marian`."""
    from .tokenizer_settings import MarianTokenizerSettings

    register("marian", build_marian_tokenizer, settings=MarianTokenizerSettings,
             help="a Marian model's SentencePiece model numbered by its vocab.json (made by `seqxduce import "
                  "--from marian`, not trained)")


@hookimpl
def register_importers(register):
    """Register `marian`."""
    register("marian", build_marian_importer,
             help="Marian / OPUS-MT models in the Hugging Face format (config.json, safetensors, source.spm, "
                  "target.spm, vocab.json)")
