"""The benchmark scripts of bench/, imported from their paths for the tests that drive them (bench/ is not a
package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(filename: str) -> ModuleType:
    """bench/<filename> as a fresh module named <stem>_bench."""
    name = Path(filename).stem + "_bench"
    spec = importlib.util.spec_from_file_location(name, BENCH / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
