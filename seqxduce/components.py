"""Build a recipe's task, tokenizers, model and decoder; training and decoding assemble them the same way."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from seqxduce.api import Decoder, Example, Model, Settings, Task, Tokenizer, UserError, VocabInfo
from seqxduce.recipe import Recipe, split_override


def build_task(recipe: Recipe) -> Task:
    """The recipe's task plugin, built from its settings."""
    return recipe.task.component.build(recipe.task.settings)


def data_dir(recipe: Recipe) -> Path:
    """Where the recipe's task data lives (relative paths resolve against the recipe's directory)."""
    return recipe.path(recipe.task.core.data_dir)


@dataclass
class Tokenizers:
    """Source and target tokenizers; the same object when the vocabulary is shared."""

    src: Tokenizer
    tgt: Tokenizer

    @property
    def shared(self) -> bool:
        return self.src is self.tgt

    def vocab(self) -> VocabInfo:
        return VocabInfo(
            src_size=self.src.vocab_size,
            tgt_size=self.tgt.vocab_size,
            pad_id=self.tgt.pad_id,
            bos_id=self.tgt.bos_id,
            eos_id=self.tgt.eos_id,
            shared=self.shared,
            src_tokens=tuple(self.src.id_to_token(i) for i in range(self.src.vocab_size)),
        )


def new_tokenizer(recipe: Recipe) -> Tokenizer:
    """An untrained tokenizer of the recipe's tokenizer plugin."""
    return recipe.tokenizer.component.build(recipe.tokenizer.settings)


def train_tokenizers(recipe: Recipe, examples: Iterable[Example], work: Path,
                     reserved: tuple[str, ...] = ()) -> Tokenizers:
    """Train the recipe's tokenizer(s) on training text (one on both sides when the vocabulary is shared). The
    text reaches Tokenizer.train as a stream: examples is iterated once per tokenizer (a list, or a stream that
    reads its files anew), and a tokenizer that needs the text twice keeps its own copy. reserved: the task's
    symbols that each tokenizer keeps whole (Task.reserved_symbols)."""
    src = new_tokenizer(recipe)
    src.reserved_symbols = tuple(reserved)
    if recipe.tokenizer.core.shared:
        src.train((t for ex in examples for t in (ex.source, ex.target)), work)
        tokenizers = Tokenizers(src, src)
    else:
        tgt = new_tokenizer(recipe)
        tgt.reserved_symbols = tuple(reserved)
        src.side, tgt.side = "source", "target"
        src.train((ex.source for ex in examples), work)
        tgt.train((ex.target for ex in examples), work)
        tokenizers = Tokenizers(src, tgt)
    check_special_ids(recipe, tokenizers)
    return tokenizers


def check_special_ids(recipe: Recipe, tokenizers: Tokenizers) -> None:
    """eos must differ from pad and bos; bos may be pad (Marian's and BART's decoders start from the pad token:
    an output never holds either, and no target pad is read but through the causal mask)."""
    for tok in {id(t): t for t in (tokenizers.src, tokenizers.tgt)}.values():
        if tok.eos_id in (tok.pad_id, tok.bos_id):
            raise UserError(f"tokenizer {recipe.tokenizer.component.name!r} must give eos an id of its own "
                            f"(pad {tok.pad_id}, bos {tok.bos_id}, eos {tok.eos_id})")


def build_model(recipe: Recipe, vocab: VocabInfo) -> Model:
    """The recipe's model plugin (a torch.nn.Module implementing seqxduce.api.Model)."""
    return recipe.model.component.build(recipe.model.settings, vocab)


def build_decoder(recipe: Recipe, tokenizers: Tokenizers) -> Decoder:
    """The recipe's decoder plugin; it sees the target tokenizer for vocabulary-aware constraints."""
    return recipe.decode.component.build(recipe.decode.settings, tokenizers.tgt)


@dataclass
class Components:
    """What a recipe builds for training and decoding alike: the task, its tokenizers and a (fresh) model."""

    task: Task
    tokenizers: Tokenizers
    model: Model


def build_components(recipe: Recipe, tokenizers: Tokenizers, task: Task | None = None) -> Components:
    """The recipe's task (unless given), and its model built for these tokenizers' vocabularies."""
    task = build_task(recipe) if task is None else task
    return Components(task, tokenizers, build_model(recipe, tokenizers.vocab()))


# the [train] keys that loading a run for decoding reads: the device and precision it decodes in, and which of a
# multi-member run's members (`--set train.members=1`: the first alone); any other [train] key changes nothing
TRAIN_KEYS_DECODE_READS = ("device", "members", "precision")


def check_decode_overrides(recipe: Recipe, overrides: list[str] | tuple[str, ...]) -> None:
    """Refuse a `--set model.KEY=...` at decode unless the model's settings name KEY among those that may change
    after training (`Settings.decode_time_keys()`): any other key would build a model that the trained weights
    do not fit, or, worse, one they fit but that computes something else. A `--set train.KEY=...` that decoding
    does not read is refused too: it would change nothing, silently (as training refuses a key its road does not
    read)."""
    for section, key, _ in map(split_override, overrides):
        if section == "train" and key not in TRAIN_KEYS_DECODE_READS:
            raise UserError(f"--set train.{key}: decoding does not read [train] {key} (a training setting), so it "
                            f"would change nothing; the [train] keys decoding reads are: "
                            f"{', '.join(TRAIN_KEYS_DECODE_READS)}")
    keys = [key for section, key, _ in map(split_override, overrides) if section == "model"]
    settings = recipe.model.settings
    allowed = settings.decode_time_keys() if isinstance(settings, Settings) else set()
    for key in keys:
        if key not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise UserError(f"--set model.{key}: model {recipe.model.core.name!r} cannot change {key} after "
                            f"training; the keys decode can change are: {known}")
