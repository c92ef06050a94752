"""Multi30k (WMT16 multimodal task 1): the raw text files of github.com/multi30k/dataset."""

from __future__ import annotations

from pathlib import Path

from seqxduce.api import UserError

from .download import Source, fetch, gunzip, log
from .settings import TranslationSettings

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
LANGUAGES = ("en", "de", "fr", "cs")
DEFAULT_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
TEST_SETS = ("val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
# The repository publishes no checksums; these sizes, from the Multi30k paper and WMT16/17 task pages,
# catch a truncated or wrong file (gzip's CRC catches a corrupted one).
EXPECTED_LINES = {"train": 29000, "val": 1014, "test_2016_flickr": 1000, "test_2017_flickr": 1000,
                  "test_2017_mscoco": 461}


class Multi30k:
    """Multi30k text in <data_dir>/<split name>.<lang>; plain files already there are used as they are."""

    def __init__(self, settings: TranslationSettings):
        for key in ("src_lang", "tgt_lang"):
            lang = getattr(settings, key)
            if lang not in LANGUAGES:
                raise UserError(f"[task] {key} = {lang!r}: multi30k has {', '.join(LANGUAGES)}")
        names = dict(DEFAULT_SPLITS)
        for split, key in (("valid", "valid_set"), ("test", "test_set")):
            value = getattr(settings, key)
            if value:
                if value not in TEST_SETS:
                    raise UserError(f"[task] {key} = {value!r}: multi30k has {', '.join(TEST_SETS)}")
                names[split] = value
        self.settings = settings
        self.names = names

    def files(self, split: str, data_dir: Path) -> tuple[Path, Path]:
        """<data_dir>/<name>.<src_lang> and .<tgt_lang>, e.g. val.en and val.de."""
        name = self.names[split]
        return (Path(data_dir) / f"{name}.{self.settings.src_lang}",
                Path(data_dir) / f"{name}.{self.settings.tgt_lang}")

    def prepare(self, data_dir: Path) -> None:
        """Download and decompress the split files that are missing (none, when the plain files exist)."""
        data_dir = Path(data_dir)
        for split in DEFAULT_SPLITS:
            for path in self.files(split, data_dir):
                if not path.is_file():
                    self._fetch(path, data_dir)

    def _fetch(self, plain: Path, data_dir: Path) -> None:
        if not self.settings.download:
            raise UserError(f"{plain}: missing and [task] download = false; put the Multi30k text there "
                            "or set download = true")
        archive = fetch(Source(f"{BASE_URL}/{plain.name}.gz", f"multi30k.{plain.name}.gz"),
                        data_dir / "downloads")
        gunzip(archive, plain)
        name = plain.name.rsplit(".", 1)[0]
        expected = EXPECTED_LINES.get(name)
        with open(plain, "rb") as f:
            lines = sum(1 for _ in f)
        if expected is not None and lines != expected:
            plain.unlink()
            archive.unlink()
            raise UserError(f"{plain}: {lines} lines, expected {expected}; both files were deleted, "
                            "run again to download them anew")
        log(f"{plain}: {lines} lines")
