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


WINGS = ("seqxduce.corpus", "seqxduce.training", "seqxduce.decoding", "seqxduce.export", "seqxduce.inspection",
         "seqxduce.serving", "seqxduce.distillation")
# the root modules that may reach into the wings: the front (the CLI and what it does, as functions), the package,
# its entry point, the test helpers (which drive the CLI) and the public faces re-exported from decoding/
FRONT = {"seqxduce", "seqxduce.__main__", "seqxduce.cli", "seqxduce.engine", "seqxduce.testing", "seqxduce.search",
         "seqxduce.search_settings"}


def reach(module: str, seen: set[str] | None = None) -> set[str]:
    """What a module imports, at module level or inside functions, and everything those modules import in turn."""
    seen = set() if seen is None else seen
    for other in GRAPH[module].top | GRAPH[module].lazy:
        if other not in seen:
            seen.add(other)
            reach(other, seen)
    return seen


def _in(name: str, part: str) -> bool:
    return name == part or name.startswith(part + ".")


@pytest.mark.parametrize(("wing", "never"), [
    ("seqxduce.training", "seqxduce.serving"),
    ("seqxduce.training", "seqxduce.export"),
    ("seqxduce.training", "seqxduce.inspection"),  # the run's README is written by whoever calls the trainer
    ("seqxduce.decoding", "seqxduce.training"),
    ("seqxduce.inspection", "seqxduce.training"),
    ("seqxduce.export", "seqxduce.training"),
    ("seqxduce.serving", "seqxduce.training"),
    # the training corpus is a wing of its own: training and `prepare` use it, it uses no other wing
    ("seqxduce.corpus", "seqxduce.training"),
    ("seqxduce.corpus", "seqxduce.decoding"),
    ("seqxduce.corpus", "seqxduce.serving"),
    ("seqxduce.corpus", "seqxduce.export"),
    ("seqxduce.corpus", "seqxduce.inspection"),
    ("seqxduce.decoding", "seqxduce.corpus"),
    # the layering that holds: decoding below export, inspection and serving; export and inspection below serving
    ("seqxduce.decoding", "seqxduce.export"),
    ("seqxduce.decoding", "seqxduce.serving"),
    ("seqxduce.decoding", "seqxduce.inspection"),
    ("seqxduce.export", "seqxduce.serving"),
    ("seqxduce.inspection", "seqxduce.serving"),
    # distillation joins decoding and the corpus for the front (engine.distill); no wing reaches it
    *((wing, "seqxduce.distillation") for wing in ("seqxduce.corpus", "seqxduce.training", "seqxduce.decoding",
                                                   "seqxduce.export", "seqxduce.inspection", "seqxduce.serving")),
    ("seqxduce.distillation", "seqxduce.serving"),
    ("seqxduce.distillation", "seqxduce.export"),
    ("seqxduce.distillation", "seqxduce.inspection"),
])
def test_a_wing_never_imports_across_its_border(wing, never):
    """Direct imports, at module level or inside functions, and everything those modules import in turn."""
    for module in (name for name in GRAPH if _in(name, wing)):
        crossing = sorted(name for name in reach(module) if _in(name, never))
        assert not crossing, f"{module} imports {crossing}"


def test_the_shared_root_imports_no_wing():
    """Every module of the core's root but the front and the public faces is shared by the wings: it imports none
    of them (not even inside a function), so that no wing reaches another through the root."""
    root = sorted(name for name in GRAPH if name.startswith("seqxduce.") and name.count(".") == 1
                  and not any(_in(name, wing) for wing in WINGS) and name not in FRONT)
    assert "seqxduce.rundir" in root and "seqxduce.data" in root and "seqxduce.signals" in root
    for module in root:
        crossing = sorted(name for name in reach(module) if any(_in(name, wing) for wing in WINGS))
        assert not crossing, f"{module} imports {crossing}"


def test_the_border_check_sees_a_crossing():
    """The check above is not vacuous: the front reaches the wings."""
    assert any(_in(name, "seqxduce.training") for name in reach("seqxduce.engine"))


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
