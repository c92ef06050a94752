"""seqxduce plugin: the algorithmic tasks (copy, reverse, addition) of the Universal Transformer paper."""

from __future__ import annotations

from seqxduce import hookimpl
from seqxduce.api import Task

from .settings import AlgorithmicSettings

__all__ = ["AlgorithmicSettings", "build_task", "register_tasks"]


def build_task(settings: AlgorithmicSettings) -> Task:
    """Build the algorithmic task from its recipe settings."""
    from .task import AlgorithmicTask

    return AlgorithmicTask(settings)


@hookimpl
def register_tasks(register):
    """Register the `algorithmic` task."""
    register("algorithmic", build_task, settings=AlgorithmicSettings,
             help="copy, reverse or add generated symbol sequences; sequence and symbol accuracy")
