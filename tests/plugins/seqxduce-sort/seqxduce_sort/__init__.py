"""A complete third-party plugin: a task, learn to sort digits, and an inference engine that sorts them by rule
(engine.py). See CONTRIBUTING.md."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from seqxduce import Example, Report, Settings, Task, UserError, hookimpl, setting

from .engine import SorterEngine


@dataclass
class SortSettings(Settings):
    min_len: int = setting(2, help="shortest sequence", min=1)
    max_len: int = setting(8, help="longest sequence", min=1)
    size: int = setting(2000, help="training examples (valid and test get a tenth each)", min=1)
    seed: int = setting(7, help="seed the data is generated from")

    def validate(self) -> None:
        """Checks across keys; the recipe loader calls this before any data is made."""
        if self.max_len < self.min_len:
            raise UserError(f"[task] max_len = {self.max_len} is below min_len = {self.min_len}; raise max_len")


class SortTask(Task):
    """Source: digits in random order; target: the same digits sorted."""

    def __init__(self, settings: SortSettings):
        self.settings = settings

    def examples(self, split: str, data_dir: Path) -> list[Example]:
        s = self.settings
        offset = {"train": 0, "valid": 1, "test": 2}[split]
        rng = random.Random(s.seed * 10 + offset)
        count = s.size if split == "train" else max(s.size // 10, 1)
        out = []
        for _ in range(count):
            digits = [str(rng.randrange(10)) for _ in range(rng.randint(s.min_len, s.max_len))]
            out.append(Example(" ".join(digits), " ".join(sorted(digits))))
        return out

    def score(self, hypotheses: list[str], references: list[str], sources: list[str] | None = None) -> Report:
        right = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
        accuracy = right / max(len(references), 1)
        return Report({"accuracy": accuracy}, primary="accuracy", text=f"accuracy = {accuracy:.4f}")


@hookimpl
def register_tasks(register):
    register("sort", SortTask, settings=SortSettings, help="sort a sequence of digits")


@hookimpl
def register_engines(register):
    register("sorter", SorterEngine, help="each source's tokens sorted (a rule, no model)")
