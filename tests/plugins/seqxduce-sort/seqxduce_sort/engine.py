"""A complete third-party inference engine: "sorter" answers each source with its tokens sorted, a rule rather
than a model (the sort task's exact answer). See CONTRIBUTING.md, "An inference engine"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from seqxduce.api import Hypothesis, Output
from seqxduce.decoding.engines import Engine


class SorterEngine(Engine):
    """Each source's tokens sorted: one output per source, no n-best, no prefixes, no scoring."""

    name = "sorter"
    capabilities = frozenset()  # what it lacks is refused in one line before any work
    honoured = frozenset()  # it reads no [decode] setting: one given is refused naming it

    @contextlib.contextmanager
    def open(self, spec: Any) -> Iterator[Any]:
        # the run as seqxduce loads it: its recipe, task and tokenizers frame the outputs and the server's batches
        yield spec.load()

    def decode(self, loaded: Any, sources: Sequence[str], prefixes: Sequence[str] | None = None,
               prefix_where: str = "prefix ", annotate: bool = False) -> list[Output]:
        outputs = []
        for source in sources:
            text = " ".join(sorted(source.split()))
            done = loaded.task.postprocess(text, source)
            outputs.append(Output(source, done.text, nbest=[(text, Hypothesis([], 0.0, 0.0))], figures=done.figures))
        return outputs
