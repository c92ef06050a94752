"""TOML recipe -> validated settings. Every key is checked against the settings its plugin declares."""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqxduce.api import UserError
from seqxduce.plugins import Component, Registry, registry
from seqxduce.settings import DecodeCore, ModelCore, TaskCore, TokenizerCore, TrainSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# section -> (plugin kind or None, the core's own settings for that section)
SECTIONS: dict[str, tuple[str | None, type]] = {
    "task": ("task", TaskCore),
    "tokenizer": ("tokenizer", TokenizerCore),
    "model": ("model", ModelCore),
    "train": (None, TrainSettings),
    "decode": ("decoder", DecodeCore),
}


@dataclass
class Section:
    """One resolved recipe section: the core's keys, the plugin's keys and the component they name."""

    core: Any
    settings: Any
    component: Component | None


@dataclass
class Recipe:
    """A validated recipe; `base_dir` is where relative paths in it are resolved from."""

    source: str
    base_dir: Path
    task: Section
    tokenizer: Section
    model: Section
    decode: Section
    train: TrainSettings

    def resolved(self) -> dict[str, dict[str, Any]]:
        """Every key of every section, defaults included."""
        out: dict[str, dict[str, Any]] = {}
        for name in SECTIONS:
            if name == "train":
                out[name] = dataclasses.asdict(self.train)
                continue
            section: Section = getattr(self, name)
            values = dataclasses.asdict(section.core)
            if section.settings is not None:
                values.update(dataclasses.asdict(section.settings))
            out[name] = values
        return out

    def to_toml(self) -> str:
        """The resolved recipe as TOML, with each key's help as a comment."""
        lines: list[str] = []
        for name, values in self.resolved().items():
            helps = self._helps(name)
            lines.append(f"[{name}]")
            for key, value in values.items():
                comment = f"  # {helps[key]}" if helps.get(key) else ""
                lines.append(f"{key} = {toml_value(value)}{comment}")
            lines.append("")
        return "\n".join(lines)

    def _helps(self, name: str) -> dict[str, str]:
        if name == "train":
            return field_helps(TrainSettings)
        section: Section = getattr(self, name)
        helps = field_helps(type(section.core))
        if section.settings is not None:
            helps.update(field_helps(type(section.settings)))
        return helps

    def path(self, value: str) -> Path:
        """A path from the recipe, relative to the recipe's directory unless absolute."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)


def field_helps(cls: type) -> dict[str, str]:
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def toml_value(value: Any) -> str:
    """Format a scalar or list as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, value); the value is read as TOML, else taken as a string."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise UserError(f"--set {text!r}: write it as section.key=value, e.g. --set train.max_steps=100")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key.strip(), value


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such recipe file") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: not valid TOML: {err}") from None


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = (), reg: Registry | None = None) -> Recipe:
    """Read, override and validate a recipe file."""
    path = Path(path)
    data = read_toml(path)
    return build_recipe(data, source=str(path), base_dir=path.parent.resolve(), overrides=overrides, reg=reg)


def build_recipe(
    data: dict[str, Any],
    source: str = "<recipe>",
    base_dir: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    reg: Registry | None = None,
) -> Recipe:
    """Validate a recipe given as a dict (as read from TOML)."""
    reg = reg or registry()
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    parsed = [parse_override(text) for text in overrides]
    for section, key, value in parsed:
        if key == "name" and isinstance(data.get(section), dict) and data[section].get("name") != value:
            _drop_plugin_keys(data, section)
    for section, key, value in parsed:
        data.setdefault(section, {})[key] = value
    for name, value in data.items():
        if name not in SECTIONS:
            raise UserError(f"{source}: unknown section [{name}]; sections are {', '.join(SECTIONS)}")
        if not isinstance(value, dict):
            raise UserError(f"{source}: {name} must be a table ([{name}])")
    resolved = {name: _resolve_section(name, data.get(name, {}), source, reg) for name in SECTIONS}
    return Recipe(
        source=source,
        base_dir=base_dir or Path.cwd(),
        task=resolved["task"],
        tokenizer=resolved["tokenizer"],
        model=resolved["model"],
        decode=resolved["decode"],
        train=resolved["train"].core,
    )


def _drop_plugin_keys(data: dict[str, Any], section: str) -> None:
    """--set section.name=other switches plugins: the old plugin's keys from the file no longer apply."""
    if section in SECTIONS:
        core_keys = {f.name for f in dataclasses.fields(SECTIONS[section][1])} - {"preset"}
        data[section] = {k: v for k, v in data[section].items() if k in core_keys}


def _resolve_section(name: str, values: dict[str, Any], source: str, reg: Registry) -> Section:
    kind, core_cls = SECTIONS[name]
    core_keys = {f.name for f in dataclasses.fields(core_cls)}
    core_values = {k: v for k, v in values.items() if k in core_keys}
    if kind is None:
        _reject_unknown(name, values, core_keys, source)
        return Section(core=make_settings(core_cls, core_values, name, source), settings=None, component=None)
    if "name" not in core_values and _has_default(core_cls, "name"):
        core_values["name"] = _default_of(core_cls, "name")
    if "name" not in core_values:
        raise UserError(f"{source}: [{name}] needs name = \"...\"; see `seqxduce plugins` for the choices")
    try:
        component = reg.get(kind, str(core_values["name"]))
    except UserError as err:
        raise UserError(f"{source}: [{name}] name: {err}") from None
    plugin_values = {k: v for k, v in values.items() if k not in core_keys}
    preset = core_values.get("preset", "")
    if preset:
        if preset not in component.presets:
            known = ", ".join(sorted(component.presets)) or "(none)"
            raise UserError(f"{source}: [{name}] preset {preset!r} is not a preset of {component.name}; "
                            f"known: {known}")
        plugin_values = {**component.presets[preset], **plugin_values}
    settings_cls = component.settings
    plugin_keys = {f.name for f in dataclasses.fields(settings_cls)} if settings_cls else set()
    if plugin_keys & core_keys:
        raise UserError(f"{kind} {component.name!r} (plugin {component.plugin!r}) declares [{name}] keys the core "
                        f"reads itself: {', '.join(sorted(plugin_keys & core_keys))}; the plugin must rename them")
    _reject_unknown(name, plugin_values, plugin_keys, source, component)
    core = make_settings(core_cls, core_values, name, source)
    settings = make_settings(settings_cls, plugin_values, name, source) if settings_cls else None
    return Section(core=core, settings=settings, component=component)


def _has_default(cls: type, key: str) -> bool:
    f = {f.name: f for f in dataclasses.fields(cls)}[key]
    return f.default is not dataclasses.MISSING


def _default_of(cls: type, key: str) -> Any:
    return {f.name: f for f in dataclasses.fields(cls)}[key].default


def _reject_unknown(name: str, values: dict[str, Any], known: set[str], source: str,
                    component: Component | None = None) -> None:
    for key in values:
        if key in known:
            continue
        allowed = sorted(known | {f.name for f in dataclasses.fields(SECTIONS[name][1])})
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        owner = f" for {component.kind} {component.name!r}" if component else ""
        raise UserError(f"{source}: unknown key [{name}] {key}{owner}.{hint} Known keys: {', '.join(allowed)}")


def make_settings(cls: type, values: dict[str, Any], section: str, source: str) -> Any:
    """Instantiate a settings dataclass, checking types, choices and required keys."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        where = f"{source}: [{section}] {f.name}"
        if f.name not in values:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise UserError(f"{where} is required ({f.metadata.get('help', '')})")
            continue
        value = _coerce(values[f.name], hints[f.name], where)
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            raise UserError(f"{where} = {value!r} is not one of {', '.join(map(str, choices))}")
        kwargs[f.name] = value
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(types, "UnionType", None)):
        if value is None or (isinstance(value, str) and value.lower() == "none" and type(None) in args):
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except UserError as err:
                errors.append(str(err))
        raise UserError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where} must be a list, got {value!r}")
        inner = args[0] if args else Any
        return [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif isinstance(hint, type) and isinstance(value, hint):
        return value
    name = getattr(hint, "__name__", str(hint))
    raise UserError(f"{where} must be {_article(name)} {name}, got {value!r} ({type(value).__name__})")


def _article(name: str) -> str:
    return "an" if name[:1] in "aeiou" else "a"
