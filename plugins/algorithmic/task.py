"""The algorithmic task: generated copy, reverse and addition data, scored by sequence and symbol accuracy."""

from __future__ import annotations

from pathlib import Path

from seqxduce.api import Example, Report, Task, UserError

from .generate import Generator, generate_split
from .metrics import count_accuracy
from .settings import AlgorithmicSettings


class AlgorithmicTask(Task):
    """Copy, reverse or add symbol sequences; the data is generated from the seed, nothing is downloaded."""

    def __init__(self, settings: AlgorithmicSettings):
        self.settings = settings
        self.generator = Generator(settings.kind, settings.symbols, settings.lsb_first, settings.operands)
        self._cache: dict[str, list[Example]] = {}

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        """The examples of one split, generated on first use (data_dir is not used)."""
        if split not in self.splits:
            raise UserError(f"algorithmic task has no split {split!r}; splits are {', '.join(self.splits)}")
        if split not in self._cache:
            low, high = self.settings.lengths(split)
            size = getattr(self.settings, f"{split}_size")
            low = max(low, self.generator.min_length)
            self._cache[split] = generate_split(self.generator, split, size, low, high, self.settings.seed)
        return self._cache[split]

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        """Sequence accuracy (primary) and symbol accuracy, comparing whitespace-separated symbols."""
        if len(hypotheses) != len(references):
            raise UserError(f"got {len(hypotheses)} hypotheses for {len(references)} references; "
                            "give one hypothesis per reference")
        counts = count_accuracy(hypotheses, references)
        text = "\n".join([
            f"sequence_accuracy = {counts.sequence_accuracy:.4f} "
            f"({counts.correct_sequences}/{counts.sequences} sequences exactly right)",
            f"char_accuracy     = {counts.char_accuracy:.4f} "
            f"({counts.correct_positions}/{counts.positions} positions; missing or extra symbols are wrong)",
        ])
        return Report(
            metrics={"sequence_accuracy": counts.sequence_accuracy, "char_accuracy": counts.char_accuracy},
            primary="sequence_accuracy",
            text=text,
            signature="symbols:whitespace|char_accuracy:positions/max(len_hyp,len_ref)",
        )
