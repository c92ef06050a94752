"""Sequence and per-symbol accuracy, the two figures the Universal Transformer paper reports.

Both compare whitespace-separated symbols. Character (symbol) accuracy follows tensor2tensor's
`padded_accuracy`: the shorter sequence is padded and positions are compared one by one, summed over
the whole corpus. tensor2tensor weighs only reference positions because it scores teacher-forced
outputs, which always have the reference's length; decoded outputs do not, so here every position of
the longer of the two counts, and a missing or an extra symbol is an error:

    char_accuracy = sum_i matches(h_i, r_i) / sum_i max(|h_i|, |r_i|)

where matches counts positions j < min(|h_i|, |r_i|) with h_i[j] == r_i[j].
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AccuracyCounts:
    """Corpus counts behind both accuracies."""

    sequences: int = 0
    correct_sequences: int = 0
    positions: int = 0
    correct_positions: int = 0

    def add(self, hypothesis: str, reference: str) -> None:
        """Count one hypothesis against its reference."""
        hyp, ref = hypothesis.split(), reference.split()
        self.sequences += 1
        self.correct_sequences += hyp == ref
        self.positions += max(len(hyp), len(ref))
        self.correct_positions += sum(h == r for h, r in zip(hyp, ref))

    @property
    def sequence_accuracy(self) -> float:
        return self.correct_sequences / self.sequences if self.sequences else 0.0

    @property
    def char_accuracy(self) -> float:
        # two empty sequences are equal: a corpus of them is fully correct
        if self.positions == 0:
            return 1.0 if self.sequences else 0.0
        return self.correct_positions / self.positions


def count_accuracy(hypotheses: list[str], references: list[str]) -> AccuracyCounts:
    """Accuracy counts of a corpus of hypotheses against their references (same order)."""
    counts = AccuracyCounts()
    for hypothesis, reference in zip(hypotheses, references):
        counts.add(hypothesis, reference)
    return counts
