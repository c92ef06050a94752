"""`seqxduce translate RUN`: translate each line typed at a prompt, or each line of a pipe (the core's prompt loop)."""

from __future__ import annotations

from seqxduce.inspection.interactive import interactive_command


def as_is(text: str) -> str:
    """A translation is shown as the task wrote it."""
    return text


translate_command = interactive_command(
    "translate", render=as_is,
    help="Translate each line typed at a prompt with a trained run (Up/Down recall earlier lines, Ctrl-D "
         "leaves), or each line piped in, one translation per line as it arrives. --nbest N shows the N best "
         "with their scores (tab-separated: score, translation).",
)
