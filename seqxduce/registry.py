"""The plugin manager: entry points in, name -> component tables out."""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from seqxduce import hookspecs
from seqxduce.api import Decoder, Importer, Model, Task, Tokenizer, UserError

KINDS = ("task", "tokenizer", "model", "decoder", "importer", "engine")
ENTRY_POINT_GROUP = "seqxduce"

# the core's own plugins: its two inference engines, registered through register_engines as a third party's are
# (simonw/llm's DEFAULT_PLUGINS). Named, not imported, here: they live in the wings, which the shared root never
# imports; they are loaded by name as an entry point is, before the entry points, so their names come first.
DEFAULT_PLUGINS = ("seqxduce.decoding.engines", "seqxduce.export.engine_choice")
CORE_DISTRIBUTION = "seqxduce"

# what a factory of each kind must return; an engine's contract, decoding.engines.Engine, lives in a wing, so it is
# checked where an engine is looked up (export/engine_choice.py: engine_named)
CONTRACTS: dict[str, type] = {"task": Task, "tokenizer": Tokenizer, "model": Model, "decoder": Decoder,
                              "importer": Importer}


@dataclass
class Component:
    """One registered task, tokenizer, model, decoder, importer or engine."""

    kind: str
    name: str
    factory: Callable[..., Any]
    settings: type | None
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    help: str = ""
    plugin: str = ""
    distribution: str = ""

    def build(self, *args: Any) -> Any:
        """Call the factory (see seqxduce.api.TaskFactory and friends) and check it kept the contract of its kind."""
        built = self.factory(*args)
        contract = CONTRACTS.get(self.kind)
        if contract is not None and not isinstance(built, contract):
            raise UserError(f"{self.kind} {self.name!r} (plugin {self.plugin!r}): its factory returned "
                            f"{type(built).__name__}, not a seqxduce.api.{contract.__name__}; "
                            "fix or uninstall the plugin")
        return built


# plugin name -> the installed distribution that declared its entry point (for `seqxduce plugins`)
DISTRIBUTIONS: dict[str, str] = {}


class PluginLoadWarning(UserWarning):
    """A plugin failed to import; the others keep working."""


def _plugin_name(pm: pluggy.PluginManager, plugin: object) -> str:
    return pm.get_name(plugin) or getattr(plugin, "__name__", repr(plugin))


def new_manager(strict: bool = False, entry_points: bool = True) -> pluggy.PluginManager:
    """A PluginManager with the hook specs and (by default) every `seqxduce` entry point loaded."""
    pm = pluggy.PluginManager("seqxduce")
    pm.add_hookspecs(hookspecs)
    load_default_plugins(pm)
    if entry_points:
        load_entry_points(pm, strict=strict)
    return pm


def load_default_plugins(pm: pluggy.PluginManager) -> None:
    """Register the core's own plugins (DEFAULT_PLUGINS), whatever else is installed: each is part of seqxduce."""
    for name in DEFAULT_PLUGINS:
        if not pm.has_plugin(name):
            pm.register(importlib.import_module(name), name=name)
            DISTRIBUTIONS[name] = CORE_DISTRIBUTION


class PluginLoadError(Exception):
    """In strict mode, a plugin failed to import or to register; the message names the plugin."""


def load_entry_points(pm: pluggy.PluginManager, strict: bool = False) -> None:
    """Register every module named in the `seqxduce` entry-point group. A plugin that fails to import or
    implements a hook that does not exist (usually a misspelling) is skipped with a warning naming it, so that
    one broken plugin does not take every command down; in strict mode either is an error."""
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if pm.has_plugin(ep.name):
            continue
        try:
            module = ep.load()
        except Exception as err:  # a broken third-party plugin must not take the CLI down
            if strict:
                raise PluginLoadError(f"plugin {ep.name!r} ({ep.value}) failed to import: "
                                        f"{type(err).__name__}: {err}") from err
            warnings.warn(
                f"plugin {ep.name!r} ({ep.value}) failed to import and is skipped: {type(err).__name__}: {err}",
                PluginLoadWarning,
                stacklevel=2,
            )
            continue
        pm.register(module, name=ep.name)
        DISTRIBUTIONS[ep.name] = ep.dist.name if ep.dist is not None else ep.value
        unknown = unknown_hooks(pm, module)
        if unknown and not strict:
            pm.unregister(module)
            warnings.warn(f"plugin {ep.name!r} ({ep.value}) is skipped: {_unknown_text(unknown[0])}",
                          PluginLoadWarning, stacklevel=2)
    check_hooks(pm)


def _hook_names() -> list[str]:
    return sorted(name for name in dir(hookspecs) if name.startswith("register_"))


def unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The hooks a registered plugin implements that match no hook spec."""
    return sorted(caller.name for caller in pm.get_hookcallers(plugin) or [] if not caller.has_spec())


def _unknown_text(hook: str) -> str:
    close = difflib.get_close_matches(hook, _hook_names(), n=1)
    hint = f"did you mean {close[0]}?" if close else f"the hooks are {', '.join(_hook_names())}"
    return f"it implements {hook}, which is no seqxduce hook; {hint}"


def check_hooks(pm: pluggy.PluginManager) -> None:
    """A hook implementation matching no spec (usually a misspelling) as a UserError naming the plugin."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as err:
        hook = unknown_hooks(pm, err.plugin)
        what = _unknown_text(hook[0]) if hook else str(err)
        raise UserError(f"plugin {_plugin_name(pm, err.plugin)!r}: {what}") from None


class Registry:
    """Name -> Component tables for each of KINDS, built from a plugin manager's hooks. A name registered twice
    keeps its first registration, the second skipped with a warning naming both (strict: a UserError)."""

    def __init__(self, pm: pluggy.PluginManager, strict: bool = False):
        self.pm = pm
        self.strict = strict
        self.tables: dict[str, dict[str, Component]] = {kind: {} for kind in KINDS}
        for kind in KINDS:
            hook = getattr(pm.hook, f"register_{kind}s")
            for impl in hook.get_hookimpls():
                plugin = _plugin_name(pm, impl.plugin)
                try:
                    impl.function(register=self._registrar(kind, plugin))
                except UserError:
                    raise
                except Exception as err:  # one broken plugin must not take the CLI down, as on import
                    if strict:
                        raise PluginLoadError(f"plugin {plugin!r} failed in register_{kind}s: "
                                              f"{type(err).__name__}: {err}") from err
                    warnings.warn(f"plugin {plugin!r} failed in register_{kind}s and its {kind}s are skipped: "
                                  f"{type(err).__name__}: {err}", PluginLoadWarning, stacklevel=2)

    def _registrar(self, kind: str, plugin: str) -> Callable[..., None]:
        def register(
            name: str,
            factory: Callable[..., Any],
            settings: type | None = None,
            presets: dict[str, dict[str, Any]] | None = None,
            help: str = "",
        ) -> None:
            table = self.tables[kind]
            if name in table:
                clash = (f"{kind} {name!r} is registered twice: by plugin {table[name].plugin!r} and by plugin "
                         f"{plugin!r}")
                if self.strict:
                    raise UserError(f"{clash}; uninstall one of them or rename its {kind}")
                # as for a plugin that fails to import: the other commands and components keep working
                warnings.warn(f"{clash}; the second is skipped (uninstall one of them or rename its {kind}; "
                              "--strict-plugins makes this an error)", PluginLoadWarning, stacklevel=2)
                return
            table[name] = Component(kind, name, factory, settings, dict(presets or {}), help, plugin,
                                    DISTRIBUTIONS.get(plugin, "(registered in code)"))

        return register

    def get(self, kind: str, name: str) -> Component:
        """The component called name, or a UserError listing the known names and a close match."""
        table = self.tables[kind]
        if name in table:
            return table[name]
        known = sorted(table)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown {kind} {name!r}; known {kind}s: {', '.join(known) or '(none)'}.{hint}")

    def names(self, kind: str) -> list[str]:
        """The names of a kind, sorted."""
        return sorted(self.tables[kind])

    def engine_names(self) -> list[str]:
        """The engines in the order they were registered: the core's own first (seqxduce, the default, then
        ctranslate2), then the plugins'."""
        return list(self.tables["engine"])


_default: Registry | None = None


def registry(strict: bool | None = None) -> Registry:
    """The process-wide registry of installed plugins (built once)."""
    global _default
    if _default is None:
        if strict is None:
            strict = _strict_from_env()
        _default = Registry(new_manager(strict=strict), strict=strict)
    return _default


def reset_registry(reg: Registry | None = None) -> None:
    """Replace (or drop) the process-wide registry; tests use this with their own plugin manager."""
    global _default
    _default = reg


def _strict_from_env() -> bool:
    return os.environ.get("SEQXDUCE_STRICT_PLUGINS", "") not in ("", "0")
