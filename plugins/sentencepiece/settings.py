"""Recipe settings of the SentencePiece tokenizer (torch- and sentencepiece-free)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, setting


@dataclass
class SentencePieceSettings(Settings):
    model_type: str = setting("bpe", help="bpe (the paper's byte-pair encoding), unigram, char or word",
                              choices=("bpe", "unigram", "char", "word"))
    # the 4 specials and at least one piece
    vocab_size: int = setting(8000, help="vocabulary size including <pad> <s> </s> <unk> (paper: 37000 en-de)",
                              min=5)
    character_coverage: float = setting(1.0, help="share of characters covered; rarer ones become <unk> "
                                                  "(1.0 for European languages, 0.9995 for CJK)",
                                        min=0.0, max=1.0, min_exclusive=True)
    input_sentence_size: int = setting(0, help="train on a random sample of this many sentences (0 = all)", min=0)
    max_sentence_length: int = setting(4192, help="training sentences longer than this many bytes are skipped",
                                       min=1)
    normalization_rule_name: str = setting("nmt_nfkc", help="text normalization: nmt_nfkc, nfkc, identity, ...")
    byte_fallback: bool = setting(False, help="spell unknown characters as UTF-8 bytes instead of <unk>")
    split_digits: bool = setting(False, help="split numbers into single digits")
    num_threads: int = setting(2, help="threads used to train the model", min=1)
    seed: int = setting(1, help="seed of sentencepiece's sampling (input_sentence_size, unigram)")
