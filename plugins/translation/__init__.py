"""seqxduce translation plugin: WMT14 and Multi30k data (or your own files), scored with sacrebleu.

Importing this module stays light: the task and sacrebleu load when a recipe builds the task.
"""

from seqxduce import hookimpl
from seqxduce.api import Task

from .commands import translate_command
from .settings import TranslationSettings


def build_translation_task(settings: TranslationSettings) -> Task:
    """Task factory: the translation task for one recipe's [task] settings."""
    from .task import TranslationTask

    return TranslationTask(settings)


@hookimpl
def register_tasks(register):
    register("translation", build_translation_task, settings=TranslationSettings,
             help="machine translation: wmt14 / multi30k / your files; sacreBLEU + chrF")


@hookimpl
def register_commands(cli):
    """Add `seqxduce translate` (an interactive prompt, or a pipe, over a trained run)."""
    cli.add_command(translate_command)
