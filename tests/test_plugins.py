"""Plugin discovery through entry points, duplicate and unknown names, broken plugins, lazy imports."""

import importlib.metadata
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass

import pytest

from seqxduce import hookimpl, setting
from seqxduce.api import UserError
from seqxduce.registry import PluginLoadError, PluginLoadWarning, Registry, check_hooks, load_entry_points, new_manager
from tests.conftest import plugins_registered

BUILT_IN = {
    "task": {"algorithmic", "translation", "ptb"},
    "tokenizer": {"char", "word", "sentencepiece"},
    "model": {"transformer", "universal_transformer"},
    "decoder": {"greedy", "beam", "tree_beam"},
}


def test_built_in_plugins_come_from_entry_points():
    names = {ep.name for ep in importlib.metadata.entry_points(group="seqxduce")}
    assert {"transformer", "algorithmic", "text", "search", "parsing", "translation", "sentencepiece"} <= names
    reg = Registry(new_manager())
    for kind, expected in BUILT_IN.items():
        assert expected <= set(reg.names(kind)), kind
    assert reg.get("model", "transformer").distribution == "seqxduce"


def test_third_party_package_is_discovered():
    reg = Registry(new_manager())
    sort = reg.get("task", "sort")
    assert sort.distribution == "seqxduce-sort"
    assert sort.plugin == "sort"


@dataclass
class NoSettings:
    size: int = setting(1, help="a number")


class DuplicateModel:
    @hookimpl
    def register_models(self, register):
        register("transformer", lambda settings, vocab: None, settings=NoSettings)


def _with_duplicate(strict: bool) -> Registry:
    pm = new_manager()
    pm.register(DuplicateModel(), name="duplicate")
    return Registry(pm, strict=strict)


def test_a_duplicate_name_skips_the_second_plugin_with_a_warning_naming_both():
    with pytest.warns(PluginLoadWarning, match=r"model 'transformer' is registered twice: by plugin 'transformer' "
                                               r"and by plugin 'duplicate'; the second is skipped"):
        reg = _with_duplicate(strict=False)
    # the first registration stands, and every other component is still there
    assert reg.get("model", "transformer").plugin == "transformer"
    for kind, expected in BUILT_IN.items():
        assert expected <= set(reg.names(kind)), kind


def test_a_duplicate_name_is_an_error_naming_both_plugins_when_strict():
    with pytest.raises(UserError, match=r"model 'transformer' is registered twice.*'transformer'.*'duplicate'"):
        _with_duplicate(strict=True)


def test_commands_keep_working_beside_a_duplicate_name():
    from click.testing import CliRunner

    from seqxduce.cli import cli
    from seqxduce.registry import reset_registry

    with pytest.warns(PluginLoadWarning):
        reg = _with_duplicate(strict=False)
    reset_registry(reg)
    try:
        result = CliRunner().invoke(cli, ["plugins", "--kind", "model"], obj={})
    finally:
        reset_registry(None)
    assert result.exit_code == 0, result.output
    assert "transformer" in result.output and "universal_transformer" in result.output


def test_unknown_name_lists_known_names_and_a_close_match():
    reg = Registry(new_manager())
    with pytest.raises(UserError, match=r"unknown model 'transfomer'.*transformer.*Did you mean 'transformer'"):
        reg.get("model", "transfomer")


class Misspelled:
    @hookimpl
    def register_model(self, register):  # the spec is register_models
        pass


class Unrelated:
    @hookimpl
    def make_everything(self, register):  # close to no hook at all
        pass


def test_misspelled_hook_is_one_user_error_naming_the_plugin_and_the_closest_hook():
    pm = new_manager(entry_points=False)
    pm.register(Misspelled(), name="misspelled")
    with pytest.raises(UserError, match=r"^plugin 'misspelled': it implements register_model, which is no seqxduce "
                                        r"hook; did you mean register_models\?$"):
        check_hooks(pm)


def test_unknown_hook_far_from_any_names_every_hook():
    pm = new_manager(entry_points=False)
    pm.register(Unrelated(), name="unrelated")
    with pytest.raises(UserError, match=r"^plugin 'unrelated': .*make_everything.*; the hooks are register_commands, "
                                        r"register_decoders, register_engines, register_importers, register_models, "
                                        r"register_tasks, register_tokenizers$"):
        check_hooks(pm)


class BrokenEntryPoint:
    name = "broken"
    value = "seqxduce_does_not_exist"
    dist = None

    def load(self):
        raise ImportError("No module named 'seqxduce_does_not_exist'")


def _with_broken(monkeypatch):
    real = importlib.metadata.entry_points

    def entry_points(group):
        return [*real(group=group), BrokenEntryPoint()]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_a_broken_plugin_warns_and_the_rest_keeps_working(monkeypatch):
    _with_broken(monkeypatch)
    pm = new_manager(entry_points=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_entry_points(pm)
    messages = [str(w.message) for w in caught if issubclass(w.category, PluginLoadWarning)]
    assert len(messages) == 1 and "'broken'" in messages[0]
    assert "transformer" in Registry(pm).names("model")


def test_strict_mode_reraises(monkeypatch):
    _with_broken(monkeypatch)
    with pytest.raises(PluginLoadError, match="plugin 'broken'") as caught:
        load_entry_points(new_manager(entry_points=False), strict=True)
    assert isinstance(caught.value.__cause__, ImportError)


@pytest.mark.parametrize("args", [["--help"], ["plugins"], ["recipe", "show", "recipes/quickstart.toml"]])
def test_cli_listing_commands_do_not_import_torch(args):
    code = (
        f"import sys\nfrom seqxduce.cli import main\nsys.argv = ['seqxduce', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=_root())
    assert result.returncode == 0, result.stderr + result.stdout


def _root():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]


class CommandPlugin:
    @hookimpl
    def register_commands(self, cli):
        import click

        @cli.command()
        @click.argument("who")
        def hello(who):
            """Say hello."""
            click.echo(f"hello {who}")


def test_register_commands_adds_a_cli_command():
    from click.testing import CliRunner

    from seqxduce.cli import add_plugin_commands

    with plugins_registered(CommandPlugin()) as reg:
        cli = add_plugin_commands(reg)
        try:
            result = CliRunner().invoke(cli, ["hello", "world"])
            assert result.exit_code == 0, result.output
            assert result.output == "hello world\n"
        finally:
            cli.commands.pop("hello", None)


def test_package_functions_are_not_shadowed_by_modules():
    import seqxduce
    import seqxduce.checkpoint  # noqa: F401
    import seqxduce.decoding.decode  # noqa: F401
    import seqxduce.training.trainer  # noqa: F401

    for name in ("train", "decode", "decode_split", "evaluate", "average", "prepare", "load_recipe"):
        assert callable(getattr(seqxduce, name)), name


def _fake_distribution(tmp_path, module_name: str, module_source: str | None) -> dict[str, str]:
    """An installed-looking distribution on PYTHONPATH whose `seqxduce` entry point names module_name
    (a module written from module_source, or none at all); returns the environment to run it in."""
    dist = tmp_path / "fake_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[seqxduce]\nfake = {module_name}\n")
    if module_source is not None:
        (tmp_path / f"{module_name}.py").write_text(module_source)
    return {**os.environ, "PYTHONPATH": str(tmp_path), "SEQXDUCE_STRICT_PLUGINS": ""}


def _seqxduce(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from seqxduce.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=_root(), env=env)


def test_strict_plugins_flag_turns_a_broken_plugin_into_one_clear_error(tmp_path):
    env = _fake_distribution(tmp_path, "seqxduce_fake_missing_module", None)
    lenient = _seqxduce(["plugins"], env)
    assert lenient.returncode == 0, lenient.stderr
    assert "warning: plugin 'fake'" in lenient.stderr and "transformer" in lenient.stdout
    strict = _seqxduce(["--strict-plugins", "plugins"], env)
    assert strict.returncode == 1
    assert "plugin 'fake' (seqxduce_fake_missing_module) failed to import" in strict.stderr
    assert "Traceback" not in strict.stderr
    debug = _seqxduce(["--debug", "--strict-plugins", "plugins"], env)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_a_misspelled_hook_skips_only_that_plugin_with_one_warning(tmp_path):
    source = "from seqxduce import hookimpl\n\n\n@hookimpl\ndef register_task(register):\n    pass\n"
    env = _fake_distribution(tmp_path, "seqxduce_fake_misspelled", source)
    result = _seqxduce(["plugins"], env)
    assert result.returncode == 0, result.stderr
    warning = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "plugin 'fake'" in warning[0]
    assert "register_task," in warning[0] and "did you mean register_tasks?" in warning[0]
    assert "algorithmic" in result.stdout and "Traceback" not in result.stderr
    strict = _seqxduce(["--strict-plugins", "plugins"], env)
    assert strict.returncode == 1
    assert "plugin 'fake'" in strict.stderr and "did you mean register_tasks?" in strict.stderr
    assert "Traceback" not in strict.stderr


def test_a_plugin_whose_register_hook_fails_is_skipped_with_a_warning(tmp_path):
    source = ("from seqxduce import hookimpl\n\n\n@hookimpl\ndef register_tasks(register):\n"
              "    raise RuntimeError('boom')\n")
    env = _fake_distribution(tmp_path, "seqxduce_fake_failing", source)
    result = _seqxduce(["plugins"], env)
    assert result.returncode == 0, result.stderr
    assert "plugin 'fake' failed in register_tasks" in result.stderr and "boom" in result.stderr
    assert "algorithmic" in result.stdout
    strict = _seqxduce(["--strict-plugins", "plugins"], env)
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    assert "plugin 'fake' failed in register_tasks: RuntimeError: boom" in strict.stderr


class EveryHook:
    """A plugin implementing every hook spec, each registering one thing the test then finds."""

    @hookimpl
    def register_tasks(self, register):
        register("every_task", lambda settings: None, settings=NoSettings)

    @hookimpl
    def register_tokenizers(self, register):
        register("every_tokenizer", lambda settings: None, settings=NoSettings)

    @hookimpl
    def register_models(self, register):
        register("every_model", lambda settings, vocab: None, settings=NoSettings)

    @hookimpl
    def register_decoders(self, register):
        register("every_decoder", lambda settings, tokenizer: None, settings=NoSettings)

    @hookimpl
    def register_importers(self, register):
        register("every_importer", lambda settings: None)

    @hookimpl
    def register_engines(self, register):
        register("every_engine", lambda: None)

    @hookimpl
    def register_commands(self, cli):
        import click

        cli.add_command(click.Command("every-command", callback=lambda: click.echo("ran")))


def test_every_hook_reaches_the_registry_or_the_cli_and_is_documented():
    """As datasette does: a new hook spec fails here until a test plugin implements it and CONTRIBUTING.md names it."""
    from click.testing import CliRunner

    from seqxduce import hookspecs
    from seqxduce.cli import add_plugin_commands

    specs = {name for name in dir(hookspecs) if name.startswith("register_")}
    assert specs == {name for name in dir(EveryHook) if name.startswith("register_")}
    contributing = (_root() / "CONTRIBUTING.md").read_text()
    assert not [hook for hook in specs if hook not in contributing], "hooks missing from CONTRIBUTING.md"
    with plugins_registered(EveryHook()) as reg:
        for kind in ("task", "tokenizer", "model", "decoder", "importer", "engine"):
            assert reg.get(kind, f"every_{kind}").plugin == "test-plugin-0"
        cli = add_plugin_commands(reg)
        try:
            result = CliRunner().invoke(cli, ["every-command"])
            assert result.exit_code == 0 and result.output == "ran\n", result.output
        finally:
            cli.commands.pop("every-command", None)


class WrongFactory:
    @hookimpl
    def register_models(self, register):
        register("not_a_model", lambda settings, vocab: object(), settings=NoSettings)


def test_a_factory_that_returns_no_model_is_one_user_error_naming_the_plugin():
    with plugins_registered(WrongFactory()) as reg:
        component = reg.get("model", "not_a_model")
        with pytest.raises(UserError, match=r"^model 'not_a_model' \(plugin 'test-plugin-0'\): its factory returned "
                                            r"object, not a seqxduce\.api\.Model; fix or uninstall the plugin$"):
            component.build(NoSettings(), None)
