"""Build a recipe's task, tokenizers, model and decoder, and save/load what a run directory holds."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqxduce.api import Decoder, Example, Task, Tokenizer, UserError, VocabInfo
from seqxduce.recipe import Recipe, load_recipe, split_override

RECIPE_FILE = "recipe.toml"
CHECKPOINT_DIR = "checkpoints"
AVERAGE_FILE = "average.pt"
METRICS_FILE = "metrics.jsonl"


def build_task(recipe: Recipe) -> Task:
    """The recipe's task plugin, built from its settings."""
    return recipe.task.component.factory(recipe.task.settings)


def data_dir(recipe: Recipe) -> Path:
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
        )


def _new_tokenizer(recipe: Recipe) -> Tokenizer:
    return recipe.tokenizer.component.factory(recipe.tokenizer.settings)


def _prefixes(shared: bool) -> tuple[str, str]:
    return ("tokenizer", "tokenizer") if shared else ("src_tokenizer", "tgt_tokenizer")


def atomic_write_text(path: Path, text: str) -> None:
    """Write a text file through a temporary file and a rename, so a crash never leaves half of it."""
    path = Path(path)
    part = path.with_name(f".{path.name}.part")
    part.write_text(text, encoding="utf-8")
    os.replace(part, path)


def train_tokenizers(recipe: Recipe, examples: list[Example], run_dir: Path) -> Tokenizers:
    """Train the tokenizer(s) on training text and save them in the run directory.

    The tokenizer plugin saves into a staging folder whose files are then renamed into the run directory,
    so an interrupted save never leaves a half-written tokenizer that a later run would load; files of an
    earlier tokenizer with the same prefix are removed first.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tokenizer-work-", dir=run_dir) as work:
        staging = Path(work) / "saved"
        staging.mkdir()
        tokenizers = _train_tokenizers(recipe, examples, staging, Path(work))
        for prefix in set(_prefixes(tokenizers.shared)):
            for old in run_dir.glob(f"{prefix}*"):
                old.unlink()
        for saved in staging.iterdir():
            os.replace(saved, run_dir / saved.name)
        return tokenizers


def _train_tokenizers(recipe: Recipe, examples: list[Example], save_dir: Path, work: Path) -> Tokenizers:
    shared = recipe.tokenizer.core.shared
    src_prefix, tgt_prefix = _prefixes(shared)
    src = _new_tokenizer(recipe)
    if shared:
        src.train([t for ex in examples for t in (ex.source, ex.target)], work)
        src.save(save_dir, src_prefix)
        _check_specials(src, recipe)
        return Tokenizers(src, src)
    tgt = _new_tokenizer(recipe)
    src.train([ex.source for ex in examples], work)
    tgt.train([ex.target for ex in examples], work)
    src.save(save_dir, src_prefix)
    tgt.save(save_dir, tgt_prefix)
    for tok in (src, tgt):
        _check_specials(tok, recipe)
    return Tokenizers(src, tgt)


def _check_specials(tok: Tokenizer, recipe: Recipe) -> None:
    if len({tok.pad_id, tok.bos_id, tok.eos_id}) != 3:
        raise UserError(f"tokenizer {recipe.tokenizer.component.name!r} must give pad, bos and eos distinct ids")


def load_tokenizers(recipe: Recipe, run_dir: Path) -> Tokenizers:
    """Load the tokenizer(s) saved in a run directory."""
    shared = recipe.tokenizer.core.shared
    src_prefix, tgt_prefix = _prefixes(shared)
    src = _new_tokenizer(recipe)
    src.load(run_dir, src_prefix)
    if shared:
        return Tokenizers(src, src)
    tgt = _new_tokenizer(recipe)
    tgt.load(run_dir, tgt_prefix)
    return Tokenizers(src, tgt)


def tokenizers_saved(recipe: Recipe, run_dir: Path) -> bool:
    prefix = _prefixes(recipe.tokenizer.core.shared)[1]
    return any(p.name.startswith(prefix) and p.is_file() for p in run_dir.iterdir()) if run_dir.is_dir() else False


def build_model(recipe: Recipe, vocab: VocabInfo) -> Any:
    """The recipe's model plugin (a torch.nn.Module implementing seqxduce.api.Model)."""
    return recipe.model.component.factory(recipe.model.settings, vocab)


def build_decoder(recipe: Recipe, tokenizers: Tokenizers) -> Decoder:
    """The recipe's decoder plugin; it sees the target tokenizer for vocabulary-aware constraints."""
    return recipe.decode.component.factory(recipe.decode.settings, tokenizers.tgt)


def load_run_recipe(run_dir: Path, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """The resolved recipe saved in a run directory, with command-line overrides applied."""
    path = Path(run_dir) / RECIPE_FILE
    if not path.is_file():
        raise UserError(f"{run_dir}: not a run directory (no {RECIPE_FILE}); give the --out of `seqxduce train`")
    recipe = load_recipe(path, overrides)
    return recipe


def check_decode_overrides(recipe: Recipe, overrides: list[str] | tuple[str, ...]) -> None:
    """Refuse a `--set model.KEY=...` at decode unless the model plugin names KEY among the settings that may
    change after training (its settings' optional `decode_time_keys()`): any other key would build a model
    that the trained weights do not fit, or, worse, one they fit but that computes something else."""
    keys = [key for section, key, _ in map(split_override, overrides) if section == "model"]
    declared = getattr(recipe.model.settings, "decode_time_keys", None)
    allowed = set(declared()) if callable(declared) else set()
    for key in keys:
        if key not in allowed:
            name = recipe.model.core.name
            known = ", ".join(sorted(allowed)) or "none"
            raise UserError(f"--set model.{key}: model {name!r} cannot change {key} after training; the keys "
                            f"decode can change are: {known}")


def load_model_weights(model: Any, weights: dict[str, Any], checkpoint: Path, recipe_file: Path) -> None:
    """Load a checkpoint's weights into the model, or raise one line naming the first parameter that differs."""
    try:
        model.load_state_dict(weights)
    except RuntimeError:
        raise UserError(f"{checkpoint}: does not fit the model in {recipe_file} ({weights_mismatch(model, weights)}); "
                        "decode with the settings it was trained with") from None


def weights_mismatch(model: Any, weights: dict[str, Any]) -> str:
    """The first parameter a model and saved weights disagree on, in words."""
    expected = model.state_dict()
    for key, value in expected.items():
        if key not in weights:
            return f"{key} is missing from the checkpoint"
        if tuple(weights[key].shape) != tuple(value.shape):
            return f"{key} is {tuple(weights[key].shape)} in the checkpoint, {tuple(value.shape)} in the model"
    extra = next((key for key in weights if key not in expected), None)
    return f"the model has no {extra}" if extra else "the weights do not load"
