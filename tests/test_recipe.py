"""Recipe validation: every key checked against what its plugin declares, with clear messages."""

from pathlib import Path

import pytest

from seqxduce.api import UserError
from seqxduce.recipe import build_recipe, load_recipe, parse_override

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "task": {"name": "algorithmic", "kind": "reverse"},
    "tokenizer": {"name": "word"},
    "model": {"name": "transformer", "layers": 2, "d_model": 32},
    "decode": {"name": "beam", "beam": 3},
}


def recipe(**changes):
    data = {k: dict(v) for k, v in BASE.items()}
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data.setdefault(section, {})[key] = value
    return data


def test_valid_recipe_resolves_with_defaults():
    r = build_recipe(recipe())
    assert r.model.settings.d_model == 32
    assert r.decode.settings.beam == 3
    assert r.decode.settings.alpha == 0.6
    assert r.train.betas == [0.9, 0.98] and r.train.eps == 1e-9


def test_unknown_key_names_key_file_and_close_match():
    with pytest.raises(UserError, match=r"my\.toml: unknown key \[model\] d_modle.*Did you mean 'd_model'"):
        build_recipe(recipe(model__d_modle=64), source="my.toml")


def test_wrong_type_names_the_key():
    with pytest.raises(UserError, match=r"\[model\] layers must be an int, got 'two'"):
        build_recipe(recipe(model__layers="two"))
    with pytest.raises(UserError, match=r"\[train\] max_steps must be an int"):
        build_recipe(recipe(train__max_steps=1.5))


def test_unknown_plugin_lists_choices():
    with pytest.raises(UserError, match=r"\[model\] name: unknown model 'transformr'.*Did you mean 'transformer'"):
        build_recipe(recipe(model__name="transformr"))


def test_unknown_section_and_bad_choice():
    with pytest.raises(UserError, match=r"unknown section \[trian\]"):
        build_recipe({**recipe(), "trian": {}})
    with pytest.raises(UserError, match=r"\[train\] precision = 'fp8' is not one of fp32, bf16, fp16"):
        build_recipe(recipe(train__precision="fp8"))


def test_missing_name_is_required():
    data = recipe()
    del data["model"]["name"]
    with pytest.raises(UserError, match=r"\[model\] needs name"):
        build_recipe(data)


def test_overrides_apply_and_are_typed():
    r = build_recipe(recipe(), overrides=["train.max_steps=7", "decode.alpha=0.3", "task.kind=copy"])
    assert r.train.max_steps == 7 and r.decode.settings.alpha == 0.3 and r.task.settings.kind == "copy"
    assert parse_override("train.betas=[0.9, 0.997]") == ("train", "betas", [0.9, 0.997])
    with pytest.raises(UserError, match="section.key=value"):
        parse_override("max_steps=3")


def test_presets_give_defaults_that_keys_override():
    r = build_recipe(recipe(model__preset="big"))
    assert r.model.settings.heads == 16 and r.model.settings.d_model == 32  # explicit key wins
    with pytest.raises(UserError, match=r"preset 'huge'.*known: base, big"):
        build_recipe(recipe(model__preset="huge"))


def test_resolved_recipe_round_trips_through_toml(tmp_path):
    r = load_recipe(ROOT / "recipes" / "quickstart.toml")
    text = r.to_toml()
    assert "# source+target tokens per batch" in text
    (tmp_path / "again.toml").write_text(text)
    again = load_recipe(tmp_path / "again.toml")
    assert again.resolved() == r.resolved()


def test_every_shipped_recipe_validates():
    for path in sorted((ROOT / "recipes").glob("*.toml")):
        load_recipe(path)


def test_switching_a_plugin_with_set_drops_the_old_plugins_keys():
    r = build_recipe(recipe(), overrides=["decode.name=greedy", "decode.max_len_b=7"])
    assert r.decode.component.name == "greedy" and r.decode.settings.max_len_b == 7
    assert not hasattr(r.decode.settings, "beam")
