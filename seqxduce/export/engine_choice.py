"""The engines by name (`--engine`, `engine=`), read from the registry: seqxduce's own search (decoding/engines.py)
and CTranslate2 (registered here, as a plugin's engine is, by register_engines: registry.DEFAULT_PLUGINS), then any
plugin's. Here, in export/, the wing that knows both of the core's: decoding never imports export."""

from __future__ import annotations

from typing import Any

from seqxduce.api import UserError
from seqxduce.decoding.engines import FEATURES, Engine
from seqxduce.export.ct2_engine import CTranslate2Engine
from seqxduce.hookspecs import hookimpl
from seqxduce.registry import registry

# the core's own engines, the default first; registry().engine_names() adds the plugins'
ENGINE_NAMES = ("seqxduce", "ctranslate2")


@hookimpl
def register_engines(register: Any) -> None:
    """CTranslate2, registered as a plugin's engine is."""
    register("ctranslate2", CTranslate2Engine,
             help="CTranslate2 over an export folder from `seqxduce export` (a run directory is exported into a "
                  "temporary folder first), through the same tokenizers and metric; needs the extra (pip install "
                  "-e '.[ctranslate2]')")


def engine_names() -> list[str]:
    """Every engine registered, the core's own first: what --engine offers."""
    return registry().engine_names()


def engine_named(name: str | Engine) -> Engine:
    """The engine of a name (an Engine given is returned as it is), built from the registry; an unknown name is
    refused in one line, and so is a plugin whose factory breaks the contract."""
    if isinstance(name, Engine):
        return name
    reg = registry()
    if name not in reg.tables["engine"]:
        raise UserError(f"engine={name!r}: no such engine; give one of {', '.join(reg.engine_names())}")
    component = reg.get("engine", name)
    built = component.build()
    if not isinstance(built, Engine):
        raise UserError(f"engine {name!r} (plugin {component.plugin!r}): its factory returned "
                        f"{type(built).__name__}, not a seqxduce.decoding.engines.Engine; fix or uninstall the plugin")
    unknown = sorted(set(built.capabilities) - set(FEATURES))
    if unknown:
        raise UserError(f"engine {name!r} (plugin {component.plugin!r}): capabilities {', '.join(unknown)} are no "
                        f"features (seqxduce.decoding.engines.FEATURES: {', '.join(FEATURES)}); fix or uninstall "
                        "the plugin")
    return built
