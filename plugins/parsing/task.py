"""The `ptb` task: Penn Treebank trees as linearized sequences, scored with EVALB's COLLINS.prm rules."""

from __future__ import annotations

from pathlib import Path

from nltk.tree import Tree

from seqxduce.api import Example, Report, Task, UserError, read_lines

from . import evalb
from .linearize import PLACEHOLDER, check_word_mode, delinearize, linearize
from .preprocess import drop_empty_root, expand_unary_chains, flat, is_preterminal, preprocess
from .settings import PtbSettings
from .treebank import download_sample, has_treebank, read_split

UNKNOWN = "<unk>"  # how the word tokenizer writes an unknown id, so it can stand at a placeholder's place
PLACEHOLDER_TAGS = frozenset({PLACEHOLDER, UNKNOWN})
PLACEHOLDER_NOTE = ("the gold POS tags were re-attached to their leaves before scoring (standard practice; benepar "
                    "does the same): punctuation is found by the gold tags and the tagging accuracy above is not a "
                    "measure of the parser.")
SETTING_REASON = "were written with the placeholder XX instead of POS tags (keep_pos_tags = false)"
LEAVES_REASON = f"carry only the placeholder tag {PLACEHOLDER} (or {UNKNOWN}) instead of POS tags"
PUNCTUATION_NOTE = ("Note: {count} sentence(s) whose test tags disagree with the gold tags on which words are "
                    "punctuation were scored with punctuation deleted by the gold tags; the original EVALB, which "
                    "deletes it by each tree's own tags, would count them as error sentences (length or words "
                    "unmatch).")


class PtbTask(Task):
    """Parse a sentence (words separated by spaces) into a tree; examples come from .mrg files."""

    splits = ("train", "valid", "test")

    def __init__(self, settings: PtbSettings | None = None):
        self.settings = settings or PtbSettings()
        try:
            check_word_mode(self.settings.words_in_target, self.settings.keep_pos_tags)
        except ValueError as err:
            raise UserError(f"[task] {err}") from None
        self._reset_repairs()

    def _reset_repairs(self) -> None:
        self.postprocessed = 0  # outputs delinearized since the last score()
        self.repaired = 0  # of which needed at least one repair
        self.repairs = 0  # repairs made in all

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
            if all(t == evalb.EMPTY_TAG for _, t in evalb.terminals(gold)):
                continue  # nothing to parse
            processed = preprocess(gold, collapse_unary=self.settings.collapse_unary)
            out.append(Example(source=" ".join(processed.leaves()),
                               target=linearize(processed, keep_pos_tags=self.settings.keep_pos_tags,
                                                 words_in_target=self.settings.words_in_target),
                               reference=flat(gold)))
        return out

    # ------------------------------------------------------------ outputs

    def postprocess(self, hypothesis: str, source: str) -> str:
        """The decoded sequence as a one-line tree with the source words at its leaves (repaired if needed)."""
        result = delinearize(hypothesis, source.split(), self.settings.words_in_target)
        tree = expand_unary_chains(result.tree) if self.settings.collapse_unary else result.tree
        self.postprocessed += 1
        self.repaired += int(result.repairs > 0)
        self.repairs += result.repairs
        return flat(tree)

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        """EVALB figures of postprocessed trees against gold trees, plus the repairs made since the last call."""
        if len(hypotheses) != len(references):
            raise UserError(f"{len(hypotheses)} outputs for {len(references)} references: score one output per "
                            "reference (was a batch dropped or decoded twice?)")
        golds = []
        for i, ref in enumerate(references, start=1):
            try:
                golds.append(evalb.parse_tree(ref))
            except ValueError as err:
                raise UserError(f"reference {i}: not a bracketed tree ({err})") from None
        # the setting, not the leaves, decides: an unknown-word leaf (<unk>) must not switch re-attachment off
        report = score_trees(golds, hypotheses, reattach=not self.settings.keep_pos_tags)
        if self.postprocessed:
            report.metrics.update(repaired=self.repaired, repairs=self.repairs)
            report.text += (f"\nRepaired outputs: {self.repaired} of {self.postprocessed} decoded sequences were not "
                            f"well-formed trees and were repaired ({self.repairs} repairs).\n")
        self._reset_repairs()
        return report

    def score_files(self, hypothesis_file: Path, reference_file: Path) -> Report:
        """Score a file of test trees against a file of gold trees, one bracketed tree per line (as EVALB)."""
        hyps = read_lines(hypothesis_file)
        refs = read_lines(reference_file)
        if len(hyps) != len(refs):
            raise UserError(f"{hypothesis_file} has {len(hyps)} lines but {reference_file} has {len(refs)}: "
                            "give one tree per gold tree")
        golds = []
        for line_no, ref in enumerate(refs, start=1):
            try:
                golds.append(evalb.parse_tree(ref))
            except ValueError as err:
                raise UserError(f"{reference_file}:{line_no}: not a bracketed tree ({err}); "
                                "write one gold tree per line") from None
        return score_trees(golds, hyps, reattach=None)


def has_placeholder_tags(tree: Tree) -> bool:
    """Whether every leaf of a test tree is tagged XX (or <unk>): a tag-less linearization's output."""
    return all(node.label() in PLACEHOLDER_TAGS for node in tree.subtrees(is_preterminal))


def score_trees(golds: list[Tree], test_lines: list[str], reattach: bool | None = None) -> Report:
    """EVALB over gold trees and test lines, with the gold POS tags re-attached to every test tree (reattach
    True), to none (False), or to each tree whose leaves are all placeholders (None: files of unknown origin)."""
    tests: list[Tree | str | None] = []
    for line in test_lines:
        if not line.strip():
            tests.append(None)
            continue
        try:
            tests.append(evalb.parse_tree(line))
        except ValueError as err:
            tests.append(str(err))
    scores = []
    reattached = 0
    for gold, test in zip(golds, tests, strict=True):
        if isinstance(test, str):
            length = sum(t != evalb.EMPTY_TAG for _, t in evalb.terminals(gold))
            scores.append(evalb.SentenceScore(length, status=evalb.ERROR, error=f"Reading sentence ({test})"))
            continue
        if test is not None and (has_placeholder_tags(test) if reattach is None else reattach):
            test = evalb.reattach_gold_tags(test, gold)
            reattached += 1
        scores.append(evalb.score_sentence(gold, test))
    parsed = sum(isinstance(t, Tree) for t in tests)
    return build_report(scores, reattached, parsed, SETTING_REASON if reattach else LEAVES_REASON)


def build_report(scores: list[evalb.SentenceScore], reattached: int, parsed: int, reason: str) -> Report:
    """The EVALB text with the error list and notes appended, and the metrics to log."""
    text = evalb.format_report(scores)
    errors = [f"{i} : {s.error}" for i, s in enumerate(scores, start=1) if s.status == evalb.ERROR]
    if errors:
        text += "\nError sentences (left out of the totals):\n" + "\n".join(errors) + "\n"
    mismatched = sum(s.punctuation_mismatch for s in scores)
    if mismatched:
        text += "\n" + PUNCTUATION_NOTE.format(count=mismatched) + "\n"
    if reattached:
        text += f"\nNote: {reattached} of {parsed} test trees {reason}, so {PLACEHOLDER_NOTE}\n"
    metrics = evalb.metrics(scores)
    # the share of readable test trees scored with gold tags: 1.0 for a tag-less model, 0.0 for predicted tags
    metrics["gold_tags_reattached"] = reattached / parsed if parsed else 0.0
    return Report(metrics=metrics, primary="f1", text=text,
                  signature="EVALB COLLINS.prm (seqxduce_parsing.evalb)"
                            + (", gold POS tags re-attached" if reattached else ""))
