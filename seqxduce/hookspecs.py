"""The hooks a seqxduce plugin can implement. Each receives a `register` callback (or the click group).

register(name, factory, settings=SettingsClass, presets={...}, help="...") records one component; the factory's
contract is seqxduce.api.TaskFactory, TokenizerFactory, ModelFactory or DecoderFactory, and what it returns must
be an instance of seqxduce.api.Task, Tokenizer, Model or Decoder. An engine's factory takes no argument and returns
a seqxduce.decoding.engines.Engine (the core's own two register through register_engines too).
"""

from pluggy import HookimplMarker, HookspecMarker

hookspec = HookspecMarker("seqxduce")
hookimpl = HookimplMarker("seqxduce")


@hookspec
def register_tasks(register):
    """Register tasks: register(name, factory(settings) -> Task, settings=SettingsClass, help="...")."""


@hookspec
def register_tokenizers(register):
    """Register tokenizers: register(name, factory(settings) -> Tokenizer, settings=SettingsClass, help="...")."""


@hookspec
def register_models(register):
    """Register models: register(name, factory(settings, vocab) -> Model, settings=..., presets={...}, help=...)."""


@hookspec
def register_decoders(register):
    """Register decoders: register(name, factory(settings, tokenizer) -> Decoder, settings=..., help="...")."""


@hookspec
def register_importers(register):
    """Register importers of other toolkits' models: register(name, factory(settings) -> Importer, help="...")."""


@hookspec
def register_engines(register):
    """Register inference engines for decode, score and serve: register(name, factory() -> Engine, help="...")."""


@hookspec
def register_commands(cli):
    """Add click commands to the `seqxduce` group."""
