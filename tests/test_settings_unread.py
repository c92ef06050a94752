"""setting(ignored_when=..., read_when=...): a setting that the recipe's road does not read (lr under the paper's
schedule, ACT's keys without ACT, a tokenizer's training options with a given model_file) is refused in one line
naming it, the road and what to use instead; warned about once where a checkout recipe or a run's own recipe
carries it. Checked for every declared setting of every section and installed plugin."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce import recipe as recipe_module
from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.recipe import SECTIONS, build_recipe, load_recipe, read_toml
from seqxduce.registry import registry
from seqxduce.settings_check import default_of, road_keys
from tests.tiny import TINY_RECIPE

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(recipe_module, "_WARNED", set())


def _declared() -> list[tuple[str, str | None, str]]:
    """(section, plugin name or None for the core's keys, key) of every setting declaring its road."""
    found = []
    for section, (kind, core) in SECTIONS.items():
        owners: list[tuple[str | None, type]] = [(None, core)]
        if kind is not None:
            owners += [(name, registry().get(kind, name).settings) for name in registry().names(kind)]
        for name, cls in owners:
            for f in dataclasses.fields(cls) if cls else ():
                if road_keys(f.metadata):
                    found.append((section, name, f.name))
    return found


def _fields(section: str, plugin: str | None) -> dict[str, dataclasses.Field]:
    kind, core = SECTIONS[section]
    classes = [core] + ([registry().get(kind, plugin).settings] if plugin else [])
    return {f.name: f for cls in classes for f in dataclasses.fields(cls)}


def _other_value(f: dataclasses.Field, avoid: tuple = ()) -> object:
    """A value of the setting other than its default (and than avoid), within its choices and bounds."""
    default = default_of(f)
    choices = f.metadata.get("choices")
    if choices:
        return next(c for c in choices if c != default and c not in avoid)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return max(default + 1, 2)  # 0 and 1 are off or too few for some keys (sample_nbest)
    if isinstance(default, float):
        high = f.metadata.get("max")
        bigger = default * 2 if default else 1e-5
        return bigger if high is None or bigger < high else default / 2
    if isinstance(default, list):
        return ["x"]
    return "mine.model" if default == "" else default + "x"


def _toml(value: object) -> str:
    return recipe_module.toml_value(value)


def _tiny_with(section: str, plugin: str | None) -> dict:
    """The tiny recipe with this section's plugin (its other plugin's keys dropped), without the keys of the
    section that are read on one road only (the tiny recipe's warmup_steps, say, under another schedule)."""
    data = read_toml(TINY_RECIPE)
    data.setdefault(section, {})  # a section the tiny recipe leaves to its defaults ([distill])
    if plugin is not None:
        core = {f.name for f in dataclasses.fields(SECTIONS[section][1])}
        data[section] = {k: v for k, v in data[section].items() if k in core} | {"name": plugin}
    fields = _fields(section, plugin)
    data[section] = {k: v for k, v in data[section].items() if k not in fields or not road_keys(fields[k].metadata)}
    return data


# keys that other rules of their settings tie to another key (validate), set along
COMPANIONS = {"target_model_file": {"model_file": "mine.model"}}


def test_every_road_is_declared_on_keys_of_its_own_section_with_what_to_use_instead():
    declared = _declared()
    assert len({section for section, _, _ in declared}) >= 4, declared  # train, model, tokenizer, task, decode
    for section, plugin, key in declared:
        fields = _fields(section, plugin)
        meta = fields[key].metadata
        assert road_keys(meta) <= set(fields), (section, plugin, key)
        assert meta["instead"], f"[{section}] {key} of {plugin or 'the core'} says nothing about what to use"


@pytest.mark.parametrize("section, plugin, key", _declared())
def test_a_set_the_road_does_not_read_is_refused_in_one_line_naming_it_and_the_road(section, plugin, key):
    fields = _fields(section, plugin)
    meta = fields[key].metadata
    road_key = sorted(road_keys(meta))[0]
    ignored, read = meta["ignored_when"].get(road_key), meta["read_when"].get(road_key)
    if ignored:
        road = ignored[0]
    else:
        default = default_of(fields[road_key])
        road = default if default not in read else _other_value(fields[road_key], avoid=read)
    data = _tiny_with(section, plugin)
    data[section].update(COMPANIONS.get(key, {}), **{road_key: road})
    for other in sorted(road_keys(meta) - {road_key}):  # the setting's other roads, where it is read
        read_there, ignored_there = meta["read_when"].get(other), meta["ignored_when"].get(other)
        data[section][other] = read_there[0] if read_there else _other_value(fields[other], avoid=ignored_there)
    overrides = [f"{section}.{key}={_toml(_other_value(fields[key]))}"]
    with pytest.raises(UserError) as err:
        build_recipe(data, source="mine.toml", overrides=overrides)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"--set {section}.{key} = ") and f"not read with [{section}] {road_key} = " in message
    assert message.endswith(meta["instead"])
    # on the road that reads it, the same --set is taken
    if read or road_key in data[section]:
        data[section][road_key] = read[0] if read else default_of(fields[road_key])
        if data[section][road_key] not in (ignored or ()):
            build_recipe(data, source="mine.toml", overrides=overrides)


def test_the_quick_start_refuses_an_lr_that_its_schedule_does_not_read(tmp_path):
    result = CliRunner().invoke(add_plugin_commands(), ["train", str(RECIPES / "quickstart.toml"), "--out",
                                                        str(tmp_path / "run"), "--set", "train.lr=1e-9"])
    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [
        'Error: --set train.lr = 1e-09 is not read with [train] schedule = "inverse_sqrt"; the paper\'s schedule '
        "takes its rate from d_model and warmup_steps: scale it with lr_scale, or choose schedule = \"constant\", "
        '"cosine" or "linear" to set lr']
    assert not (tmp_path / "run").exists()
    assert load_recipe(RECIPES / "quickstart.toml", ["train.lr_scale=0.5"]).train.lr_scale == 0.5


def test_a_users_own_file_carrying_one_is_refused_even_at_its_default_but_a_resolved_recipe_is_not(tmp_path):
    text = (RECIPES / "quickstart.toml").read_text()
    mine = tmp_path / "mine.toml"
    mine.write_text(text.replace("[train]\n", "[train]\nlr = 1e-9\n", 1))
    with pytest.raises(UserError, match=rf"^{mine}: \[train\] lr = 1e-09 is not read with \[train\] schedule"):
        load_recipe(mine)
    # a run's recipe.toml holds every key at its value, the unread ones at their defaults: it loads as a file
    mine.write_text(load_recipe(RECIPES / "quickstart.toml").to_toml())
    assert load_recipe(mine).train.lr == 5e-4
    # but a user's own file that writes the default (fairseq's --lr 5e-4 under inverse_sqrt) chose it: refused
    mine.write_text(text.replace("[train]\n", "[train]\nlr = 0.0005\n", 1))
    with pytest.raises(UserError, match=rf"^{mine}: \[train\] lr = 0.0005 is not read with .*lr_scale"):
        load_recipe(mine)


def test_a_set_that_switches_the_road_away_from_a_files_key_warns_once(capsys):
    loaded = [load_recipe(RECIPES / "multi30k_en_de.toml", ["train.schedule=inverse_sqrt"]) for _ in range(2)]
    assert loaded[0].train.schedule == "inverse_sqrt"
    warned = capsys.readouterr().err.strip().splitlines()
    assert warned == [f"warning: {RECIPES / 'multi30k_en_de.toml'}: [train] lr = 0.0011 is not read with [train] "
                      "schedule = \"inverse_sqrt\" (--set train.schedule=inverse_sqrt); the paper's schedule takes "
                      "its rate from d_model and warmup_steps: scale it with lr_scale, or choose schedule = "
                      "\"constant\", \"cosine\" or \"linear\" to set lr"]


def test_a_checkout_recipe_or_a_runs_own_recipe_carrying_one_warns_and_loads(tmp_path, capsys, monkeypatch):
    checkout = tmp_path / "recipes"
    checkout.mkdir()
    carrying = checkout / "ut.toml"
    carrying.write_text((RECIPES / "ut_copy.toml").read_text().replace("[model]\n", "[model]\nsteps = 8\n", 1))
    monkeypatch.setattr("seqxduce.recipe.SHIPPED_RECIPES", checkout.resolve())
    assert load_recipe(carrying).model.settings.act
    assert "[model] steps = 8 is not read with [model] act = true" in capsys.readouterr().err
    saved = tmp_path / "recipe.toml"
    saved.write_text((RECIPES / "quickstart.toml").read_text().replace("[train]\n", "[train]\nlr = 1e-9\n", 1))
    with pytest.raises(UserError):
        load_recipe(saved)
    assert load_recipe(saved, saved=True).train.lr == 1e-9
    assert "[train] lr = 1e-09 is not read" in capsys.readouterr().err
    with pytest.raises(UserError, match=r"^--set train.lr = 0.001 is not read"):  # a --set is the user's own
        load_recipe(saved, ["train.lr=0.001"], saved=True)


@pytest.mark.parametrize("path", sorted(RECIPES.rglob("*.toml")), ids=lambda p: str(p.relative_to(RECIPES)))
def test_every_recipe_of_the_checkout_loads(path):
    load_recipe(path)


def test_the_shipped_recipes_say_only_what_they_mean(capsys):
    """No recipe we ship gives a setting its road does not read (each would warn on every use)."""
    for recipe in sorted(RECIPES.rglob("*.toml")):
        load_recipe(recipe)
        assert capsys.readouterr().err == "", recipe
