"""The hooks a seqxduce plugin can implement. Each receives a `register` callback."""

from pluggy import HookimplMarker, HookspecMarker

hookspec = HookspecMarker("seqxduce")
hookimpl = HookimplMarker("seqxduce")


@hookspec
def register_tasks(register):
    """Register tasks: register(name, factory, settings=SettingsClass, help="...")."""


@hookspec
def register_tokenizers(register):
    """Register tokenizers: register(name, factory, settings=SettingsClass, help="...")."""


@hookspec
def register_models(register):
    """Register models: register(name, factory, settings=SettingsClass, presets={...}, help="...")."""


@hookspec
def register_decoders(register):
    """Register decoders: register(name, factory, settings=SettingsClass, help="...")."""


@hookspec
def register_commands(cli):
    """Add click commands to the `seqxduce` group."""
