"""The distillation study of issue #60 in one command: the teacher, its students, and every system's val and test
figures in one Markdown table, on the device the runs are given (a lent GPU: --device cuda).

    python bench/distill_study.py --out /work/runs/study --device cuda          # the whole study, on a GPU
    python bench/distill_study.py --out /work/runs/study --students recipe original
    python bench/distill_study.py --out DIR --teacher-recipe T.toml --student-recipe S.toml --set train.max_steps=4

Runs go under --out: `teacher/` (the teacher recipe, its members), `students/NAME/` (one per student). Each starts
as `--auto-resume` does: a finished run is left as it is, a stopped one continues (bit-exact), so the same command
goes on after a stop or a device's time limit. After each system is scored, `table.md` and `figures.json` in --out
are written again, so what was measured survives a stop. Order: the teacher, then the students in --students
order, each scored as soon as it is trained.

Students (each the student recipe with these settings):
- recipe: the committed student as it is (recipes/multi30k_en_de_student.toml: 6 + 1, distilled + original pairs);
- word_kd: with word-level distillation beside, `distill.word_kd=0.5` (Kim & Rush 2016);
- member_outputs: with each member's own outputs beside the ensemble's, `distill.member_outputs=true` (data
  diversification, Nguyen et al. 2020);
- decoder2: a second decoder layer, `model.decoder_layers=2` (bench/log/2026-12-04-student-shapes-speed.md: about
  1.3-1.4x a member's speed expected);
- original: the student's model on the original pairs alone, no teacher (`seqxduce train`): what distillation
  adds to the same model.

Systems scored on --splits with each run's own search: the teacher's ensemble, its first member alone
(`train.members=1`), each student. The figures are the task's report (for translation: sacreBLEU cased,
lowercased, tokenized as the literature, chrF, BP). Tune on valid only. Decoding speed is bench/distill_speed.py's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from seqxduce import engine
from seqxduce.run_start import RunStart

ROOT = Path(__file__).resolve().parent.parent
STUDENTS = {
    "recipe": (),
    "word_kd": ("distill.word_kd=0.5",),
    "member_outputs": ("distill.member_outputs=true",),
    "decoder2": ("model.decoder_layers=2",),
    "original": ('distill.teacher=""', "distill.original_ratio=0.0"),
}
TRAINED_ALONE = {"original"}  # trained with `train`, no teacher


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="the study's folder (runs, table.md, figures.json)")
    parser.add_argument("--teacher-recipe", type=Path, default=ROOT / "recipes" / "multi30k_en_de.toml")
    parser.add_argument("--student-recipe", type=Path, default=ROOT / "recipes" / "multi30k_en_de_student.toml")
    parser.add_argument("--students", nargs="+", default=list(STUDENTS), choices=list(STUDENTS),
                        help="which students, in this order")
    parser.add_argument("--splits", nargs="+", default=["valid", "test"], help="the splits every system decodes")
    parser.add_argument("--device", default="", help="[train] device of every run and decode (e.g. cuda); "
                                                     "empty = the recipes' own")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe setting for the teacher and every student (repeatable)")
    return parser.parse_args(argv)


def device(args: argparse.Namespace) -> list[str]:
    """The device setting every run and decode takes (none: the recipes' own)."""
    return [f"train.device={args.device}"] if args.device else []


def common(args: argparse.Namespace) -> list[str]:
    """The settings every run takes: --set's, and the device."""
    return [*args.overrides, *device(args)]


def train_teacher(args: argparse.Namespace) -> tuple[Path, float]:
    out = args.out / "teacher"
    began = time.monotonic()
    engine.train(args.teacher_recipe, out, RunStart(mode="auto"), overrides=common(args))
    return out, time.monotonic() - began


def train_student(args: argparse.Namespace, name: str, teacher: Path) -> tuple[Path, float]:
    out = args.out / "students" / name
    overrides = [*common(args), *STUDENTS[name]]
    began = time.monotonic()
    if name in TRAINED_ALONE:
        engine.train(args.student_recipe, out, RunStart(mode="auto"), overrides=overrides)
    else:
        engine.distill(teacher, args.student_recipe, out, RunStart(mode="auto"), overrides=overrides)
    return out, time.monotonic() - began


def score(run: Path, splits: list[str], overrides: list[str]) -> dict[str, dict[str, float]]:
    """The task's report of each split, decoded by the run with its own search."""
    figures = {}
    for split in splits:
        _, report = engine.decode_split(run, split, overrides)
        figures[split] = {"primary": report.primary, **{k: round(v, 4) for k, v in report.metrics.items()}}
    return figures


def table(rows: list[dict]) -> str:
    """One Markdown row per system: its wall time to train and every figure of each split."""
    keys = sorted({(split, k) for row in rows for split, got in row["figures"].items() for k in got
                   if k != "primary"})
    head = ["system", "minutes training (this call)", *(f"{split} {k}" for split, k in keys)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["system"], f"{row['train_s'] / 60:.1f}" if row["train_s"] is not None else "-"]
        cells += [str(row["figures"].get(split, {}).get(k, "-")) for split, k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(args: argparse.Namespace, rows: list[dict]) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "figures.json").write_text(json.dumps(rows, indent=1) + "\n")
    text = table(rows)
    (args.out / "table.md").write_text(text)
    print(text, flush=True)


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    rows: list[dict] = []
    teacher, seconds = train_teacher(args)
    decode_with = device(args)
    rows.append({"system": "teacher ensemble", "run": str(teacher), "train_s": seconds,
                 "figures": score(teacher, args.splits, decode_with)})
    write(args, rows)
    rows.append({"system": "teacher member 1", "run": str(teacher), "train_s": None,
                 "figures": score(teacher, args.splits, [*decode_with, "train.members=1"])})
    write(args, rows)
    for name in args.students:
        student, seconds = train_student(args, name, teacher)
        rows.append({"system": f"student {name}", "run": str(student), "train_s": seconds,
                     "figures": score(student, args.splits, decode_with)})
        write(args, rows)
    return rows


if __name__ == "__main__":
    main()
