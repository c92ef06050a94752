"""The engines by name (`--engine`, `engine=`): seqxduce's own search (decoding/engines.py) and CTranslate2
(export/ct2_engine.py). Here, in export/, the wing that knows both: decoding never imports export."""

from __future__ import annotations

from seqxduce.api import UserError
from seqxduce.decoding.engines import Engine

ENGINE_NAMES = ("seqxduce", "ctranslate2")


def engine_named(name: str | Engine) -> Engine:
    """The engine of a name (an Engine given is returned as it is); an unknown name is refused in one line."""
    if isinstance(name, Engine):
        return name
    if name == "seqxduce":
        from seqxduce.decoding.engines import SeqxduceEngine

        return SeqxduceEngine()
    if name == "ctranslate2":
        from seqxduce.export.ct2_engine import CTranslate2Engine

        return CTranslate2Engine()
    raise UserError(f"engine={name!r}: no such engine; give one of {', '.join(ENGINE_NAMES)}")
