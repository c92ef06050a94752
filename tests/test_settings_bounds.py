"""Declared bounds of settings and settings classes' own validate(), checked when a recipe is loaded and when
a settings object is built in Python."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from seqxduce.api import UserError, check_settings, setting
from seqxduce.decoding.search_settings import BeamSettings
from seqxduce.recipe import build_recipe
from seqxduce.registry import registry
from seqxduce.settings import DecodeCore, ModelCore, TaskCore, TokenizerCore, TrainSettings
from seqxduce.settings_check import make_settings

BASE = {
    "task": {"name": "algorithmic", "kind": "reverse"},
    "tokenizer": {"name": "word"},
    "model": {"name": "transformer", "layers": 2, "d_model": 32, "heads": 4},
    "decode": {"name": "beam", "beam": 3},
}


def data() -> dict:
    return {k: dict(v) for k, v in BASE.items()}


# values that crashed training or decoding with a traceback, or were silently accepted
@pytest.mark.parametrize("override, bound", [
    ("train.update_freq=0", ">= 1"),
    ("train.checkpoint_every=0", ">= 1"),
    ("train.log_every=0", ">= 1"),
    ("train.warmup_steps=0", ">= 1"),
    ("train.max_tokens=0", ">= 1"),
    ("train.label_smoothing=1.5", r"in \[0, 1\)"),
    ("train.label_smoothing=1.0", r"in \[0, 1\)"),
    ("train.label_smoothing=-0.1", r"in \[0, 1\)"),
    ("train.label_smoothing=nan", r"in \[0, 1\)"),
    ("train.lr=0", "> 0"),
    ("train.lr_scale=-1", "> 0"),
    ("train.eps=-1e-9", ">= 0"),
    ("train.max_steps=-1", ">= 0"),
    ("train.validate_every=-5", ">= 0"),
    ("decode.batch_size=0", ">= 1"),
    ("decode.beam=0", ">= 1"),
    ("decode.beam=-1", ">= 1"),
    ("decode.nbest=0", ">= 1"),
    ("decode.min_len=-1", r"in \[0, 1e\+06\]"),
    ("decode.alpha=-0.5", r"in \[0, 10\]"),
    # upper bounds: one request or recipe cannot ask for an endless search (issue 37)
    ("decode.alpha=500", r"in \[0, 10\]"),
    ("decode.max_len_b=1000000000000000000", r"in \[-1e\+06, 1e\+06\]"),
    ("decode.max_len_a=1e9", r"in \[0, 1000\]"),
    ("decode.min_len=100000000", r"in \[0, 1e\+06\]"),
])
def test_out_of_range_override_is_one_line_naming_the_set(override, bound):
    dotted, value = override.split("=")
    with pytest.raises(UserError, match=rf"^--set {dotted} = .* is out of range; use a number {bound}$"):
        build_recipe(data(), source="r.toml", overrides=[override])


def test_out_of_range_value_in_the_file_names_file_section_and_key():
    recipe = data()
    recipe["train"] = {"update_freq": 0}
    with pytest.raises(UserError, match=r"^r\.toml: \[train\] update_freq = 0 is out of range; use a number >= 1$"):
        build_recipe(recipe, source="r.toml")
    recipe["train"] = {"betas": [0.9, 1.0]}
    with pytest.raises(UserError, match=r"r\.toml: \[train\] betas = \[0\.9, 1\.0\] .* numbers in \[0, 1\)"):
        build_recipe(recipe, source="r.toml")


def test_zero_means_off_where_the_help_says_so():
    overrides = ["train.validate_every=0", "train.max_epochs=0", "train.average_last=0", "train.max_steps=0",
                 "train.clip_norm=0", "train.label_smoothing=0", "train.valid_decode_examples=0",
                 "decode.beam=1", "decode.nbest=1", "decode.alpha=0", "decode.max_len_b=-2"]
    r = build_recipe(data(), overrides=overrides)
    assert (r.train.validate_every, r.train.max_epochs, r.train.average_last, r.train.max_steps) == (0, 0, 0, 0)
    assert (r.decode.settings.beam, r.decode.settings.nbest, r.decode.settings.max_len_b) == (1, 1, -2)


def test_greedy_and_tree_beam_decoders_are_bounded_too():
    with pytest.raises(UserError, match=r"--set decode.min_len = -1 is out of range"):
        build_recipe(data(), overrides=["decode.name=greedy", "decode.min_len=-1"])
    with pytest.raises(UserError, match=r"--set decode.beam = 0 is out of range"):
        build_recipe(data(), overrides=["decode.name=tree_beam", "decode.beam=0"])


@dataclass
class Bounded:
    count: int = setting(1, help="a count", min=1)
    rate: float = setting(0.5, help="an open interval", min=0.0, max=1.0, min_exclusive=True, max_exclusive=True)
    cap: float = setting(1.0, help="at most one", max=1.0)
    pair: list[float] = setting([0.1, 0.2], help="each in [0, 1]", min=0.0, max=1.0)
    limit: int | None = setting(None, help="optional, but positive when given", min=1)
    flag: bool = setting(False, help="not a number, even though bool is an int", min=1)


@pytest.mark.parametrize("values, message", [
    ({"count": 0}, r"\[s\] count = 0 is out of range; use a number >= 1"),
    ({"rate": 0.0}, r"\[s\] rate = 0\.0 is out of range; use a number in \(0, 1\)"),
    ({"rate": 1}, r"\[s\] rate = 1\.0 is out of range; use a number in \(0, 1\)"),
    ({"cap": 1.5}, r"\[s\] cap = 1\.5 is out of range; use a number <= 1"),
    ({"pair": [0.5, -0.5]}, r"\[s\] pair = \[0\.5, -0\.5\] is out of range; use numbers in \[0, 1\]"),
    ({"limit": 0}, r"\[s\] limit = 0 is out of range; use a number >= 1"),
])
def test_declared_bounds(values, message):
    with pytest.raises(UserError, match=message):
        make_settings(Bounded, values, "s", "f.toml")


def test_values_on_inclusive_bounds_and_none_pass():
    s = make_settings(Bounded, {"count": 1, "rate": 0.25, "cap": 1.0, "pair": [0, 1], "limit": None, "flag": False},
                      "s", "f.toml")
    assert (s.count, s.cap, s.pair, s.limit, s.flag) == (1, 1.0, [0.0, 1.0], None, False)
    assert dataclasses.fields(Bounded)[1].metadata["min_exclusive"] is True


@dataclass
class CrossChecked:
    low: int = setting(1, help="lower end")
    high: int = setting(2, help="upper end")

    def validate(self) -> None:
        if self.high < self.low:
            raise UserError(f"[s] high = {self.high} is below low = {self.low}; raise high")


@dataclass
class PostInitChecked:
    width: int = setting(2, help="an even width")

    def __post_init__(self) -> None:
        if self.width % 2:
            raise UserError(f"[s] width = {self.width}: use an even width")


def test_validate_and_post_init_run_at_load_time_prefixed_by_the_file():
    assert make_settings(CrossChecked, {"low": 3, "high": 3}, "s", "f.toml").high == 3
    with pytest.raises(UserError, match=r"^f\.toml: \[s\] high = 1 is below low = 3; raise high$"):
        make_settings(CrossChecked, {"low": 3, "high": 1}, "s", "f.toml")
    with pytest.raises(UserError, match=r"^f\.toml with --set s\.high: \[s\] high = 1 is below low = 3"):
        make_settings(CrossChecked, {"low": 3, "high": 1}, "s", "f.toml", overridden={"high": "1"})
    with pytest.raises(UserError, match=r"^f\.toml: \[s\] width = 3: use an even width$"):
        make_settings(PostInitChecked, {"width": 3}, "s", "f.toml")


def test_core_cross_check_betas_needs_two_numbers():
    with pytest.raises(UserError, match=r"^r\.toml with --set train\.betas: \[train\] betas = \[0\.9\]: give two"):
        build_recipe(data(), source="r.toml", overrides=["train.betas=[0.9]"])


@pytest.mark.parametrize("section, values, message", [
    ("model", {"heads": 3}, r"r\.toml: \[model\] heads = 3 does not divide d_model = 32"),
    ("model", {"dropout": 1.5}, r"r\.toml: \[model\] dropout = 1\.5 is out of range; use a number in \[0, 1\)"),
    ("model", {"d_model": 33, "heads": 3}, r"r\.toml: \[model\] d_model = 33: use an even width"),
    ("model", {"name": "universal_transformer", "steps": 0}, r"r\.toml: \[model\] steps = 0"),
    ("task", {"valid_min_len": 9, "valid_max_len": 3}, r"r\.toml: \[task\] valid_max_len = 3 is below"),
    ("task", {"symbols": 63}, r"r\.toml: \[task\] symbols = 63 is out of range; use a number in \[2, 62\]"),
])
def test_plugin_checks_run_when_the_recipe_is_loaded(section, values, message):
    recipe = data()
    recipe[section].update(values)
    if section == "model" and values.get("name") == "universal_transformer":
        del recipe["model"]["layers"]
    with pytest.raises(UserError, match=message):
        build_recipe(recipe, source="r.toml")


def test_translation_max_ratio_below_one_would_drop_every_pair():
    recipe = data()
    recipe["task"] = {"name": "translation", "max_ratio": 0.5}
    with pytest.raises(UserError, match=r"r\.toml: \[task\] max_ratio = 0\.5: use 0 \(off\) or a ratio of at least 1"):
        build_recipe(recipe, source="r.toml")
    recipe["task"]["max_ratio"] = 0.0
    assert build_recipe(recipe, source="r.toml").task.settings.max_ratio == 0.0


def _explicit_defaults(cls: type) -> dict:
    """Every field with a default, given explicitly, so that make_settings checks the defaults' bounds too."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def test_every_default_and_preset_is_within_its_own_bounds():
    for cls in (TaskCore, TokenizerCore, ModelCore, DecodeCore, TrainSettings):
        values = _explicit_defaults(cls)
        if "name" in {f.name for f in dataclasses.fields(cls)}:
            values.setdefault("name", "x")  # required: the plugin's name
        make_settings(cls, values, "core", f"defaults of {cls.__name__}")
    for kind, table in registry().tables.items():
        for component in table.values():
            if component.settings is None:
                continue
            defaults = _explicit_defaults(component.settings)
            make_settings(component.settings, defaults, kind, f"defaults of {kind} {component.name}")
            for preset, values in component.presets.items():
                make_settings(component.settings, {**defaults, **values}, kind, f"{component.name} preset {preset}")


@pytest.mark.parametrize("build, message", [
    (lambda: BeamSettings(beam=0), r"^BeamSettings\.beam = 0 is out of range; use a number >= 1$"),
    (lambda: TrainSettings(precision="fp8"), r"^TrainSettings\.precision = 'fp8' is not one of fp32, bf16, fp16$"),
    (lambda: TrainSettings(betas=[0.9]), r"^\[train\] betas = \[0\.9\]: give two numbers"),
])
def test_settings_built_in_python_are_checked_as_a_recipe_is(build, message):
    with pytest.raises(UserError, match=message):
        build()


def test_check_settings_catches_a_value_changed_after_construction():
    settings = BeamSettings()
    settings.alpha = -1.0
    with pytest.raises(UserError, match=r"^BeamSettings\.alpha = -1\.0 is out of range"):
        check_settings(settings)


def test_a_plain_dataclass_is_checked_by_make_settings_alone():
    assert Bounded(count=0).count == 0  # not a Settings: nothing checks it on construction
    with pytest.raises(UserError, match=r"^f\.toml: \[s\] count = 0 is out of range"):
        make_settings(Bounded, {"count": 0}, "s", "f.toml")
