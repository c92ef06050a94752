"""The one tiny recipe the core's tests train (tests/fixtures/tiny.toml: a few steps in seconds on the CPU)."""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY_RECIPE = FIXTURES / "tiny.toml"
