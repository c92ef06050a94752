"""The run directory module and the core's import graph: the trainer keeps the caller's recipe as it was, the
saved recipe names the same data from the run directory, and no core module imports itself back."""

from __future__ import annotations

import ast
from pathlib import Path

from seqxduce import engine
from seqxduce.recipe import load_recipe
from seqxduce.rundir import RunDir

RECIPE = Path(__file__).resolve().parent / "fixtures" / "tiny.toml"
CORE = Path(__file__).resolve().parents[1] / "seqxduce"


def test_training_keeps_the_callers_recipe_and_saves_one_resolved_against_the_run_directory(tmp_path):
    recipe = load_recipe(RECIPE, ["train.max_steps=1", "train.validate_every=0", "train.valid_decode_examples=0"])
    before = (recipe.base_dir, recipe.task.core.data_dir)
    engine.train(recipe, tmp_path / "run")
    assert (recipe.base_dir, recipe.task.core.data_dir) == before
    saved = RunDir(tmp_path / "run").load_recipe()
    assert saved.base_dir == (tmp_path / "run").resolve()
    assert saved.path(saved.task.core.data_dir) == recipe.path(recipe.task.core.data_dir)


def _core_imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in CORE.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seqxduce."):
                found.add(node.module.split(".")[1])
            elif isinstance(node, ast.ImportFrom) and node.module == "seqxduce":
                found |= {a.name for a in node.names if (CORE / f"{a.name}.py").is_file()}
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("seqxduce.")}
        graph[path.stem] = found - {path.stem}
    return graph


def test_the_core_has_no_import_cycle():
    graph = _core_imports()
    assert "rundir" in graph["trainer"] and "device" in graph["decoding"]  # the graph is read, not empty
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join((*path, module))
        if module in done:
            return
        for other in graph.get(module, ()):
            visit(other, (*path, module))
        done.add(module)

    for module in graph:
        visit(module, ())


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
