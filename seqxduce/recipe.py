"""TOML recipe -> validated settings. Every key is checked against the settings its plugin declares."""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from seqxduce.api import Settings, UserError
from seqxduce.registry import Component, Registry, registry
from seqxduce.settings import DecodeCore, DistillSettings, ModelCore, TaskCore, TokenizerCore, TrainSettings
from seqxduce.settings_check import default_of, make_settings, road_keys, unread_by, where

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# the recipes this checkout ships (check_unread warns about their keys for the other road rather than refusing)
SHIPPED_RECIPES = Path(__file__).resolve().parents[1] / "recipes"

# section -> (plugin kind or None, the core's own settings for that section)
SECTIONS: dict[str, tuple[str | None, type]] = {
    "task": ("task", TaskCore),
    "tokenizer": ("tokenizer", TokenizerCore),
    "model": ("model", ModelCore),
    "train": (None, TrainSettings),
    "decode": ("decoder", DecodeCore),
    "distill": (None, DistillSettings),
}


CoreKeys = TypeVar("CoreKeys", TaskCore, TokenizerCore, ModelCore, DecodeCore)


@dataclass
class Section(Generic[CoreKeys]):
    """One resolved recipe section: the core's keys (TaskCore for [task], ...), the plugin's keys (its own
    settings class, or None for a plugin without settings) and the component they name."""

    core: CoreKeys
    settings: Settings | None
    component: Component | None


@dataclass
class Recipe:
    """A validated recipe; `base_dir` is where relative paths in it are resolved from."""

    source: str
    base_dir: Path
    task: Section[TaskCore]
    tokenizer: Section[TokenizerCore]
    model: Section[ModelCore]
    decode: Section[DecodeCore]
    train: TrainSettings
    distill: DistillSettings = dataclasses.field(default_factory=DistillSettings)

    def resolved(self) -> dict[str, dict[str, Any]]:
        """Every key of every section, defaults included."""
        out: dict[str, dict[str, Any]] = {}
        for name in SECTIONS:
            if SECTIONS[name][0] is None:  # a section of the core's keys alone: [train], [distill]
                out[name] = dataclasses.asdict(getattr(self, name))
                continue
            section: Section = getattr(self, name)
            values = dataclasses.asdict(section.core)
            if section.settings is not None:
                values.update(dataclasses.asdict(section.settings))
            out[name] = values
        return out

    def compared(self) -> dict[str, dict[str, Any]]:
        """resolved(), with each path key as the folder or file it names (`a/../b` and a symlink are the path they
        reach): what two recipes are compared by, so that a clone of the work tree or a moved recipe still names
        the same data."""
        out = self.resolved()
        out["task"]["data_dir"] = str(self.path(self.task.core.data_dir).resolve())
        for key in ("teacher", "targets"):
            if value := getattr(self.distill, key):
                out["distill"][key] = str(self.path(value).resolve())
        return out

    def to_toml(self) -> str:
        """The resolved recipe as TOML, with each key's help as a comment."""
        lines: list[str] = []
        for name, values in self.resolved().items():
            fields = self._fields(name)
            lines.append(f"[{name}]")
            lines.extend(toml_line(key, value, fields[key]) for key, value in values.items())
            lines.append("")
        return "\n".join(lines)

    def _fields(self, name: str) -> dict[str, dataclasses.Field]:
        if SECTIONS[name][0] is None:
            return fields_by_name(SECTIONS[name][1])
        section: Section = getattr(self, name)
        fields = fields_by_name(type(section.core))
        if section.settings is not None:
            fields.update(fields_by_name(type(section.settings)))
        return fields

    def relocated(self, base_dir: Path) -> Recipe:
        """A copy whose relative paths resolve against base_dir, its data directory made absolute first (so it
        still names the same data): the recipe a run directory saves."""
        data_dir = str(self.path(self.task.core.data_dir))
        task = dataclasses.replace(self.task, core=dataclasses.replace(self.task.core, data_dir=data_dir))
        paths = {key: str(self.path(value)) for key in ("teacher", "targets") if (value := getattr(self.distill, key))}
        return dataclasses.replace(self, base_dir=Path(base_dir).resolve(), task=task,
                                   distill=dataclasses.replace(self.distill, **paths))

    def path(self, value: str) -> Path:
        """A path from the recipe, relative to the recipe's directory unless absolute."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)


def differences(given: Recipe, saved: Recipe) -> list[str]:
    """'[section] key: A in the file, B in the run' for each resolved key where a recipe file (given) differs from
    a run's saved recipe, the data directory compared as the path it names."""
    ours = given.relocated(saved.base_dir).compared()
    theirs = saved.compared()
    found = []
    for section, values in ours.items():
        for key, value in values.items():
            other = theirs.get(section, {}).get(key)
            if value != other:
                found.append(f"[{section}] {key}: {toml_value(value)} in the file, {toml_value(other)} in the run")
    return found


def fields_by_name(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def toml_line(key: str, value: Any, f: dataclasses.Field) -> str:
    """`key = value  # help`; TOML has no null, so a None is written so that reading it back gives None again."""
    comment = f"  # {f.metadata['help']}" if f.metadata.get("help") else ""
    if value is None and f.default is None:
        # a missing key reads back as the default, None
        return f"# {key} = (unset){comment}"
    if value is None:
        # the default is something else: "none" is what _coerce reads as None for an optional setting
        return f'{key} = "none"{comment}'
    return f"{key} = {toml_value(value)}{comment}"


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
    if isinstance(value, dict):  # an inline table (a [[task.corpus]] of a resolved recipe)
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def toml_key(key: str) -> str:
    """A table's key as TOML writes it: bare when it can be, else quoted."""
    return key if key and all(c.isalnum() or c in "_-" for c in key) else toml_value(key)


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, value); the value is read as TOML, else taken as a string."""
    section, key, raw = split_override(text)
    return section, key, override_value(raw)


def override_value(raw: str) -> Any:
    """An override's value: its text read as TOML, else the text itself."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def split_override(text: str) -> tuple[str, str, str]:
    """`section.key=value` -> (section, key, the value's raw text)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise UserError(f"--set {text!r}: write it as section.key=value, e.g. --set train.max_steps=100")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    return section, key.strip(), raw


def read_toml(path: Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        run_recipe = path / "recipe.toml"
        hint = f", e.g. {run_recipe}" if run_recipe.is_file() else ""
        raise UserError(f"{path}: is a directory; give a recipe file{hint}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such recipe file") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start}); "
                        "give a TOML recipe") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read the recipe: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: not valid TOML: {err}") from None


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = (), reg: Registry | None = None,
                saved: bool = False) -> Recipe:
    """Read, override and validate a recipe file (saved: a run's own recipe.toml, see build_recipe)."""
    path = Path(path)
    data = read_toml(path)
    return build_recipe(data, source=str(path), base_dir=path.parent.resolve(), overrides=overrides, reg=reg,
                        saved=saved)


def build_recipe(
    data: dict[str, Any],
    source: str = "<recipe>",
    base_dir: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    reg: Registry | None = None,
    saved: bool = False,
) -> Recipe:
    """Validate a recipe given as a dict (as read from TOML). saved: the recipe a run trained with, whose keys
    its road does not read are warned about rather than refused (the run exists; see check_unread)."""
    reg = reg or registry()
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    _check_sections(data, source)
    pieces = [split_override(text) for text in overrides]
    parsed = [(section, key, override_value(raw)) for section, key, raw in pieces]
    for section, key, _ in parsed:
        if section not in SECTIONS:
            raise UserError(f"--set {section}.{key}: unknown section [{section}]; sections are {', '.join(SECTIONS)}")
    for section, key, value in parsed:
        if key == "name" and data.get(section, {}).get("name") != value:
            _drop_plugin_keys(data, section, reg, value)
    for section, key, value in parsed:
        data.setdefault(section, {})[key] = value
    texts: dict[str, dict[str, str]] = {}  # section -> key -> the raw text of its --set (the last one wins)
    for section, key, raw in pieces:
        texts.setdefault(section, {})[key] = raw.strip()
    resolved = {name: _resolve_section(name, data.get(name, {}), source, reg, texts.get(name, {}))
                for name in SECTIONS}
    _check_same_as(resolved, source, texts)
    check_unread(resolved, data, texts, source, lenient=saved or shipped(base_dir))
    return Recipe(
        source=source,
        base_dir=base_dir or Path.cwd(),
        task=resolved["task"],
        tokenizer=resolved["tokenizer"],
        model=resolved["model"],
        decode=resolved["decode"],
        train=resolved["train"].core,
        distill=resolved["distill"].core,
    )


def _check_same_as(resolved: dict[str, Section], source: str, texts: Mapping[str, Mapping[str, str]]) -> None:
    """Keys declared with setting(same_as="section.key") must agree with that key where its section has it."""
    for name, section in resolved.items():
        for obj in (section.core, section.settings):
            for f in dataclasses.fields(obj) if dataclasses.is_dataclass(obj) else ():
                target = f.metadata.get("same_as")
                if not target:
                    continue
                other_name, _, other_key = target.partition(".")
                other = resolved.get(other_name)
                holders = [o for o in (other.core, other.settings) if other is not None and o is not None
                           and other_key in fields_by_name(type(o))]
                if not holders:  # the other section's plugin has no such key: nothing to agree with
                    continue
                mine, theirs = getattr(obj, f.name), getattr(holders[0], other_key)
                if mine != theirs:
                    here = where(source, name, f.name, texts.get(name, {}))
                    there = where(source, other_name, other_key, texts.get(other_name, {}))
                    raise UserError(f"{here} = {toml_value(mine)}, but {there} = {toml_value(theirs)}: the two must be "
                                    f"the same; set both to one value")


def shipped(base_dir: Path | None) -> bool:
    """Whether a recipe lies in this checkout's recipes/ folder."""
    return base_dir is not None and Path(base_dir).resolve().is_relative_to(SHIPPED_RECIPES)


def check_unread(resolved: Mapping[str, Section], data: Mapping[str, Mapping[str, Any]],
                 texts: Mapping[str, Mapping[str, str]], source: str, lenient: bool = False) -> None:
    """Refuse a setting the recipe or a --set gives that the section's road does not read (declared with
    setting(ignored_when=..., read_when=...)), e.g. [train] lr under schedule = "inverse_sqrt", which would
    otherwise do nothing without a word. A --set is refused always. A file's key counts when the file writes it,
    unless the file is a resolved recipe (lenient, or a section that writes every key, as a run's recipe.toml
    does) and the value is its default; it is refused too, but only warned about, once,
    where the file did not choose to be on that road: a --set switched the road, or the file is lenient (a
    run's saved recipe, which has trained already, or one of recipes/, which carry a key for the other road
    that a documented --set takes, e.g. ut_copy.toml's steps for --set model.act=false)."""
    for name, section in resolved.items():
        parts = [part for part in (section.core, section.settings) if part is not None]
        values = {f.name: getattr(part, f.name) for part in parts for f in dataclasses.fields(part)}
        sets, written = texts.get(name, {}), data.get(name, {})
        # a section that writes every key is a resolved recipe (a run's recipe.toml, `recipe show`), whose
        # defaults were written for completeness, not chosen
        dump = lenient or set(values) <= set(written)
        for part in parts:
            for f in dataclasses.fields(part):
                road = unread_by(f.metadata, values)
                value = getattr(part, f.name)
                # a resolved recipe counts only the values it changed; a user's own file gives what it writes,
                # a default too (fairseq's lr = 5e-4 under inverse_sqrt is refused, not taken in silence)
                given = f.name in written and not (dump and value == default_of(f))
                if not road or (f.name not in sets and not given):
                    continue
                message = (f"{where(source, name, f.name, sets)} = {toml_value(value)} is not read with "
                           f"[{name}] {road}" + (f" ({_origin(name, f.metadata, sets)})" if
                                                 road_keys(f.metadata) & set(sets) else "")
                           + (f"; {f.metadata['instead']}" if f.metadata.get("instead") else ""))
                if f.name in sets or not (lenient or road_keys(f.metadata) & set(sets)):
                    raise UserError(message)
                _warn_once(message)


def _origin(section: str, meta: Mapping[str, Any], sets: Mapping[str, str]) -> str:
    """The --set that chose the road, for a message."""
    key = sorted(road_keys(meta) & set(sets))[0]
    return f"--set {section}.{key}={sets[key]}"


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """One line on stderr, once per process (a recipe is loaded several times by one command)."""
    if message not in _WARNED:
        _WARNED.add(message)
        from seqxduce.console import console

        console.print(f"warning: {message}", markup=False)


def _check_sections(data: dict[str, Any], source: str) -> None:
    for name, value in data.items():
        if name not in SECTIONS:
            raise UserError(f"{source}: unknown section [{name}]; sections are {', '.join(SECTIONS)}")
        if not isinstance(value, dict):
            raise UserError(f"{source}: {name} must be a table ([{name}])")


def _drop_plugin_keys(data: dict[str, Any], section: str, reg: Registry, new_name: Any) -> None:
    """--set section.name=other switches plugins: the old plugin's keys from the file no longer apply, except the
    settings both plugins share (see _shared_settings), which keep the file's values: a run's length limits stay
    its limits when `--set decode.name=greedy` replaces its beam search."""
    if section in data:
        kind, core_cls = SECTIONS[section]
        core_keys = {f.name for f in dataclasses.fields(core_cls)} - {"preset"}
        old_name = data[section].get("name", _default_of(core_cls, "name") if _has_default(core_cls, "name") else None)
        shared = _shared_settings(reg, kind, old_name, new_name) if kind is not None else set()
        data[section] = {k: v for k, v in data[section].items() if k in core_keys or k in shared}


def _shared_settings(reg: Registry, kind: str, old_name: Any, new_name: Any) -> set[str]:
    """The keys two plugins of a kind declare as one setting: a field both settings classes inherit from the same
    class (every search's SearchSettings: max_len_a, max_len_b, min_len). A key that merely has the same name in
    two unrelated classes may mean something else, and is not kept."""
    try:
        classes = [reg.get(kind, str(name)).settings for name in (old_name, new_name)]
    except UserError:  # an unknown name is refused when the section is resolved, naming the --set
        return set()
    if not all(cls is not None and dataclasses.is_dataclass(cls) for cls in classes):
        return set()
    old, new = classes
    both = {f.name for f in dataclasses.fields(old)} & {f.name for f in dataclasses.fields(new)}
    return {key for key in both if _declared_by(old, key) is _declared_by(new, key)}


def _declared_by(cls: type, key: str) -> type:
    """The class of cls's MRO whose own body declares the field `key`."""
    return next(c for c in cls.__mro__ if key in c.__dict__.get("__annotations__", {}))


def _resolve_section(name: str, values: dict[str, Any], source: str, reg: Registry,
                     overridden: Mapping[str, str] | None = None) -> Section:
    """The section's core settings, its plugin and the plugin's settings; overridden: see make_settings."""
    overridden = overridden or {}
    kind, core_cls = SECTIONS[name]
    core_keys = {f.name for f in dataclasses.fields(core_cls)}
    core_values = {k: v for k, v in values.items() if k in core_keys}
    if kind is None:
        _reject_unknown(name, values, core_keys, source, overridden=overridden)
        core = make_settings(core_cls, core_values, name, source, overridden)
        return Section(core=core, settings=None, component=None)
    if "name" not in core_values and _has_default(core_cls, "name"):
        core_values["name"] = _default_of(core_cls, "name")
    if "name" not in core_values:
        raise UserError(f"{source}: [{name}] needs name = \"...\"; see `seqxduce plugins` for the choices")
    try:
        component = reg.get(kind, str(core_values["name"]))
    except UserError as err:
        raise UserError(f"{where(source, name, 'name', overridden)}: {err}") from None
    plugin_values = {k: v for k, v in values.items() if k not in core_keys}
    preset = core_values.get("preset", "")
    if preset:
        if preset not in component.presets:
            known = ", ".join(sorted(component.presets)) or "(none)"
            raise UserError(f"{where(source, name, 'preset', overridden)} {preset!r} is not a preset of "
                            f"{component.name}; known: {known}")
        plugin_values = {**component.presets[preset], **plugin_values}
    settings_cls = component.settings
    plugin_keys = {f.name for f in dataclasses.fields(settings_cls)} if settings_cls else set()
    if plugin_keys & core_keys:
        raise UserError(f"{kind} {component.name!r} (plugin {component.plugin!r}) declares [{name}] keys the core "
                        f"reads itself: {', '.join(sorted(plugin_keys & core_keys))}; the plugin must rename them")
    _reject_unknown(name, plugin_values, plugin_keys, source, component, overridden)
    core = make_settings(core_cls, core_values, name, source, overridden)
    settings = make_settings(settings_cls, plugin_values, name, source, overridden) if settings_cls else None
    return Section(core=core, settings=settings, component=component)


def _has_default(cls: type, key: str) -> bool:
    f = {f.name: f for f in dataclasses.fields(cls)}[key]
    return f.default is not dataclasses.MISSING


def _default_of(cls: type, key: str) -> Any:
    return {f.name: f for f in dataclasses.fields(cls)}[key].default


def _reject_unknown(name: str, values: dict[str, Any], known: set[str], source: str,
                    component: Component | None = None, overridden: Mapping[str, str] | None = None) -> None:
    for key in values:
        if key in known:
            continue
        allowed = sorted(known | {f.name for f in dataclasses.fields(SECTIONS[name][1])})
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        owner = f" for {component.kind} {component.name!r}" if component else ""
        origin = f"--set {name}.{key}" if key in (overridden or {}) else source
        raise UserError(f"{origin}: unknown key [{name}] {key}{owner}.{hint} Known keys: {', '.join(allowed)}")
