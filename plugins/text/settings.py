"""Recipe settings of the char and word tokenizers (torch-free: `seqxduce plugins` reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, setting


@dataclass
class VocabSettings(Settings):
    min_freq: int = setting(1, help="keep tokens seen at least this often in the training text", min=1)
    max_size: int = setting(0, help="keep at most this many most frequent tokens, besides the 4 specials "
                                    "(0 = no limit)", min=0)


@dataclass
class WordSettings(VocabSettings):
    unknown: str = setting("unk", help="what a word outside the vocabulary becomes: unk = the one <unk> id; "
                                       "signature = its class by capitalization, digits, dashes and suffix "
                                       "(<unk-Cap-s>, <unk-lc-ing>; Berkeley parser), each class learnt from the "
                                       "training words below min_freq", choices=("unk", "signature"))
