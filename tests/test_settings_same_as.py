"""setting(same_as="section.key"): a key that must repeat another section's is refused in one line when it differs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from seqxduce import hookimpl
from seqxduce.api import Settings, UserError, setting, setting_like
from seqxduce.decoding.search_settings import BeamSettings
from seqxduce.recipe import build_recipe
from seqxduce.testing import plugins_registered


@dataclass
class ModeTaskSettings(Settings):
    mode: str = setting("a", help="how the target is written", choices=("a", "b"))


@dataclass
class ModeDecoderSettings(BeamSettings):
    mode: str = setting("a", help="the task's mode", choices=("a", "b"), same_as="task.mode")


@dataclass
class LaterDecoderSettings(ModeDecoderSettings):
    mode: str = setting_like(ModeDecoderSettings, "mode", "b")  # a subclass changing the default keeps the rule


class ModePlugin:
    @hookimpl
    def register_tasks(self, register):
        register("mode_task", lambda s: None, settings=ModeTaskSettings)

    @hookimpl
    def register_decoders(self, register):
        register("mode_beam", lambda s, t: None, settings=ModeDecoderSettings)
        register("later_beam", lambda s, t: None, settings=LaterDecoderSettings)


def recipe(task_mode: str | None, decoder: str = "mode_beam", decoder_mode: str | None = None, overrides=()):
    task = {"name": "mode_task", **({"mode": task_mode} if task_mode else {})}
    decode = {"name": decoder, **({"mode": decoder_mode} if decoder_mode else {})}
    data = {"task": task, "tokenizer": {"name": "word"}, "model": {"name": "transformer"}, "decode": decode}
    return build_recipe(data, source="r.toml", overrides=overrides)


@pytest.fixture(autouse=True)
def registered():
    with plugins_registered(ModePlugin()):
        yield


def test_the_same_value_in_both_sections_loads():
    assert recipe("b", decoder_mode="b").decode.settings.mode == "b"
    assert recipe(None).decode.settings.mode == "a"  # both defaults


@pytest.mark.parametrize("kwargs, overrides, named", [
    ({"task_mode": "b"}, (), ["r.toml: [decode] mode", "r.toml: [task] mode"]),  # a default against a value
    ({"task_mode": "a", "decoder_mode": "a"}, ("decode.mode=b",), ["--set decode.mode", "[task] mode"]),
    ({"task_mode": None, "decoder": "later_beam"}, (), ['"b"', '"a"']),  # the subclass's default b against a
])
def test_a_difference_is_one_error_naming_both_keys(kwargs, overrides, named):
    with pytest.raises(UserError) as caught:
        recipe(**kwargs, overrides=overrides)
    message = str(caught.value)
    assert "\n" not in message and "must be the same" in message
    assert all(part in message for part in named), message


def test_no_rule_where_the_other_section_has_no_such_key():
    data = {"task": {"name": "mode_task", "mode": "b"}, "tokenizer": {"name": "word"},
            "model": {"name": "transformer"}, "decode": {"name": "beam"}}
    assert build_recipe(data, source="r.toml").task.settings.mode == "b"
