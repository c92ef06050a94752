"""The translation task: parallel text in, BLEU/chrF out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from seqxduce.api import Directed, Direction, Example, Postprocessed, Report, Task, UserError, read_lines

from .corpora import Corpus, corpora_of, direction_name, tag
from .corpus import CleanRules, CorpusStats, load_parallel, stream_parallel
from .datasets import make_dataset
from .directions import directed, tagged, teacher_of
from .download import log
from .metrics import score_translations
from .settings import TranslationSettings


class TranslationTask(Task):
    """Translate src_lang to tgt_lang; the reference of an example is its raw target line."""

    splits = ("train", "valid", "test")
    group_name = "direction"  # a split of several directions is scored per direction (Example.group: en-de)

    def __init__(self, settings: TranslationSettings):
        self.settings = settings
        self.dataset = make_dataset(settings)
        self.stats: dict[str, CorpusStats] = {}
        # several corpora and language pairs ([[task.corpus]]; none: the one pair of src_lang, tgt_lang)
        self.corpora: list[Corpus] = corpora_of(settings)
        self.tasks = [TranslationTask(corpus.settings) for corpus in self.corpora]

    def corpus_weights(self) -> dict[str, float]:
        """Each [[task.corpus]]'s weight by its name (en-de, en-de.2, ...); none for one pair."""
        return {corpus.name: corpus.weight for corpus in self.corpora}

    def for_group(self, group: str) -> Task:
        """The one-direction task of a direction (en-de): its BLEU tokenizes as its target language asks."""
        for corpus, task in zip(self.corpora, self.tasks):
            if direction_name(corpus) == group:
                return task
        return self

    def reserved_symbols(self) -> tuple[str, ...]:
        """The tag of every language of the corpora (lang_tag), so that a tokenizer keeps each whole."""
        if self.settings.lang_tag == "none":
            return ()
        langs = sorted({lang for corpus in self.corpora for lang in corpus.direction} | set(self.settings.tgt_langs))
        return tuple(tag(lang, self.settings.lang_tag_format) for lang in langs)

    def _several(self, split: str, data_dir: Path) -> Iterator[Example]:
        """A split of several corpora: for training every corpus in turn, each example naming its corpus; for
        validation and test each direction once (its first corpus's), each example naming its direction as its
        group when there are several (scored per direction and as their mean). The target language's tag at the
        start of the source (lang_tag = "source") or of the target (a prefix decoding forces: "target");
        references stay untagged."""
        directions = set()
        several = len({corpus.direction for corpus in self.corpora}) > 1
        for corpus, task in zip(self.corpora, self.tasks):
            if split != "train" and corpus.direction in directions:
                continue
            directions.add(corpus.direction)
            for ex in task.stream(split, corpus.folder(data_dir)):
                yield tagged(self.settings.lang_tag, corpus.settings.tgt_lang,
                             Example(ex.source, ex.target, reference=ex.ref, more_references=ex.more_references,
                                     corpus=corpus.name if split == "train" else "",
                                     group=direction_name(corpus) if split != "train" and several else ""),
                             self.settings.lang_tag_format)
            self.stats[split] = task.stats[split]

    def prepare(self, data_dir: Path) -> None:
        """Download, unpack and extract whatever the data set (each corpus's) lacks under data_dir."""
        if self.corpora:
            for corpus, task in zip(self.corpora, self.tasks):
                task.prepare(corpus.folder(Path(data_dir)))
            return
        self.dataset.prepare(Path(data_dir))

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        """The split's pairs; training pairs are cleaned (empty, too long, length ratio), others kept whole."""
        if self.corpora:
            return list(self._several(split, Path(data_dir)))
        source, target = self._files(split, Path(data_dir))
        pairs, self.stats[split] = load_parallel(source, target, self._rules(split))
        self._check_read(split, source)
        more = self._more_references(split, Path(data_dir), len(pairs))
        return [Example(source=src, target=tgt, more_references=tuple(refs))
                for (src, tgt), refs in zip(pairs, more or [[] for _ in pairs])]

    def stream(self, split: str, data_dir: Path) -> Iterator[Example]:
        """The split's pairs as examples() gives them, read line by line (preparing millions of training pairs);
        the counts are logged when the files are read to their end."""
        if self.corpora:
            yield from self._several(split, Path(data_dir))
            return
        if split == "test" and self.settings.more_references:
            yield from self.examples(split, data_dir)  # a test set is small; its extra references are aligned
            return
        source, target = self._files(split, Path(data_dir))
        self.stats[split] = stats = CorpusStats(str(source), str(target))
        for src, tgt in stream_parallel(source, target, self._rules(split), stats):
            yield Example(source=src, target=tgt)
        self._check_read(split, source)
        log(stats.summary())

    def _files(self, split: str, data_dir: Path) -> tuple[Path, Path]:
        if split not in self.splits:
            raise UserError(f"unknown split {split!r}; the translation task has {', '.join(self.splits)}")
        self.prepare(data_dir)
        return self.dataset.files(split, data_dir)

    def _rules(self, split: str) -> CleanRules | None:
        if split != "train":
            return None
        return CleanRules(drop_empty=True, max_len=self.settings.max_len, max_ratio=self.settings.max_ratio)

    def _check_read(self, split: str, source: Path) -> None:
        if split == "train" and not self.stats[split].read:
            raise UserError(f"{source}: the training file is empty; put the training text there, or point [task] "
                            "data_dir and train_prefix at it")

    def _more_references(self, split: str, data_dir: Path, count: int) -> list[list[str]] | None:
        """[task] more_references of the test split: per example its further references (files dataset)."""
        names = self.settings.more_references if split == "test" else []
        if not names:
            return None
        streams = []
        for name in names:
            path = data_dir / name
            lines = read_lines(path)
            if len(lines) != count:
                raise UserError(f"{path}: {len(lines)} lines for {count} test sentences; [task] more_references "
                                "files hold one reference translation of every test line")
            streams.append(lines)
        return [list(refs) for refs in zip(*streams)]

    def score_references(self, hypotheses: list[str], references: list[list[str]],
                         sources: list[str] | None = None) -> Report:
        """sacreBLEU and chrF against several references at once (sacrebleu's multi-reference scoring)."""
        return score_translations(hypotheses, references[0], tgt_lang=self.settings.tgt_lang,
                                  tokenized_bleu=self.settings.tokenized_bleu,
                                  literature_bleu=self.settings.literature_bleu, more_references=references[1:])

    def data_files(self, split: str, data_dir: Path) -> list[Path] | None:
        """The split's source and target files: a prepared training set is known by them without reading them."""
        if self.corpora:
            return [path for corpus, task in zip(self.corpora, self.tasks)
                    for path in (task.data_files(split, corpus.folder(Path(data_dir))) or [])]
        self.prepare(data_dir)
        return list(self.dataset.files(split, Path(data_dir)))

    def directed(self, example: Example, direction: Direction) -> Directed:
        """The example for the language chosen where the model is used, tagged as training tagged its own."""
        return directed(self.settings, self.corpora, example, direction)

    def as_teacher_of(self, student: Task) -> str:
        """A distillation teacher reads the student's training sources as the student writes them: both tag the
        target language the same way (lang_tag), and every target language (and source language) of the student's
        corpora is one this teacher knows; refused in one line otherwise. A direction it was never trained on but
        whose languages it knows is distilled zero-shot, with a notice."""
        if not isinstance(student, TranslationTask):
            return ""
        return teacher_of(self.settings, self.corpora, student.settings, student.corpora)

    def postprocess(self, hypothesis: str, source: str) -> Postprocessed:
        """An output as the task writes it: without the language tag a forced target prefix starts it with."""
        if self.settings.lang_tag == "target":
            first, _, rest = hypothesis.partition(" ")
            if first in self.reserved_symbols():
                return Postprocessed(rest)
        return Postprocessed(hypothesis)

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        """sacreBLEU (primary) and chrF, plus tokenized BLEU when [task] tokenized_bleu = true and the Multi30k
        literature's BLEU when [task] literature_bleu = true."""
        return score_translations(hypotheses, references, tgt_lang=self.settings.tgt_lang,
                                  tokenized_bleu=self.settings.tokenized_bleu,
                                  literature_bleu=self.settings.literature_bleu)
