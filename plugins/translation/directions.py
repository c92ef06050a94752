"""The language a user chooses where a model is used (`decode --tgt-lang`, a file's column, a request's
"tgt_lang"; seqxduce.api.Direction): checked against the directions the run was trained on, and written into the
example as training wrote its examples (tagged), so that decoding reads what the model learned
(docs/multilingual.md)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from seqxduce.api import Directed, Direction, Example, UserError

from .corpora import TAG_FORMAT, Corpus, tag

if TYPE_CHECKING:  # pragma: no cover
    from .settings import TranslationSettings


def tagged(lang_tag: str, tgt_lang: str, example: Example, fmt: str = TAG_FORMAT) -> Example:
    """The example with its target language's tag (spelt as fmt, [task] lang_tag_format) where lang_tag puts it:
    at the start of the source ("source"), or at the start of the target and of the prefix decoding forces
    ("target"); references stay untagged. The one convention of training's examples and of a language chosen at
    decode time."""
    label = tag(tgt_lang, fmt)
    if lang_tag == "source":
        return dataclasses.replace(example, source=f"{label} {example.source}")
    if lang_tag == "target":
        return dataclasses.replace(example, target=f"{label} {example.target}", prefix=_joined(label, example.prefix))
    return example


def directed(settings: TranslationSettings, corpora: list[Corpus], example: Example,
             direction: Direction) -> Directed:
    """The example for the target language (and the source language, where the user states it) chosen: a target
    the run never wrote is refused listing those it writes (its tag never trained as one), a source it never saw
    listing the languages it knows; a direction between known languages that it was never trained on (a source
    it saw only as a target: en→de and en→fr asked fr→de) decodes with a notice (zero-shot)."""
    target, source = direction.target, direction.source
    if settings.tgt_langs:
        return _listed(settings, example, target)
    trained = [c.direction for c in corpora] or [(settings.src_lang, settings.tgt_lang)]
    writes = sorted({tgt for _, tgt in trained})
    reads = sorted({src for src, _ in trained})
    if target not in writes:
        if not corpora:
            raise UserError(f"target language {target!r}: this run translates {_arrow(trained[0])} only (one "
                            f"language pair); choose {settings.tgt_lang} or leave the language out")
        seen = "saw it only as a source" if target in reads else "never saw it"
        raise UserError(f"target language {target!r}: the run {seen}; it writes {', '.join(writes)}")
    if source and source not in reads and source not in writes:  # a target's text was seen: it may translate
        known = ", ".join(sorted({*reads, *writes}))
        raise UserError(f"source language {source!r}: the run never saw it; it knows {known}")
    notice = ""
    if source and (source, target) not in trained:
        notice = (f"{_arrow((source, target))} was never trained (the run's directions: "
                  f"{', '.join(_arrow(d) for d in dict.fromkeys(trained))}): decoded zero-shot, of unknown quality")
    if not corpora or settings.lang_tag == "none":
        return Directed(example, notice)  # one target language: nothing to write
    return Directed(tagged(settings.lang_tag, target, example, settings.lang_tag_format), notice)


def _listed(settings: TranslationSettings, example: Example, target: str) -> Directed:
    """A model whose targets [task] tgt_langs lists (an imported multilingual Marian model, its >>xx<< tokens):
    one of them tagged, another refused listing them. Its source languages are not known (a Marian folder does
    not say them), so a stated source is taken as it is, and no direction is called zero-shot."""
    if target not in settings.tgt_langs:
        label = tag(target, settings.lang_tag_format)
        raise UserError(f"target language {target!r}: the model has no tag {label}; it writes "
                        f"{', '.join(sorted(settings.tgt_langs))}")
    return Directed(tagged(settings.lang_tag, target, example, settings.lang_tag_format), "")


def _arrow(direction: tuple[str, str]) -> str:
    return f"{direction[0]}→{direction[1]}"


def _joined(label: str, prefix: str) -> str:
    return f"{label} {prefix}" if prefix else label


TAGGING = {"source": 'writes the target language as a tag at the start of the source (lang_tag = "source")',
           "target": 'forces the target language\'s tag as the first target token (lang_tag = "target")',
           "none": 'writes no language tag (lang_tag = "none")'}


def teacher_of(settings: TranslationSettings, corpora: list[Corpus], student: TranslationSettings,
               student_corpora: list[Corpus]) -> str:
    """Whether a teacher of these settings reads the student's training sources as the student writes them (a
    distillation decodes each as it stands, with its forced prefix): the same lang_tag, and each direction of the
    student's corpora one whose languages the teacher knows (as `decode --tgt-lang T --src-lang S` checks them).
    Refused in one line otherwise; a direction never trained, of known languages, gives a notice (zero-shot)."""
    mine, theirs = settings.lang_tag, student.lang_tag
    if mine != theirs:
        fix = f'[task] lang_tag = "{mine}"' + (" with its pairs as [[task.corpus]] tables"
                                               if mine != "none" and not student_corpora else "")
        raise UserError(f"distill: the teacher {TAGGING[mine]} but the student {TAGGING[theirs]}, so the teacher "
                        f"cannot tell which language to write for the student's sources; give the student {fix}, "
                        "or distill from a teacher tagged as the student is")
    if mine == "none":
        return ""  # one target language on both sides: each source decoded as it stands, as for one pair
    notices = []
    for src, tgt in dict.fromkeys(corpus.direction for corpus in student_corpora):
        try:
            found = directed(settings, corpora, Example("", ""), Direction(tgt, src))
        except UserError as err:
            raise UserError(f"distill: the student's {src}-{tgt} pairs: {err}; distill only the directions the "
                            "teacher writes") from None
        if found.notice:
            notices.append(found.notice)
    return "; ".join(notices)
