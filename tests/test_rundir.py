"""The run directory module: the trainer keeps the caller's recipe as it was, the saved recipe names the same data
from the run directory, and a probe another process removes first is passed over."""

from __future__ import annotations

from pathlib import Path

from seqxduce import engine
from seqxduce.recipe import load_recipe
from seqxduce.rundir import RunDir
from tests.tiny import TINY_RECIPE as RECIPE


def test_training_keeps_the_callers_recipe_and_saves_one_resolved_against_the_run_directory(tmp_path):
    recipe = load_recipe(RECIPE, ["train.max_steps=1", "train.validate_every=0", "train.valid_decode_examples=0"])
    before = (recipe.base_dir, recipe.task.core.data_dir)
    engine.train(recipe, tmp_path / "run")
    assert (recipe.base_dir, recipe.task.core.data_dir) == before
    saved = RunDir(tmp_path / "run").load_recipe()
    assert saved.base_dir == (tmp_path / "run").resolve()
    assert saved.path(saved.task.core.data_dir) == recipe.path(recipe.task.core.data_dir)


def test_opening_copes_with_a_temporary_file_that_another_process_removes_first(tmp_path, monkeypatch):
    """Under torchrun, rank 1's write check creates and removes its probe while rank 0 opens the run directory:
    rank 0 may list the probe as left over and find it gone when it removes it (CI saw a FileNotFoundError)."""
    from seqxduce import rundir as rundir_module

    run = RunDir(tmp_path / "run")
    run.checkpoint_dir.mkdir(parents=True)
    probe = run.path / ".write-check-0123abcd"
    left = run.checkpoint_dir / ".step_00000010.pt.abc123.tmp"
    probe.touch()
    left.touch()
    listed = rundir_module._is_orphan

    def listed_then_gone(path: Path) -> bool:
        if path == probe and path.exists():
            path.unlink()  # the other rank's own clean-up, between the listing and the removal
            return True
        return listed(path)

    monkeypatch.setattr(rundir_module, "_is_orphan", listed_then_gone)
    said = run.open()
    assert not left.exists() and not probe.exists()
    assert len(said) == 1 and ".step_00000010.pt.abc123.tmp" in said[0] and "write-check" not in said[0], said


def test_opening_removes_what_every_kind_of_cut_off_save_leaves_and_keeps_the_runs_files(tmp_path):
    """The orphan pattern is built from the run's file names: a crashed best.pt write is as much an orphan as a
    crashed step checkpoint's (the hand-written pattern of before left .best.pt.*.tmp behind)."""
    from seqxduce.atomic import temporary_name

    run = RunDir(tmp_path / "run")
    run.checkpoint_dir.mkdir(parents=True)
    kept = [run.best_file, run.average_file, run.recipe_file, run.metrics_file, run.step_path(4)]
    cut_off = [temporary_name(path) for path in kept]
    for path in (*kept, *cut_off, run.path / ".tokenizer-work-abc", run.path / ".write-check-0123abcd"):
        path.touch()
    said = run.open()
    assert said and "left by a save that was cut off" in said[0]
    assert sorted(p.name for p in run.path.rglob("*") if p.is_file()) == sorted(p.name for p in kept)
