"""The `marian` tokenizer's settings and special pieces (torch- and sentencepiece-free: `seqxduce plugins` reads
them)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, setting

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"


@dataclass
class MarianTokenizerSettings(Settings):
    """The one choice a Marian folder makes beyond its files: the piece its decoder starts from."""

    decoder_start: str = setting(PAD, help="the piece the decoder starts from (config.json's decoder_start_token_id): "
                                           "<pad> in Marian's models; a model exported by seqxduce starts from its "
                                           "own bos (<s>)")
