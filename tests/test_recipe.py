"""Recipe validation: every key checked against what its plugin declares, with clear messages."""

from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce import hookimpl
from seqxduce.api import UserError, setting
from seqxduce.cli import cli
from seqxduce.recipe import build_recipe, differences, load_recipe, parse_override
from tests.conftest import plugins_registered

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


@pytest.mark.parametrize("decoder", ["greedy", "sampling"])
def test_switching_the_decoder_keeps_the_limits_every_search_shares(decoder):
    """An imported run's [decode] (beam, its own length limit): another decoder keeps the limit, as --beam 1 does,
    and leaves the beam's own keys (a sampling decoder's nbest is another setting of the same name)."""
    data = recipe(decode__max_len_a=0.0, decode__max_len_b=510, decode__min_len=2, decode__nbest=2, decode__beam=4)
    r = build_recipe(data, overrides=[f"decode.name={decoder}"])
    settings = r.decode.settings
    assert (settings.max_len_a, settings.max_len_b, settings.min_len) == (0.0, 510, 2)
    assert not hasattr(settings, "beam") and getattr(settings, "nbest", 1) == 1


@dataclass
class ScratchSettings:
    limit: int | None = setting(None, help="an optional limit (none = no limit)")
    cap: int | None = setting(5, help="an optional cap whose default is not None")
    label: str = setting("x", help="a text setting")
    tag: str | None = setting(None, help="an optional text")
    names: list[str] = setting([], help="a list of texts")


class ScratchTask:
    @hookimpl
    def register_tasks(self, register):
        register("scratch", lambda settings: None, settings=ScratchSettings, help="a task for recipe tests")


def scratch_recipe() -> dict:
    return {**recipe(), "task": {"name": "scratch"}}


@pytest.mark.parametrize("overrides", [[], ["task.cap=none"], ["task.limit=3", "task.cap=none", "task.tag=t"]])
def test_optional_settings_round_trip_through_the_written_recipe(tmp_path, overrides):
    with plugins_registered(ScratchTask()) as reg:
        r = build_recipe(scratch_recipe(), overrides=overrides, reg=reg)
        text = r.to_toml()
        (tmp_path / "again.toml").write_text(text)
        again = load_recipe(tmp_path / "again.toml", reg=reg)
    assert again.resolved() == r.resolved()
    if not overrides:
        assert "# limit = (unset)  # an optional limit" in text and again.task.settings.limit is None
    if "task.cap=none" in overrides:
        assert 'cap = "none"' in text and again.task.settings.cap is None


def test_recipe_show_writes_optional_settings(tmp_path):
    path = tmp_path / "scratch.toml"
    path.write_text('[task]\nname = "scratch"\n[tokenizer]\nname = "word"\n[model]\nname = "transformer"\n')
    with plugins_registered(ScratchTask()):
        result = CliRunner().invoke(cli, ["recipe", "show", str(path), "--set", "task.cap=none"], obj={})
    assert result.exit_code == 0, result.output
    assert "# limit = (unset)" in result.output and 'cap = "none"' in result.output


def test_a_str_setting_takes_the_raw_text_of_an_override():
    with plugins_registered(ScratchTask()) as reg:
        r = build_recipe(scratch_recipe(), overrides=["task.label=2300", "task.tag=true"], reg=reg)
        assert (r.task.settings.label, r.task.settings.tag) == ("2300", "true")
        r = build_recipe(scratch_recipe(), overrides=['task.label="2300-2399"', 'task.names=["a", "b"]'], reg=reg)
        assert (r.task.settings.label, r.task.settings.names) == ("2300-2399", ["a", "b"])


def test_errors_from_an_override_name_the_set_not_the_file():
    with pytest.raises(UserError, match=r"^--set train\.max_steps must be an int, got 'many' \(str\)$"):
        build_recipe(recipe(), source="my.toml", overrides=["train.max_steps=many"])
    with pytest.raises(UserError, match=r"^--set train\.precision = 'fp8' is not one of"):
        build_recipe(recipe(), source="my.toml", overrides=["train.precision=fp8"])
    with pytest.raises(UserError, match=r"^--set model\.d_modle: unknown key \[model\] d_modle"):
        build_recipe(recipe(), source="my.toml", overrides=["model.d_modle=64"])
    with pytest.raises(UserError, match=r"^--set trian\.max_steps: unknown section \[trian\]"):
        build_recipe(recipe(), source="my.toml", overrides=["trian.max_steps=1"])
    with pytest.raises(UserError, match=r"^--set model\.name: unknown model 'transformr'"):
        build_recipe(recipe(), source="my.toml", overrides=["model.name=transformr"])
    with pytest.raises(UserError, match=r"^my\.toml: \[train\] max_steps must be an int"):
        build_recipe(recipe(train__max_steps="many"), source="my.toml", overrides=["train.seed=3"])


def test_a_directory_is_not_a_recipe(tmp_path):
    with pytest.raises(UserError, match=r"is a directory; give a recipe file$"):
        load_recipe(tmp_path)
    (tmp_path / "recipe.toml").write_text("")
    with pytest.raises(UserError, match=r"is a directory; give a recipe file, e\.g\. .*recipe\.toml$"):
        load_recipe(tmp_path)
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UserError, match=r"binary\.toml: not a UTF-8 text file"):
        load_recipe(tmp_path / "binary.toml")


@pytest.mark.parametrize("args, message", [
    ([str(ROOT / "recipes")], "recipes: is a directory; give a recipe file"),
    ([str(ROOT / "recipes" / "quickstart.toml"), "--set", "decode.beam=0"],
     "--set decode.beam = 0 is out of range; use a number >= 1"),
    ([str(ROOT / "recipes" / "quickstart.toml"), "--set", "model.heads=3"],
     "quickstart.toml with --set model.heads: [model] heads = 3 does not divide d_model = 128"),
])
def test_recipe_show_rejects_with_one_line(args, message):
    result = CliRunner().invoke(cli, ["recipe", "show", *args], obj={})
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.count("\n") == 1 and message in result.output, result.output


def test_a_data_dir_is_compared_as_the_folder_it_names(tmp_path):
    # a run's saved recipe keeps its data folder as written from the recipe's place (`/work/main/recipes/../data`):
    # the same recipe from a clone of the work tree (`/work/clone/recipes/../../work/data`) names the same folder
    (tmp_path / "data").mkdir()
    (tmp_path / "other").mkdir()
    first = build_recipe(recipe(task__data_dir="../data"), base_dir=tmp_path / "main")
    saved = first.relocated(tmp_path / "run")
    assert ".." in saved.task.core.data_dir
    clone = build_recipe(recipe(task__data_dir="../../data"), base_dir=tmp_path / "clone" / "recipes")
    assert differences(clone, saved) == []
    moved = build_recipe(recipe(task__data_dir="../other"), base_dir=tmp_path / "main")
    assert [line.split(":")[0] for line in differences(moved, saved)] == ["[task] data_dir"]


def test_every_shipped_student_recipe_learns_its_teachers_task_with_its_tokenizer():
    """A student recipe naming its teacher's recipe ([distill] teacher) has that recipe's [task] and [tokenizer]
    key for key: the teacher's outputs are targets of the same task, and the student takes the teacher's tokenizer
    files (distillation.teacher.same_tokenizer)."""
    students = []
    for path in sorted((ROOT / "recipes").glob("*.toml")):
        student = load_recipe(path)
        if student.distill.teacher:
            teacher = load_recipe(student.path(student.distill.teacher)).resolved()
            for section in ("task", "tokenizer"):
                assert student.resolved()[section] == teacher[section], (path.name, section)
            students.append(path.name)
    assert students == ["multi30k_en_de_student.toml", "ptb_sample_student.toml"]
