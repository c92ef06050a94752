"""The `ptb` task: Penn Treebank trees as linearized sequences, scored with EVALB's COLLINS.prm rules."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from seqxduce.api import Example, Postprocessed, Report, Task, UserError

from . import evalb
from .evalb_read import ReadLine, file_lines
from .evalb_report import LEAVES_REASON, SETTING_REASON, UNKNOWN, build_report
from .linearize import PLACEHOLDER, check_word_mode, delinearize, linearize
from .preprocess import EMPTY_ELEMENT, drop_empty_root, expand_unary_chains, flat, is_preterminal, preprocess
from .settings import PtbSettings
from .treebank import download_sample, has_treebank, read_split

PLACEHOLDER_TAGS = frozenset({PLACEHOLDER.encode(), UNKNOWN.encode()})


class PtbTask(Task):
    """Parse a sentence (words separated by spaces) into a tree; examples come from .mrg files."""

    splits = ("train", "valid", "test")

    def __init__(self, settings: PtbSettings | None = None):
        self.settings = settings or PtbSettings()
        try:
            check_word_mode(self.settings.words_in_target, self.settings.keep_pos_tags)
        except ValueError as err:
            raise UserError(f"[task] {err}") from None

    # ------------------------------------------------------------ data

    def prepare(self, data_dir: Path) -> None:
        """Fetch the NLTK sample when data_dir holds no treebank; the LDC treebank cannot be downloaded."""
        if has_treebank(data_dir):
            return
        if self.settings.layout == "ldc":
            raise UserError(f"[task] data_dir {data_dir}: no treebank there; the WSJ treebank is licensed by "
                            "the LDC (LDC99T42): copy its parsed/mrg/wsj folder there")
        download_sample(data_dir)

    def split_ranges(self, split: str) -> tuple[str, str]:
        """(recipe key, file ranges) of a split."""
        if split not in self.splits:
            raise UserError(f"split {split!r}: the ptb task has splits {', '.join(self.splits)}")
        key = f"{split}_files"
        ranges = getattr(self.settings, key)
        if not ranges.strip():
            raise UserError(f"[task] {key} is empty: set it to a file range, e.g. '2300-2399' for WSJ section 23")
        return key, ranges

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        """One example per tree: source = its words, target = its linearization, reference = the gold tree."""
        key, ranges = self.split_ranges(split)
        out = []
        for tree in read_split(Path(data_dir), ranges, self.settings.layout, key):
            gold = drop_empty_root(tree)
            if all(node.label() == EMPTY_ELEMENT for node in gold.subtrees(is_preterminal)):
                continue  # nothing to parse
            processed = preprocess(gold, collapse_unary=self.settings.collapse_unary)
            out.append(Example(source=" ".join(processed.leaves()),
                               target=linearize(processed, keep_pos_tags=self.settings.keep_pos_tags,
                                                 words_in_target=self.settings.words_in_target),
                               reference=flat(gold)))
        return out

    # ------------------------------------------------------------ outputs

    def postprocess(self, hypothesis: str, source: str) -> Postprocessed:
        """The decoded sequence as a one-line tree with the source words at its leaves (repaired if needed), and
        the number of repairs it needed."""
        result = delinearize(hypothesis, source.split(), self.settings.words_in_target)
        tree = expand_unary_chains(result.tree) if self.settings.collapse_unary else result.tree
        return Postprocessed(flat(tree), {"repairs": result.repairs})

    def training_target(self, hypothesis: str, source: str) -> str:
        """The decoded sequence as examples() writes a target: its tree (repaired if needed) linearized again, so
        that the source's words stand where the target vocabulary has only their classes (<unk-Cap-s>)."""
        tree = delinearize(hypothesis, source.split(), self.settings.words_in_target).tree
        return linearize(tree, keep_pos_tags=self.settings.keep_pos_tags,
                         words_in_target=self.settings.words_in_target)

    def score_outputs(self, outputs: Sequence[Postprocessed], references: list[str],
                      sources: list[str] | None = None) -> Report:
        """EVALB figures of postprocessed trees against gold trees, plus the repairs postprocess made."""
        report = self.score([o.text for o in outputs], references, sources)
        if outputs:
            repairs = [int(o.figures.get("repairs", 0)) for o in outputs]
            repaired = sum(n > 0 for n in repairs)
            report.metrics.update(repaired=repaired, repairs=sum(repairs))
            report.text += (f"\nRepaired outputs: {repaired} of {len(outputs)} decoded sequences were not "
                            f"well-formed trees and were repaired ({sum(repairs)} repairs).\n")
        return report

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        """EVALB figures of trees against gold trees."""
        if len(hypotheses) != len(references):
            raise UserError(f"{len(hypotheses)} outputs for {len(references)} references: score one output per "
                            "reference (was a batch dropped or decoded twice?)")
        # the setting, not the leaves, decides: an unknown-word leaf (<unk>) must not switch re-attachment off
        tagless = not self.settings.keep_pos_tags
        ev = evalb.score_lines(as_lines(references), as_lines(hypotheses), retag=always if tagless else None)
        return build_report(ev, SETTING_REASON)

    def score_files(self, hypothesis_file: Path, reference_file: Path) -> Report:
        """Score a file of test trees against a file of gold trees, read as EVALB reads them (bytes, line by line;
        the gold tags go on each test tree whose tags are all placeholders)."""
        gold = file_lines(read_bytes(Path(reference_file)))
        ev = evalb.score_lines(gold, file_lines(read_bytes(Path(hypothesis_file))), retag=has_placeholder_tags)
        return build_report(ev, LEAVES_REASON)


def always(_: ReadLine) -> bool:
    return True


def has_placeholder_tags(line: ReadLine) -> bool:
    """Whether every word of a test line is tagged XX (or <unk>): a tag-less linearization's output."""
    return all(t.tag in PLACEHOLDER_TAGS for t in line.terminals)


def as_lines(texts: list[str]) -> list[bytes]:
    """Trees held in memory as the lines of a file EVALB would read."""
    return [t.encode("utf-8") + b"\n" for t in texts]


def read_bytes(path: Path) -> bytes:
    """A file's bytes (EVALB reads bytes: no encoding is required), or one line saying why not."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        return path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read it ({err.strerror})") from None
