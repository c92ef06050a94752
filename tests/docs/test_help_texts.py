"""Every command's --help (plugins' commands included) names only flags the command has and recipe keys that
exist: a renamed flag or key must not live on in a help text."""

from __future__ import annotations

import dataclasses
import re

import click
import pytest
from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands
from seqxduce.recipe import SECTIONS
from seqxduce.registry import registry

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
KEY = re.compile(rf"(?<![\w./-])({'|'.join(SECTIONS)})\.([a-z_][a-z0-9_]*)\b")


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
    return found


GROUP = add_plugin_commands()
COMMANDS = _commands(GROUP)


def _flags(*commands: click.Command) -> set[str]:
    return {opt for c in commands for p in c.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--")}


def known_keys() -> dict[str, set[str]]:
    """section -> every key of it: the core's and every installed plugin's of that kind."""
    keys: dict[str, set[str]] = {}
    for section, (kind, core) in SECTIONS.items():
        classes = [core] + [registry().get(kind, n).settings for n in registry().names(kind)] if kind else [core]
        keys[section] = {f.name for cls in classes if cls for f in dataclasses.fields(cls)}
    return keys


def _texts(command: click.Command) -> str:
    """What --help shows of a command, as written (unwrapped): its help and each option's."""
    options = [getattr(p, "help", None) or "" for p in command.params]
    return "\n".join([command.help or "", command.epilog or "", *options])


def _flag_exists(text: str, at: int, flag: str, own: set[str]) -> bool:
    """The flag is the command's own, or another command's named just before it (`decode DIR --engine ...`)."""
    if flag in own:
        return True
    before = text[max(0, at - 60):at]
    named = [c for name, c in COMMANDS if re.search(rf"\b{re.escape(name[-1])}\b", before)]
    return any(flag in _flags(c) for c in named)


@pytest.mark.parametrize("path, command", [((), GROUP), *COMMANDS],
                         ids=lambda v: " ".join(v) or "seqxduce" if isinstance(v, tuple) else "")
def test_a_help_text_names_only_flags_and_recipe_keys_that_exist(path, command):
    assert CliRunner().invoke(GROUP, [*path, "--help"]).exit_code == 0
    parents = [GROUP] + ([GROUP.commands[path[0]]] if len(path) > 1 else [])
    own = _flags(command, *parents) | {"--help", "--version"}
    text = _texts(command)
    wrong = sorted({m.group() for m in FLAG.finditer(text) if not _flag_exists(text, m.start(), m.group(), own)})
    assert not wrong, f"`seqxduce {' '.join(path)} -h` names flags that no command it names has: {wrong}"
    keys = known_keys()
    unknown = sorted(f"{s}.{k}" for s, k in KEY.findall(text) if k not in keys[s])
    assert not unknown, f"`seqxduce {' '.join(path)} -h` names recipe keys that do not exist: {unknown}"


def test_the_set_example_of_a_command_that_does_not_train_is_not_a_training_key():
    for path in (("score",), ("evaluate",), ("prepare",)):
        shown = CliRunner().invoke(GROUP, [*path, "--help"]).output
        assert "train.max_steps" not in shown, path


def test_the_check_sees_a_flag_or_a_key_that_does_not_exist():
    text = "see decode --beam and train --no-such-flag, with --set train.max_steps=1 or train.no_such_key=1"
    flags = [m.group() for m in FLAG.finditer(text) if not _flag_exists(text, m.start(), m.group(), {"--set"})]
    assert flags == ["--no-such-flag"]
    assert [k for s, k in KEY.findall(text) if k not in known_keys()[s]] == ["no_such_key"]
