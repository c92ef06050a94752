"""A setting declared once and checked by one function, however its settings object was built.

`setting()` declares a field with its default, help, choices and bounds; `check_settings()` checks an object
against those declarations and runs its `validate()` (rules across fields). Subclasses of `Settings` run it on
construction, so a Python user's `TransformerSettings(heads=0)` fails as a recipe's `heads = 0` does;
`make_settings()` builds settings from a recipe's values (types coerced) and names the file or --set at fault.
Torch-free: `seqxduce plugins` reads every settings class.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from seqxduce.errors import UserError


def setting(default: Any = dataclasses.MISSING, help: str = "", choices: Sequence[Any] | None = None,
            min: float | None = None, max: float | None = None,
            min_exclusive: bool = False, max_exclusive: bool = False, same_as: str | None = None,
            per_request: bool = False, ignored_when: Mapping[str, Sequence[Any]] | None = None,
            read_when: Mapping[str, Sequence[Any]] | None = None, instead: str = "", file: bool = False,
            keyed_when_changed: bool = False) -> Any:
    """Declare one recipe setting as a dataclass field with its default, one-line help, allowed values and bounds.

    min/max bound a number (or each number of a list); *_exclusive makes one strict. same_as = "section.key":
    in a recipe whose other section has that key too, both must hold the same value (checked by the recipe
    loader), e.g. a decoder's key that must repeat its task's. per_request = True: a decoder's scalar key that a
    `seqxduce serve` request may set for itself (beam, alpha, ...); a key that must agree with the task or the
    model, or that is not a scalar, stays the server's (see request_keys).

    ignored_when = {"key": (values...)} / read_when = {"key": (values...)}: the road this setting is read on, by
    another key of the same recipe section (e.g. lr is ignored when schedule = "inverse_sqrt"); a recipe or --set
    that gives it on another road is refused (see unread_by), the message ending with `instead`: what to use.
    file = True: the value names a file whose bytes are the setting (a tokenizer's model_file): what is keyed by
    the settings (the prepared training data) is keyed by the file's content, not its path.
    keyed_when_changed = True: a key added after data were keyed by their section (the prepared training data, a
    distilled set) enters those keys only when it differs from its default, so that recipes without it keep
    their data (see keyed_values).
    """
    metadata = {"help": help, "choices": tuple(choices) if choices else None,
                "min": min, "max": max, "min_exclusive": min_exclusive, "max_exclusive": max_exclusive,
                "same_as": same_as, "per_request": per_request,
                "ignored_when": {k: tuple(v) for k, v in (ignored_when or {}).items()},
                "read_when": {k: tuple(v) for k, v in (read_when or {}).items()}, "instead": instead, "file": file,
                "keyed_when_changed": keyed_when_changed}
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=default, metadata=metadata)


def keyed_values(values: Mapping[str, Any], settings: Any) -> dict[str, Any]:
    """A section's resolved values as data keys hold them: those of `settings` declared keyed_when_changed left
    out while they hold their default."""
    out = dict(values)
    for f in dataclasses.fields(settings) if dataclasses.is_dataclass(settings) else ():
        if f.metadata.get("keyed_when_changed") and out.get(f.name) == default_of(f):
            out.pop(f.name, None)
    return out


def setting_like(cls: type, name: str, default: Any, help: str | None = None) -> Any:
    """Redeclare an inherited setting with another default (and help), keeping its choices and bounds, so that
    a subclass (e.g. a decoder plugin's beam settings) changes a default without declaring the range again."""
    inherited = {f.name: f for f in dataclasses.fields(cls)}[name].metadata
    return setting(default, help=inherited["help"] if help is None else help, choices=inherited["choices"],
                   min=inherited["min"], max=inherited["max"], min_exclusive=inherited["min_exclusive"],
                   max_exclusive=inherited["max_exclusive"], same_as=inherited.get("same_as"),
                   per_request=inherited.get("per_request", False), ignored_when=inherited.get("ignored_when"),
                   read_when=inherited.get("read_when"), instead=inherited.get("instead", ""),
                   file=inherited.get("file", False))


class Settings:
    """Base of a component's settings dataclass: its declared choices and bounds, then its validate(), are
    checked whenever an instance is built (a subclass defining __post_init__ calls super().__post_init__())."""

    def __post_init__(self) -> None:
        check_settings(self)

    def validate(self) -> None:  # noqa: B027 - optional rules
        """Rules across several settings that bounds cannot express; raise UserError naming the keys."""

    def decode_time_keys(self) -> set[str]:
        """Keys that `seqxduce decode --set SECTION.KEY=...` may change on a trained run (a model's settings
        name those that leave its parameters as they are, e.g. a Universal Transformer's depth); none by default."""
        return set()

    def planned_vocab_size(self) -> int | None:
        """A tokenizer's vocabulary size as its settings fix it before training (`recipe info`'s estimate of the
        model's size reads it); None when only the trained tokenizer knows (a frequency cut-off)."""
        return None


def request_keys(settings: Any) -> list[str]:
    """The keys of a settings object declared `per_request` whose values are scalars (bool, int, float, str):
    what a `seqxduce serve` request may set. A list or a key without the declaration is never a request's."""
    if not dataclasses.is_dataclass(settings):
        return []
    return sorted(f.name for f in dataclasses.fields(settings)
                  if f.metadata.get("per_request") and isinstance(getattr(settings, f.name), (bool, int, float, str)))


class SettingError(UserError):
    """A value outside its setting's declared choices or bounds; it keeps the key so a recipe can say where."""

    def __init__(self, owner: str, key: str, value: Any, problem: str):
        self.key, self.value, self.problem = key, value, problem
        super().__init__(f"{owner}.{key} = {value!r} {problem}")

    def at(self, where: str) -> str:
        """The message with the setting named as `where` (e.g. `recipe.toml: [model] heads`)."""
        return f"{where} = {self.value!r} {self.problem}"


def check_settings(settings: Any) -> None:
    """Raise SettingError for the first field outside its declared choices or bounds, then run validate()."""
    owner = type(settings).__name__
    for f in dataclasses.fields(settings):
        problem = value_problem(getattr(settings, f.name), f.metadata)
        if problem:
            raise SettingError(owner, f.name, getattr(settings, f.name), problem)
    validate = getattr(settings, "validate", None)
    if callable(validate):
        validate()


def value_problem(value: Any, meta: Mapping[str, Any]) -> str:
    """What is wrong with a value under a setting's declaration ("" when nothing is)."""
    choices = meta.get("choices")
    if choices and value not in choices:
        return f"is not one of {', '.join(map(str, choices))}"
    numbers = value if isinstance(value, list) else [value]
    if any(not _within(v, meta) for v in numbers):
        noun = "numbers" if isinstance(value, list) else "a number"
        return f"is out of range; use {noun} {bounds_text(meta)}"
    return ""


def _within(value: Any, meta: Mapping[str, Any]) -> bool:
    """Whether a number lies within a setting's min/max (anything that is not a number is not bounded)."""
    low, high = meta.get("min"), meta.get("max")
    if (low is None and high is None) or isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if math.isnan(value):
        return False
    if low is not None and (value < low or (value == low and meta.get("min_exclusive"))):
        return False
    return high is None or not (value > high or (value == high and meta.get("max_exclusive")))


def bounds_text(meta: Mapping[str, Any]) -> str:
    """A setting's bounds for messages: ">= 1", "> 0", "<= 1" or "in [0, 1)"."""
    low, high = meta.get("min"), meta.get("max")
    if low is not None and high is not None:
        left, right = "(" if meta.get("min_exclusive") else "[", ")" if meta.get("max_exclusive") else "]"
        return f"in {left}{low:g}, {high:g}{right}"
    if low is not None:
        return f"{'>' if meta.get('min_exclusive') else '>='} {low:g}"
    return f"{'<' if meta.get('max_exclusive') else '<='} {high:g}"


def unread_by(meta: Mapping[str, Any], section: Mapping[str, Any]) -> str:
    """The other key's value under which a setting declared with ignored_when/read_when is not read
    (`schedule = "inverse_sqrt"`), or "" when the section's values take the road that reads it."""
    for key, values in meta.get("ignored_when", {}).items():
        if key in section and section[key] in values:
            return f"{key} = {shown(section[key])}"
    for key, values in meta.get("read_when", {}).items():
        if key in section and section[key] not in values:
            return f"{key} = {shown(section[key])}"
    return ""


def road_keys(meta: Mapping[str, Any]) -> set[str]:
    """The keys a setting's ignored_when/read_when declaration depends on."""
    return {*meta.get("ignored_when", {}), *meta.get("read_when", {})}


def default_of(f: dataclasses.Field) -> Any:
    """A setting's declared default (MISSING when it has none)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def shown(value: Any) -> str:
    """A value as a recipe writes it: "text" quoted, true/false, numbers as they are."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else f"{value!r}"


# ---------------------------------------------------------------- from a recipe's values


def where(source: str, section: str, key: str, overridden: Mapping[str, str]) -> str:
    """Where a value came from, for messages: its --set, or its key in the recipe file."""
    return f"--set {section}.{key}" if key in overridden else f"{source}: [{section}] {key}"


def make_settings(cls: type, values: dict[str, Any], section: str, source: str,
                  overridden: Mapping[str, str] | None = None) -> Any:
    """Build a settings dataclass from a recipe section's values, checking types, required keys and (through
    check_settings) choices, bounds and validate(); errors name the file and section, or the --set.

    overridden maps the keys given by --set to their raw text: their errors name the --set, and a str
    setting takes that text as written (--set task.test_files=2300 is the text "2300", not a number).
    """
    overridden = overridden or {}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise UserError(f"{where(source, section, f.name, overridden)} is required "
                                f"({f.metadata.get('help', '')})")
            continue
        value = values[f.name]
        if f.name in overridden and not isinstance(value, str) and _takes_text(hints[f.name]):
            value = overridden[f.name]
        kwargs[f.name] = _coerce(value, hints[f.name], where(source, section, f.name, overridden))
    try:
        settings = cls(**kwargs)
        if not isinstance(settings, Settings):  # a plain dataclass is checked here, a Settings when built
            check_settings(settings)
    except SettingError as err:
        raise UserError(err.at(where(source, section, err.key, overridden))) from None
    except UserError as err:
        sets = "".join(f" --set {section}.{key}" for key in overridden if key in kwargs)
        origin = f"{source} with{sets}" if sets else source
        raise UserError(f"{origin}: {err}") from None
    return settings


def _takes_text(hint: Any) -> bool:
    """Whether a setting of this type accepts a string (str, or a union with str such as str | None)."""
    union = typing.get_origin(hint) in (typing.Union, getattr(types, "UnionType", None))
    return hint is str or (union and str in typing.get_args(hint))


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """A recipe value as the setting's type (an int is a float where a float is asked), or a UserError."""
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
