"""`seqxduce evaluate HYP REF1 REF2 ...` scores BLEU and chrF against several references as sacreBLEU does; a task
without several references refuses more than one in one line."""

from __future__ import annotations

from pathlib import Path

import sacrebleu
from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands

HYPOTHESES = ["the cat sat on the mat", "a dog ran", "birds sing in the old tree"]
FIRST = ["the cat sat on a mat", "a dog ran away", "birds are singing in the old tree"]
SECOND = ["a cat sat on the mat", "the dog ran", "the birds sing in an old tree"]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_evaluate_scores_several_references_as_sacrebleu(tmp_path: Path) -> None:
    hyp = _write(tmp_path / "hyp", HYPOTHESES)
    refs = [_write(tmp_path / "ref1", FIRST), _write(tmp_path / "ref2", SECOND)]
    result = CliRunner().invoke(add_plugin_commands(), ["evaluate", str(hyp), *map(str, refs), "--task",
                                                        "translation"])
    assert result.exit_code == 0, result.output
    bleu = sacrebleu.corpus_bleu(HYPOTHESES, [FIRST, SECOND])
    chrf = sacrebleu.corpus_chrf(HYPOTHESES, [FIRST, SECOND])
    assert "BLEU|nrefs:2|" in result.output and f"= {bleu.score:.2f}" in result.output
    assert "chrF2|nrefs:2|" in result.output and f"= {chrf.score:.2f}" in result.output
    one = CliRunner().invoke(add_plugin_commands(), ["evaluate", str(hyp), str(refs[0]), "--task", "translation"])
    assert f"= {sacrebleu.corpus_bleu(HYPOTHESES, [FIRST]).score:.2f}" in one.output


def test_unequal_files_and_single_reference_tasks_are_refused(tmp_path: Path) -> None:
    hyp = _write(tmp_path / "hyp", HYPOTHESES)
    short = _write(tmp_path / "short", FIRST[:2])
    result = CliRunner().invoke(add_plugin_commands(), ["evaluate", str(hyp), str(hyp), str(short), "--task",
                                                        "translation"])
    assert result.exit_code == 1 and "short has 2" in result.output
    result = CliRunner().invoke(add_plugin_commands(), ["evaluate", str(hyp), str(hyp), str(hyp), "--task",
                                                        "algorithmic"])
    assert result.exit_code == 1 and "one reference" in result.output
