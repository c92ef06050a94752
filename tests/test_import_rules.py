"""The architecture's import rules, read from the source: the core imports no plugin, a plugin imports only the
core's public modules and its own (relatively, so that it can be lifted into its own package), and the core's
modules import each other without a cycle at module level."""

from __future__ import annotations

import ast
from pathlib import Path

import seqxduce

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"seqxduce", "seqxduce.api", "seqxduce.search", "seqxduce.search_settings", "seqxduce.atomic",
          "seqxduce.inspection.interactive"}
PACKAGE = {f"seqxduce.{name}" for name in seqxduce.__all__}  # from seqxduce import hookimpl, Task, ...


def imports(path: Path, top_level_only: bool = False) -> list[tuple[str, int]]:
    """(module named, relative level) of every import in a file (only the module-level ones if asked)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
            if node.module == "seqxduce" and not node.level:  # from seqxduce import checkpoint: a module, maybe
                found += [(f"seqxduce.{alias.name}", 0) for alias in node.names]
    return found


def core_modules() -> dict[str, Path]:
    """Every module of the core by its dotted name under seqxduce (`inspection.curves`), packages' own included."""
    found = {}
    for path in (ROOT / "seqxduce").rglob("*.py"):
        parts = path.relative_to(ROOT / "seqxduce").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = path
    return found


def test_the_core_imports_no_plugin():
    for path in (ROOT / "seqxduce").rglob("*.py"):
        named = [name for name, level in imports(path) if level == 0 and name.startswith("seqxduce_")]
        assert not named, f"{path.name} imports {named}"


def test_a_plugin_imports_its_own_modules_relatively_and_of_the_core_only_the_public_api():
    for plugin in sorted(p for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").is_file()):
        for path in plugin.glob("*.py"):
            for name, level in imports(path):
                where = f"plugins/{plugin.name}/{path.name} imports {name}"
                assert level == 0 or level == 1, where
                assert not name.startswith("seqxduce_"), f"{where}: use a relative import, never another plugin"
                if level == 0 and name.startswith("seqxduce."):
                    assert name in PUBLIC or name in PACKAGE, f"{where}, which is not public API (CONTRIBUTING.md)"


def test_the_core_has_no_import_cycle_at_module_level():
    core = core_modules()
    graph = {stem: {name.removeprefix("seqxduce.") for name, level in imports(path, top_level_only=True)
                    if level == 0 and name.removeprefix("seqxduce.") in core}
             for stem, path in core.items()}
    done: set[str] = set()

    def visit(module: str, stack: list[str]) -> None:
        assert module not in stack, "import cycle: " + " -> ".join([*stack[stack.index(module):], module])
        if module in done:
            return
        for imported in graph[module]:
            visit(imported, [*stack, module])
        done.add(module)

    for module in graph:
        visit(module, [])


def test_a_plugins_tests_beside_it_import_nothing_from_the_cores_tests():
    # a plugin lifted into its own repository takes plugins/X/tests/ along; tests/ stays behind, so what they
    # share lives in the core's seqxduce.testing
    moved = sorted((ROOT / "plugins").glob("*/tests/*.py"))
    assert moved, "no plugin tests found under plugins/*/tests/"
    for path in moved:
        named = [name for name, level in imports(path) if level == 0 and (name == "tests" or name.startswith("tests."))]
        assert not named, f"{path.relative_to(ROOT)} imports {named}: use seqxduce.testing"
