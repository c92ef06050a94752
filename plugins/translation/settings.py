"""Recipe settings of the translation task (torch-free: `seqxduce plugins` reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, UserError, setting

DATASETS = ("wmt14", "multi30k", "files")


# the keys of one kind of dataset: the others name their files themselves
_FILES = {"read_when": {"dataset": ("files",)}, "instead": "a downloaded dataset names its own files; use valid_set "
                                                           "and test_set, or dataset = \"files\""}
_DOWNLOADED = {"read_when": {"dataset": ("wmt14", "multi30k")},
               "instead": "the files dataset reads <data_dir>/<prefix>.<lang>: use train_prefix, valid_prefix and "
                          "test_prefix"}


@dataclass
class TranslationSettings(Settings):
    dataset: str = setting("files", help="wmt14, multi30k (both download themselves) or files (your own text)",
                           choices=DATASETS)
    src_lang: str = setting("en", help="source language code; also the suffix of the source files")
    tgt_lang: str = setting("de", help="target language code; also the suffix of the target files")
    train_prefix: str = setting("train", help="files dataset: training text is <data_dir>/<prefix>.<lang>",
                                **_FILES)
    valid_prefix: str = setting("valid", help="files dataset: validation text is <data_dir>/<prefix>.<lang>",
                                **_FILES)
    test_prefix: str = setting("test", help="files dataset: test text is <data_dir>/<prefix>.<lang>", **_FILES)
    valid_set: str = setting("", help="wmt14: a sacrebleu test set (default wmt13 = newstest2013); "
                                      "multi30k: a split file name (default val)", **_DOWNLOADED)
    test_set: str = setting("", help="wmt14: a sacrebleu test set (default wmt14/full = newstest2014, 3003 "
                                     "lines); multi30k: test_2016_flickr (default), test_2017_flickr, ...",
                             **_DOWNLOADED)
    corpora: list[str] = setting([], help="wmt14: training corpora to use (default all of the paper's: "
                                          "europarl, commoncrawl, news-commentary, and un, giga for en-fr)",
                                  read_when={"dataset": ("wmt14",)}, instead="the multi30k and files datasets have "
                                                                             "one training corpus")
    more_references: list[str] = setting([], help="files dataset: further reference translations of the test "
                                                  "split, file names under data_dir (one line per test line); "
                                                  "BLEU and chrF score all references as sacreBLEU does")
    download: bool = setting(True, help="download missing data (false: fail with a message instead)")
    max_len: int = setting(250, help="training pairs with more whitespace tokens on a side are dropped (0 = off)",
                           min=0)
    max_ratio: float = setting(9.0, help="training pairs whose token-count ratio exceeds this are dropped "
                                         "(Moses clean-corpus-n uses 9, fairseq's WMT scripts 1.5; 0 = off)",
                               min=0.0)
    tokenized_bleu: bool = setting(False, help="also report the paper-style tokenized BLEU (13a tokens, "
                                               "compounds split as ##AT##-##AT##); not comparable to sacreBLEU")
    literature_bleu: bool = setting(False, help="also report BLEU as Multi30k papers of the fairseq era do "
                                                "(Wu et al. 2021): hypotheses and references lowercased, "
                                                "Moses-tokenized (sacremoses, tgt_lang), then sacreBLEU with "
                                                "tokenize none (bleu_moses_lc); not comparable to sacreBLEU. "
                                                "With evaluate: --set task.literature_bleu=true")

    # several corpora and language pairs in one model (issue #77): docs/multilingual.md
    corpus: list[dict] = setting([], help="several training corpora, each a [[task.corpus]] table: src_lang, "
                                          "tgt_lang, and optionally dataset, data_dir (relative to [task] "
                                          "data_dir), train_prefix, valid_prefix, test_prefix, valid_set, "
                                          "test_set, weight (default 1; see [train] sampling_temperature); a key "
                                          "left out is [task]'s own. Empty: the one pair src_lang -> tgt_lang",
                                 keyed_when_changed=True)
    lang_tag: str = setting("none", help="the target language as a token (<2xx>, lang_tag_format): source = at "
                                         "the start of the source, target = the decoder's first token (M2M-100, "
                                         "NLLB), none = no tag", choices=("none", "source", "target"),
                            keyed_when_changed=True)
    lang_tag_format: str = setting("<2{lang}>", help="how a language's tag is spelt, {lang} standing for its code: "
                                                     "<2{lang}> (Johnson et al. 2017) or >>{lang}<< (Marian / "
                                                     "OPUS-MT's >>fra<<)", keyed_when_changed=True)
    tgt_langs: list[str] = setting([], help="the target languages of a model of several that no [[task.corpus]] "
                                            "names, chosen by their tag (lang_tag): an imported multilingual Marian "
                                            "model's, from its >>xx<< tokens. Empty: the corpora's",
                                   keyed_when_changed=True)

    def validate(self) -> None:
        """Checks the recipe loader runs before any data is read."""
        from .corpora import check_corpora

        check_corpora(self)
        # the ratio is longer side / shorter side, never below 1: a limit in (0, 1) would drop every pair
        if 0.0 < self.max_ratio < 1.0:
            raise UserError(f"[task] max_ratio = {self.max_ratio}: use 0 (off) or a ratio of at least 1, e.g. 1.5")
