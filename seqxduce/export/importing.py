"""`seqxduce import DIR --from NAME -o RUN`: a model trained by another toolkit as a seqxduce run directory.

The importer plugin registered as NAME reads the folder into an ImportedModel (seqxduce.api): a recipe, where
each side's tokenizer loads from, and the model's weights. The core does the rest as for a trained run, so that
every command reads the result as one: it loads the tokenizers through the recipe's tokenizer plugin and saves
them as training would, builds the model through the recipe's model plugin and loads the weights into it
strictly (a tensor missing, extra or of another shape is refused, never left at its initial value), then writes
one checkpoint and the recipe. Nothing here knows any model or toolkit.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from seqxduce import checkpoint, components
from seqxduce.api import UserError
from seqxduce.atomic import replace_durably
from seqxduce.recipe import Recipe, build_recipe
from seqxduce.registry import Registry, registry
from seqxduce.rundir import RunDir
from seqxduce.tokenizer_files import TOKENIZER_WORK_PREFIX, tokenizer_prefixes


def import_model(source: str | Path, name: str, out: str | Path, overwrite: bool = False,
                 reg: Registry | None = None) -> tuple[Path, list[str]]:
    """Import the model folder `source` with the importer plugin `name` into the run directory `out`; returns
    the run directory and the importer's notes (what it mapped to what)."""
    reg = reg or registry()
    component = reg.get("importer", name)
    source = Path(source)
    if not source.is_dir():
        raise UserError(f"import {source}: no such folder; give the folder of the model to import")
    run = RunDir(out)
    run.check_start(resume=False, overwrite=overwrite, resumable=False)
    importer = component.build(component.settings() if component.settings else None)
    with tempfile.TemporaryDirectory(prefix="seqxduce-import-") as work:
        imported = importer.read(source, Path(work))
        recipe = build_recipe(imported.recipe, source=f"import --from {name} {source}", base_dir=run.path.resolve(),
                              reg=reg)
        tokenizers = _load_tokenizers(recipe, imported.tokenizers, name)
        model = components.build_model(recipe, tokenizers.vocab())
        checkpoint.load_weights(model, imported.weights, f"import --from {name} {source}",
                                f"the {name!r} importer and the {recipe.model.core.name!r} model plugin disagree; "
                                "report it to the importer's plugin")
        run.open(overwrite)
        _save_tokenizers(run, tokenizers)
        state = {"model": model.state_dict(), "step": 0, "run_id": uuid.uuid4().hex,
                 "imported_from": str(source.resolve()), "importer": name}
        checkpoint.atomic_save(state, run.step_path(0))
    run.write_recipe(recipe)
    return run.path, list(imported.notes)


def _load_tokenizers(recipe: Recipe, places: dict[str, tuple[Path, str]], name: str) -> components.Tokenizers:
    """Each side's tokenizer loaded through the recipe's tokenizer plugin from where the importer staged it."""
    shared = recipe.tokenizer.core.shared
    sides = ("src",) if shared else ("src", "tgt")
    missing = [side for side in sides if side not in places]
    if missing:
        raise UserError(f"importer {name!r} gave no {missing[0]} tokenizer for [tokenizer] shared = "
                        f"{str(shared).lower()}; report it to the importer's plugin")
    loaded = []
    for side in sides:
        tokenizer = components.new_tokenizer(recipe)
        folder, prefix = places[side]
        tokenizer.load(Path(folder), prefix)
        loaded.append(tokenizer)
    tokenizers = components.Tokenizers(loaded[0], loaded[0] if shared else loaded[1])
    components.check_special_ids(recipe, tokenizers)
    return tokenizers


def _save_tokenizers(run: RunDir, tokenizers: components.Tokenizers) -> None:
    """The tokenizer files under the run directory's prefixes, staged then renamed as training saves them."""
    with tempfile.TemporaryDirectory(prefix=TOKENIZER_WORK_PREFIX, dir=run.path) as work:
        staging = Path(work)
        src_prefix, tgt_prefix = tokenizer_prefixes(tokenizers.shared)
        tokenizers.src.save(staging, src_prefix)
        if not tokenizers.shared:
            tokenizers.tgt.save(staging, tgt_prefix)
        for saved in staging.iterdir():
            replace_durably(saved, run.path / saved.name)
