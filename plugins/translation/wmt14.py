"""WMT 2014 English-German and English-French, as the paper trained and tested on them.

Training text comes from the official statmt.org archives (the corpora listed on the WMT14 translation
task page); newstest2013 (dev) and newstest2014 (test) come through sacrebleu's test-set registry, whose
URLs and MD5 sums are the ones sacrebleu itself checks. Layout under data_dir:
  downloads/            archives as downloaded, and a folder per unpacked archive
  wmt14.<src>-<tgt>/    plain text: train.<lang>, <test set>.<lang>
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seqxduce.api import UserError

from .download import Source, concatenate, extract_segments, fetch, gunzip, unpack
from .settings import TranslationSettings

STATMT = "https://www.statmt.org"


@dataclass(frozen=True)
class Corpus:
    """One training corpus: the archive holding it and its file stem inside, without the language suffix.

    statmt.org publishes no checksums for these archives, so none are given: a download is checked
    against the size the server announces, and the archive's gzip CRC is checked when it is unpacked.
    """

    name: str
    archive: Source
    stem: str  # "{x}" is the non-English language
    gzipped: bool = False  # giga-fren ships its text gzipped inside the tar


def _source(path: str) -> Source:
    return Source(f"{STATMT}/{path}", path.rsplit("/", 1)[1])


CORPORA = {
    "europarl": Corpus("europarl", _source("wmt13/training-parallel-europarl-v7.tgz"), "training/europarl-v7.{x}-en"),
    "commoncrawl": Corpus("commoncrawl", _source("wmt13/training-parallel-commoncrawl.tgz"), "commoncrawl.{x}-en"),
    "news-commentary": Corpus("news-commentary", _source("wmt14/training-parallel-nc-v9.tgz"),
                              "training/news-commentary-v9.{x}-en"),
    "un": Corpus("un", _source("wmt13/training-parallel-un.tgz"), "un/undoc.2000.{x}-en"),
    "giga": Corpus("giga", _source("wmt10/training-giga-fren.tar"), "giga-fren.release2.fixed", gzipped=True),
}
PAIR_CORPORA = {
    "de": ("europarl", "commoncrawl", "news-commentary"),
    "fr": ("europarl", "commoncrawl", "un", "news-commentary", "giga"),
}
DEFAULT_VALID, DEFAULT_TEST = "wmt13", "wmt14/full"  # newstest2013; newstest2014 with all 3003 lines


class Wmt14:
    """WMT14 en<->de or en<->fr, training corpora chosen by [task] corpora (default: all of the paper's)."""

    def __init__(self, settings: TranslationSettings):
        langs = {settings.src_lang, settings.tgt_lang}
        other = (langs - {"en"}).pop() if "en" in langs and len(langs) == 2 else ""
        if other not in PAIR_CORPORA:
            raise UserError(f"[task] src_lang/tgt_lang = {settings.src_lang}/{settings.tgt_lang}: wmt14 has "
                            "en-de, de-en, en-fr and fr-en")
        corpora = list(settings.corpora) or list(PAIR_CORPORA[other])
        for name in corpora:
            if name not in PAIR_CORPORA[other]:
                raise UserError(f"[task] corpora: {name!r} is not a WMT14 {other}-en corpus; "
                                f"choose from {', '.join(PAIR_CORPORA[other])}")
        self.settings = settings
        self.other = other
        self.corpora = corpora
        self.test_sets = {"valid": settings.valid_set or DEFAULT_VALID, "test": settings.test_set or DEFAULT_TEST}
        self.pair = f"{settings.src_lang}-{settings.tgt_lang}"
        self.train_name = "train" if not settings.corpora else "train." + "+".join(corpora)

    def folder(self, data_dir: Path) -> Path:
        return Path(data_dir) / f"wmt14.{self.pair}"

    def files(self, split: str, data_dir: Path) -> tuple[Path, Path]:
        """train.<lang> or <test set>.<lang> (e.g. wmt14_full.en) in the pair's folder."""
        name = self.train_name if split == "train" else self.test_sets[split].replace("/", "_")
        folder = self.folder(data_dir)
        return folder / f"{name}.{self.settings.src_lang}", folder / f"{name}.{self.settings.tgt_lang}"

    def prepare(self, data_dir: Path) -> None:
        """Fetch and build every split that is not already in plain text."""
        data_dir = Path(data_dir)
        self.folder(data_dir).mkdir(parents=True, exist_ok=True)
        if not all(p.is_file() for p in self.files("train", data_dir)):
            self._build_train(data_dir)
        for split in ("valid", "test"):
            if not all(p.is_file() for p in self.files(split, data_dir)):
                self._build_test_set(split, data_dir)

    def _check_download_allowed(self, what: str) -> None:
        if not self.settings.download:
            raise UserError(f"WMT14 {what} is missing and [task] download = false; set download = true")

    def _corpus_file(self, corpus: Corpus, lang: str, downloads: Path) -> Path:
        archive = fetch(corpus.archive, downloads)
        folder = unpack(archive, downloads / archive.name.split(".")[0])
        path = folder / f"{corpus.stem.format(x=self.other)}.{lang}"
        if corpus.gzipped:
            return gunzip(path.with_name(path.name + ".gz"), path)
        if not path.is_file():
            raise UserError(f"{archive}: has no {path.relative_to(folder)}; delete {folder} and {archive} "
                            "and run again")
        return path

    def _build_train(self, data_dir: Path) -> None:
        self._check_download_allowed("training text")
        downloads = data_dir / "downloads"
        for path, lang in zip(self.files("train", data_dir), (self.settings.src_lang, self.settings.tgt_lang)):
            concatenate([self._corpus_file(CORPORA[name], lang, downloads) for name in self.corpora], path)

    def _build_test_set(self, split: str, data_dir: Path) -> None:
        name = self.test_sets[split]
        self._check_download_allowed(f"test set {name}")
        src_markup, ref_markup = sacrebleu_test_set(name, self.pair, data_dir / "downloads")
        src_out, tgt_out = self.files(split, data_dir)
        extract_segments(src_markup, src_out)
        extract_segments(ref_markup, tgt_out)


def sacrebleu_test_set(name: str, pair: str, downloads: Path) -> tuple[Path, Path]:
    """Download (into downloads, checked by sacrebleu's MD5) a sacrebleu test set; return its source and
    reference SGM/XML files."""
    from sacrebleu.dataset import DATASETS

    if name not in DATASETS:
        raise UserError(f"[task] valid_set/test_set = {name!r} is not a sacrebleu test set; try wmt13, wmt14/full")
    dataset = DATASETS[name]
    if pair not in dataset.langpairs:
        raise UserError(f"sacrebleu test set {name} has no {pair}; it has {', '.join(sorted(dataset.langpairs))}")
    src_rel, ref_rel = dataset.langpairs[pair][:2]
    md5s = dataset.md5 or [None] * len(dataset.data)
    for url, md5 in zip(dataset.data, md5s):
        filename = name.replace("/", "_") + "." + url.rsplit("/", 1)[1]
        archive = fetch(Source(url, filename, md5=md5), downloads)
        folder = unpack(archive, downloads / filename.split(".")[0])
        if (folder / src_rel).is_file() and (folder / ref_rel).is_file():
            return folder / src_rel, folder / ref_rel
    raise UserError(f"sacrebleu test set {name}: {src_rel} or {ref_rel} not found in its archive")
