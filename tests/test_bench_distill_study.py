"""bench/distill_study.py end to end at the tiny recipe's size (no timing thresholds): the teacher, a distilled
student and a student without a teacher are trained and scored into one table, and the same command again trains
nothing more (each run starts as --auto-resume does)."""

from __future__ import annotations

import json
from pathlib import Path

from seqxduce.recipe import read_toml
from tests.bench_scripts import load_bench
from tests.tiny import TINY_RECIPE

DATA = TINY_RECIPE.parent / "data"


def recipes(folder: Path) -> tuple[Path, Path]:
    """The tiny recipe as a teacher, and a 2 + 1 student naming it ([distill] teacher), side by side."""
    text = TINY_RECIPE.read_text().replace("[task]\n", f'[task]\ndata_dir = "{DATA}"\n')
    teacher, student = folder / "teacher.toml", folder / "student.toml"
    teacher.write_text(text)
    student.write_text('[distill]\nteacher = "teacher.toml"\noriginal_ratio = 1.0\n\n'
                       + text.replace("[model]\n", "[model]\nencoder_layers = 2\ndecoder_layers = 1\n"))
    return teacher, student


def test_the_study_trains_and_scores_each_system_and_goes_on_where_it_stopped(tmp_path: Path, cache: Path) -> None:
    study = load_bench("distill_study.py")
    teacher, student = recipes(tmp_path)
    argv = ["--out", str(tmp_path / "study"), "--teacher-recipe", str(teacher), "--student-recipe", str(student),
            "--students", "recipe", "decoder2", "original", "--splits", "valid"]
    rows = study.main(argv)
    assert [r["system"] for r in rows] == ["teacher ensemble", "teacher member 1", "student recipe",
                                           "student decoder2", "student original"]
    saved = json.loads((tmp_path / "study" / "figures.json").read_text())
    assert saved == json.loads(json.dumps(rows))
    for row in rows:
        figures = row["figures"]["valid"]
        assert figures["primary"] in figures and 0.0 <= figures[figures["primary"]] <= 1.0, row
    table = (tmp_path / "study" / "table.md").read_text().splitlines()
    assert len(table) == 2 + len(rows) and table[2].startswith("| teacher ensemble |")
    saved_recipes = {r["system"]: read_toml(Path(r["run"]) / "recipe.toml") for r in rows}
    assert saved_recipes["student decoder2"]["model"]["decoder_layers"] == 2
    assert saved_recipes["student recipe"]["model"]["decoder_layers"] == 1
    assert Path(saved_recipes["student recipe"]["distill"]["targets"]).name.startswith("distilled-")
    assert saved_recipes["student original"]["distill"]["targets"] == ""  # no teacher: the original pairs alone
    # the same command again: every run is finished, so nothing trains and the figures are the same
    checkpoints = {p: p.stat().st_mtime_ns for p in (tmp_path / "study").rglob("step_*.pt")}
    again = study.main(argv)
    assert [r["figures"] for r in again] == [r["figures"] for r in rows]
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "study").rglob("step_*.pt")} == checkpoints
