"""Several training corpora and language pairs in one translation recipe (`[[task.corpus]]`), checked one
mistake per line, and the language tags a multilingual model reads (docs/multilingual.md)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqxduce.api import UserError

if TYPE_CHECKING:  # pragma: no cover
    from .settings import TranslationSettings

# the [task] keys a corpus may give for itself; the others are the task's for every corpus
OWN_KEYS = ("src_lang", "tgt_lang", "dataset", "data_dir", "train_prefix", "valid_prefix", "test_prefix",
            "valid_set", "test_set")
KEYS = (*OWN_KEYS, "weight")
# a language code as the files' suffix and the tag spell it: ISO 639 (en, deu), with a script or region (zh_Hant)
LANGUAGE = re.compile(r"[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})*")


# how a tag is spelt by default ([task] lang_tag_format): Johnson et al. 2017's <2es>; Marian's is >>{lang}<<
TAG_FORMAT = "<2{lang}>"
PLACE = "{lang}"


def tag(lang: str, fmt: str = TAG_FORMAT) -> str:
    """The token that names a target language: <2es> as Johnson et al. 2017 write it, or as fmt spells it."""
    return fmt.replace(PLACE, lang)


def direction_name(corpus: Corpus) -> str:
    """A direction as validation and test name its scores (en-de): its first corpus's name without a place."""
    return "-".join(corpus.direction)


@dataclass(frozen=True)
class Corpus:
    """One training corpus: its name (the direction, and its place when a direction has several), the task's
    settings with the corpus's own keys, its data directory under [task] data_dir and its weight."""

    name: str
    settings: TranslationSettings
    data_dir: str
    weight: float

    def folder(self, data_dir: Path) -> Path:
        """The corpus's data directory: its own data_dir under the task's (an absolute one as it is)."""
        return Path(data_dir) / self.data_dir if self.data_dir else Path(data_dir)

    @property
    def direction(self) -> tuple[str, str]:
        return self.settings.src_lang, self.settings.tgt_lang


def check_corpora(settings: TranslationSettings) -> None:
    """[[task.corpus]], lang_tag, lang_tag_format and tgt_langs, refused in one line at the first mistake."""
    corpora = corpora_of(settings)
    targets = sorted({c.settings.tgt_lang for c in corpora})
    if len(targets) > 1 and settings.lang_tag == "none":
        raise UserError(f"[task] corpus: {len(targets)} target languages ({', '.join(targets)}) need a tag that "
                        "tells the model which to write: set [task] lang_tag = \"source\" or \"target\"")
    _check_format(settings.lang_tag_format)
    if settings.tgt_langs:
        _check_tgt_langs(settings, corpora)
    elif settings.lang_tag != "none" and not corpora:
        raise UserError(f"[task] lang_tag = \"{settings.lang_tag}\" tags a model of several language pairs: list "
                        "them as [[task.corpus]] tables (src_lang, tgt_lang), or set lang_tag = \"none\"")


def _check_format(fmt: str) -> None:
    """[task] lang_tag_format: one token naming its language once ({lang})."""
    rest = fmt.replace(PLACE, "", 1)
    if PLACE not in fmt or not rest or any(c.isspace() or c in "{}" for c in rest):
        raise UserError(f"[task] lang_tag_format = {fmt!r}: write the tag with {PLACE} once where the language code "
                        "goes, no spaces or other braces: \"<2{lang}>\" (the default) or \">>{lang}<<\" (Marian's)")


def _check_tgt_langs(settings: TranslationSettings, corpora: list[Corpus]) -> None:
    """[task] tgt_langs: the targets of a model that no corpus names (an imported one), chosen by a tag."""
    if corpora:
        raise UserError("[task] tgt_langs names the targets of a model without [[task.corpus]]; with corpora their "
                        "tgt_lang are the targets: remove tgt_langs")
    if settings.lang_tag == "none":
        raise UserError(f"[task] tgt_langs = {settings.tgt_langs!r} are chosen by a tag: set [task] lang_tag = "
                        "\"source\" or \"target\"")
    for lang in settings.tgt_langs:
        if not isinstance(lang, str) or not LANGUAGE.fullmatch(lang):
            raise UserError(f"[task] tgt_langs: {lang!r} is not a language code such as en, fra or zh_Hant (letters, "
                            "then _ or - parts)")
    if len(set(settings.tgt_langs)) != len(settings.tgt_langs):
        twice = next(lang for i, lang in enumerate(settings.tgt_langs) if lang in settings.tgt_langs[:i])
        raise UserError(f"[task] tgt_langs names {twice!r} twice; give each language once")


def corpora_of(settings: TranslationSettings) -> list[Corpus]:
    """The [[task.corpus]] tables as Corpus values (none for a one-pair recipe), checked."""
    found: list[Corpus] = []
    places: dict[tuple[str, str], int] = {}
    seen: dict[tuple[Any, ...], int] = {}
    for number, entry in enumerate(settings.corpus, start=1):
        where = f"[task] corpus[{number}]"
        values = _checked(entry, where)
        own = {key: values[key] for key in OWN_KEYS if key in values and key != "data_dir"}
        try:  # checked as the task's own keys are (choices, bounds, validate)
            corpus_settings = dataclasses.replace(settings, corpus=[], lang_tag="none", tgt_langs=[], **own)
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
        src, tgt = corpus_settings.src_lang, corpus_settings.tgt_lang
        for key, lang in (("src_lang", src), ("tgt_lang", tgt)):
            if not LANGUAGE.fullmatch(lang):
                raise UserError(f"{where} {key} = {lang!r}: write a language code such as en, de or zh_Hant "
                                "(letters, then _ or - parts): it names the files and the tag <2xx>")
        if src == tgt:
            raise UserError(f"{where}: src_lang and tgt_lang are both {src!r}; a corpus translates one language "
                            "into another")
        identity = (src, tgt, corpus_settings.dataset, values.get("data_dir", ""), corpus_settings.train_prefix)
        if identity in seen:
            raise UserError(f"{where} repeats [task] corpus[{seen[identity]}] (the same {src}-{tgt} data): give it "
                            "once, with a weight to draw it more often")
        seen[identity] = number
        places[(src, tgt)] = places.get((src, tgt), 0) + 1
        name = f"{src}-{tgt}" if places[(src, tgt)] == 1 else f"{src}-{tgt}.{places[(src, tgt)]}"
        found.append(Corpus(name, corpus_settings, str(values.get("data_dir", "")), float(values.get("weight", 1.0))))
    return found


def _checked(entry: Any, where: str) -> dict[str, Any]:
    """One [[task.corpus]] table: known keys with values of the right type."""
    if not isinstance(entry, dict):
        raise UserError(f"{where} = {entry!r}: each corpus is a table, [[task.corpus]] with src_lang = \"..\" and "
                        "tgt_lang = \"..\"")
    for key in entry:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UserError(f"{where}: unknown key {key!r}.{hint} A corpus may give {', '.join(KEYS)}")
    for key in ("src_lang", "tgt_lang"):
        if key not in entry:
            raise UserError(f"{where} has no {key}: each corpus names its language pair (src_lang, tgt_lang)")
    for key, value in entry.items():
        if key == "weight":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise UserError(f"{where} weight = {value!r}: use a number above 0 (1 = as the temperature draws it; "
                                "2 = twice as often)")
        elif not isinstance(value, str):
            raise UserError(f"{where} {key} = {value!r} must be a string")
    return dict(entry)
