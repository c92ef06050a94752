"""The architecture's import rules, read from the source: the core imports no plugin, a plugin imports only the
core's public API and its own modules (relatively, so that it can be lifted into its own package), no module of
the tree imports itself back (module level or inside a function), the wings keep their borders, and
ARCHITECTURE.md's import graph is the code's (tests/import_graph.py generates it)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import seqxduce
from tests import import_graph

ROOT = Path(__file__).resolve().parents[1]


def public_modules() -> set[str]:
    """The modules CONTRIBUTING.md's "What is public API" table names: the one list plugins may import from."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    table = text[text.index("### What is public API"):].split("\n\n")[2]
    return {re.match(r"\| `([\w.]+)`", line).group(1) for line in table.splitlines() if line.startswith("| `")}


PUBLIC = public_modules()
PACKAGE = {f"seqxduce.{name}" for name in seqxduce.__all__}  # from seqxduce import hookimpl, Task, ...
GRAPH = import_graph.graph()


def imports(path: Path) -> list[tuple[str, int]]:
    """(module named, relative level) of every import in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
            if node.module == "seqxduce" and not node.level:  # from seqxduce import checkpoint: a module, maybe
                found += [(f"seqxduce.{alias.name}", 0) for alias in node.names]
    return found


def test_the_public_api_table_names_modules_that_exist():
    assert {"seqxduce", "seqxduce.api", "seqxduce.search", "seqxduce.registry"} <= PUBLIC
    for name in PUBLIC:
        importlib.import_module(name)


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


def test_the_graph_is_read_from_the_code():
    assert "seqxduce.rundir" in GRAPH["seqxduce.training.trainer"].top
    assert "seqxduce.decoding.decode" in GRAPH["seqxduce.training.validation"].lazy
    assert "seqxduce_transformer.layers" in GRAPH["seqxduce_transformer.transformer"].top


def test_no_module_of_the_core_or_the_plugins_imports_itself_back():
    done: set[str] = set()

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert module not in stack, "import cycle: " + " -> ".join((*stack[stack.index(module):], module))
        if module in done:
            return
        for other in sorted(GRAPH[module].top | GRAPH[module].lazy):
            visit(other, (*stack, module))
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, ())


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": import_graph.Module(Path("a.py"), top={"b"}), "b": import_graph.Module(Path("b.py"), top={"a"})}
    with pytest.raises(ValueError, match="import cycle: a -> b -> a"):
        import_graph.floors(graph, {"a", "b"})


@pytest.mark.parametrize(("wing", "never"), [
    ("seqxduce.training", "seqxduce.serving"),
    ("seqxduce.training", "seqxduce.export"),
    ("seqxduce.training", "seqxduce.inspection"),  # the run's README is written by whoever calls the trainer
    ("seqxduce.decoding", "seqxduce.training"),
    ("seqxduce.inspection", "seqxduce.training"),
    ("seqxduce.export", "seqxduce.training"),
    ("seqxduce.serving", "seqxduce.training"),
])
def test_a_wing_never_imports_across_its_border(wing, never):
    """Direct imports, at module level or inside functions, and everything those modules import in turn."""
    def reach(module: str, seen: set[str]) -> set[str]:
        for other in GRAPH[module].top | GRAPH[module].lazy:
            if other not in seen:
                seen.add(other)
                reach(other, seen)
        return seen

    for module in (name for name in GRAPH if name == wing or name.startswith(wing + ".")):
        crossing = sorted(name for name in reach(module, set()) if name == never or name.startswith(never + "."))
        assert not crossing, f"{module} imports {crossing}"


def test_architecture_shows_the_import_graph_of_the_code():
    documented = import_graph.documented_block(import_graph.ARCHITECTURE.read_text(encoding="utf-8"))
    assert documented == import_graph.core_block(GRAPH), (
        "ARCHITECTURE.md's import graph differs from the code: run `python tests/import_graph.py --write`")


def test_a_plugins_tests_beside_it_import_nothing_from_the_cores_tests():
    # a plugin lifted into its own repository takes plugins/X/tests/ along; tests/ stays behind, so what they
    # share lives in the core's seqxduce.testing
    moved = sorted((ROOT / "plugins").glob("*/tests/*.py"))
    assert moved, "no plugin tests found under plugins/*/tests/"
    for path in moved:
        named = [name for name, level in imports(path) if level == 0 and (name == "tests" or name.startswith("tests."))]
        assert not named, f"{path.relative_to(ROOT)} imports {named}: use seqxduce.testing"
