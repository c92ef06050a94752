"""Recipe settings of the SentencePiece tokenizer (torch- and sentencepiece-free)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, UserError, setting

# how a model is trained: a given model_file was trained already, with its own options
_TRAINED = {"read_when": {"model_file": ("",)},
            "instead": "the given model_file was trained with its own; leave model_file empty to train one here"}


@dataclass
class SentencePieceSettings(Settings):
    model_file: str = setting("", help="an existing SentencePiece model (.model) used instead of training one: for "
                                       "both sides, or with target_model_file the source side's (absolute, or "
                                       "relative to the working directory); its pieces and special ids are kept, "
                                       "and vocab_size must be its size", file=True)
    target_model_file: str = setting("", help="with shared = false: the target side's existing model (model_file "
                                              "is then the source side's; empty = model_file for both sides)",
                                   read_when={"shared": (False,)}, file=True,
                                   instead="with shared = true model_file is both sides' model")
    model_type: str = setting("bpe", help="bpe (the paper's byte-pair encoding), unigram, char or word",
                              choices=("bpe", "unigram", "char", "word"), **_TRAINED)
    # the 4 specials and at least one piece
    vocab_size: int = setting(8000, help="vocabulary size including <pad> <s> </s> <unk> (paper: 37000 en-de)",
                              min=5)
    character_coverage: float = setting(1.0, help="share of characters covered; rarer ones become <unk> "
                                                  "(1.0 for European languages, 0.9995 for CJK)",
                                        min=0.0, max=1.0, min_exclusive=True, **_TRAINED)
    input_sentence_size: int = setting(0, help="train on a random sample of this many sentences (0 = all)", min=0,
                                      **_TRAINED)
    max_sentence_length: int = setting(4192, help="training sentences longer than this many bytes are skipped",
                                       min=1, **_TRAINED)
    normalization_rule_name: str = setting("nmt_nfkc", help="text normalization: nmt_nfkc, nfkc, identity, ...",
                                           **_TRAINED)
    byte_fallback: bool = setting(False, help="spell unknown characters as UTF-8 bytes instead of <unk>",
                                  **_TRAINED)
    split_digits: bool = setting(False, help="split numbers into single digits", **_TRAINED)
    num_threads: int = setting(2, help="threads used to train the model", min=1, **_TRAINED)
    seed: int = setting(1, help="seed of sentencepiece's sampling (input_sentence_size, unigram)",
                         **_TRAINED)
    # subword regularization: only the training split's encoding samples (the trainer asks for it per epoch)
    sample_alpha: float = setting(0.0, help="subword regularization of the training split (0 = off): each epoch "
                                            "encodes it anew with a sampled segmentation (valid, test and "
                                            "decoding keep the best one); bpe: BPE-dropout's probability of "
                                            "dropping a merge (Provilkov et al. 2020: 0.1), below 1; unigram: "
                                            "Kudo 2018's smoothing exponent (smaller = more varied)",
                                  min=0.0)
    sample_nbest: int = setting(-1, help="unigram sampling only: sample among this many best segmentations "
                                         "(-1 = from all of them, at least 2 otherwise)",
                                min=-1, ignored_when={"sample_alpha": (0,)}, read_when={"model_type": ("unigram",)},
                                instead="it is unigram sampling's (model_type = \"unigram\" with sample_alpha > 0)")

    def planned_vocab_size(self) -> int | None:
        return self.vocab_size

    def validate(self) -> None:
        """Sampling needs a model with several segmentations (sample_nbest is unigram sampling's only: declared)."""
        if self.target_model_file and not self.model_file:
            raise UserError("[tokenizer] target_model_file is given without model_file: name the source side's "
                            "model too (or train both: leave both empty)")
        if self.sample_alpha > 0 and self.model_type not in ("bpe", "unigram"):
            raise UserError(f"[tokenizer] sample_alpha = {self.sample_alpha:g}: a {self.model_type} model has one "
                            "segmentation to sample from; set model_type = \"bpe\" or \"unigram\", or "
                            "sample_alpha = 0")
        if self.model_type == "bpe" and self.sample_alpha >= 1:
            raise UserError(f"[tokenizer] sample_alpha = {self.sample_alpha:g} drops every BPE merge (single "
                            "characters only); use a dropout probability below 1, e.g. 0.1")
        if self.sample_nbest in (0, 1):
            raise UserError(f"[tokenizer] sample_nbest = {self.sample_nbest} leaves nothing to sample from; use "
                            "-1 (all segmentations) or at least 2")
