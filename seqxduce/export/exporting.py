"""Exporting a trained run for another inference engine: `seqxduce export RUN --to ctranslate2 -o DIR`, or as a
Hugging Face transformers folder: `seqxduce export RUN --to huggingface -o DIR`.

The core knows the run (checkpoint, members, recipe, tokenizer files); only the model plugin knows its weights'
layout, so the weights are written by Model.export (seqxduce.api), and a model without it is refused. DIR then
holds the engine's files, the run's tokenizer files and recipe (so that `seqxduce decode DIR --engine
ctranslate2` runs the task's own pipeline, ct2_decoding.py) and METADATA_FILE: what was exported, from where.

With --to huggingface the model plugin writes config.json, model.safetensors, generation_config.json (from the
run's [decode]) and the vocabularies, each side's tokenizer plugin its files (Tokenizer.export: source.spm,
target.spm), and this module the model card, README.md (recipe, data, figures, the command); the folder loads
with MarianMTModel.from_pretrained and MarianTokenizer.from_pretrained (or the Auto classes), with no seqxduce
code. A model or tokenizer its plugin cannot export exactly is refused before the folder appears.

A run trained with `[train] members = N` is exported one member at a time (--member K): the members start from
different random initialisations, so their weights are not aligned unit for unit and averaging them would give
a model that is none of them (checkpoint averaging works along one run only); CTranslate2 has no ensemble of
separately trained models either.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from seqxduce.api import ExportRequest, UserError

ENGINES = ("ctranslate2", "huggingface")
QUANTIZATIONS = ("none", "int8", "int8_float32", "float16")
METADATA_FILE = "seqxduce_export.json"
INSTALL_HINT = "pip install -e '.[ctranslate2]' in the seqxduce checkout"
# CTranslate2's search as its engine declares it (ct2_engine.py), here where the engine's module reads it without
# torch: the [decode] keys translate_ids (ct2_decoding.py) reads, besides the core's batch_size and precision...
HONOURED = frozenset({"beam", "alpha", "length_penalty", "nbest", "max_len_a", "max_len_b", "min_len"})
# ...and the settings it acts as if they held these values: no renormalized steps, the eos at the limit scored,
# and the default stopping rule (docs/coming-from.md, "Stopping rules": what its own search does)
ACTS_AS = {"renormalize": False, "limit_eos": "scored", "early_stopping": "never", "early_stop": False}


@dataclass
class Exported:
    """What export_run wrote: the folder and its metadata."""

    directory: Path
    metadata: dict


def require_ctranslate2():
    """The ctranslate2 module, or a UserError saying which extra installs it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"the ctranslate2 package is not installed; install the extra: {INSTALL_HINT}") from None
    return ctranslate2


def is_export(path: Path | str) -> bool:
    """Whether path is a folder written by export_run."""
    return (Path(path) / METADATA_FILE).is_file()


def check_engine(path: Path | str, engine: str) -> None:
    """Refuse, in one line, an export folder written for another engine than the one about to load it."""
    written = json.loads((Path(path) / METADATA_FILE).read_text(encoding="utf-8")).get("engine", "ctranslate2")
    if written != engine:
        hint = (" (load it with transformers' from_pretrained, or `seqxduce import DIR --from marian -o RUN`)"
                if written == "huggingface" else "")
        raise UserError(f"{path}: an export for {written}, not {engine}{hint}; export the run with --to {engine}")


def export_run(run: Path | str, out: Path | str, engine: str = "ctranslate2", quantization: str = "none",
               member: int | None = None, overwrite: bool = False) -> Exported:
    """Export the checkpoint that decoding a run uses (its average if any, else its newest) into folder `out`."""
    from seqxduce import checkpoint as ckpt
    from seqxduce import components
    from seqxduce.rundir import locate

    if engine not in ENGINES:
        raise UserError(f"--to {engine}: seqxduce exports to {', '.join(ENGINES)}")
    if quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization {quantization}: choose one of {', '.join(QUANTIZATIONS)}")
    engine_version = require_ctranslate2().__version__ if engine == "ctranslate2" else _version("transformers")
    out = Path(out)
    _check_output(out, overwrite)
    rundir, checkpoint = locate(_member_path(Path(run), member))
    recipe = rundir.load_recipe(["train.members=1"] if member else [])
    built = components.build_components(recipe, rundir.tokenizers.load(recipe))
    state = ckpt.load(checkpoint)
    ckpt.load_weights(built.model, state["model"], checkpoint,
                      f"export with the recipe it was trained with ({rundir.recipe_file})")
    built.model.eval()
    src, tgt = built.tokenizers.src, built.tokenizers.tgt
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as work:
        staging = Path(work) / "export"
        staging.mkdir()
        request = ExportRequest(engine, staging, _tokens(src, "source"), _tokens(tgt, "target"),
                                tgt.pad_id, tgt.bos_id, tgt.eos_id, tgt.unk_id, quantization,
                                decoder=recipe.decode.core.name, search=recipe.decode.settings)
        if not built.model.export(request):
            raise UserError(f"[model] name = {recipe.model.core.name!r}: its plugin offers no export to {engine}")
        if engine == "huggingface":
            for tokenizer, side in ((src, "source"), (tgt, "target")):
                if not tokenizer.export(engine, staging, side):
                    raise UserError(f"[tokenizer] name = {recipe.tokenizer.core.name!r}: its plugin offers no export "
                                    "to huggingface (MarianTokenizer reads SentencePiece models: train the run "
                                    "with [tokenizer] name = \"sentencepiece\")")
        for path in rundir.tokenizers.files(recipe):
            shutil.copy2(path, staging / path.name)
        rundir_of_export = type(rundir)(staging)
        rundir_of_export.write_recipe(recipe)
        metadata = {
            "engine": engine, "quantization": quantization, "run": str(rundir.path.resolve()),
            "member": member, "checkpoint": str(checkpoint.resolve()), "step": int(state.get("step", 0)),
            "averaged_steps": state.get("averaged_steps"), "model": recipe.model.core.name,
            "seqxduce_version": _version(), f"{engine}_version": engine_version, "notes": request.notes,
            "recipe": rundir_of_export.recipe_file.name,
            "tokenizer_files": [p.name for p in rundir.tokenizers.files(recipe)],
        }
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
        if engine == "huggingface":
            from seqxduce.export.model_card import model_card

            (staging / "README.md").write_text(model_card(rundir.path, recipe, metadata, member), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)  # the folder appears whole or not at all
    return Exported(out, metadata)


def _member_path(run: Path, member: int | None) -> Path:
    """The run directory (or checkpoint) to export: member K's of an ensemble run, refused without --member."""
    from seqxduce.members import member_dir
    from seqxduce.rundir import RunDir

    if not run.is_dir() or not RunDir(run).recipe_file.is_file():
        if member:
            raise UserError(f"--member {member}: {run} is a checkpoint; name the run directory")
        return run
    count = RunDir(run).load_recipe().train.members
    if member is None:
        if count > 1:
            raise UserError(f"{run}: [train] members = {count}; export one member with --member K (1..{count}): "
                            "independently trained members cannot be averaged into one model")
        return run
    if not 1 <= member <= count:
        raise UserError(f"--member {member}: {run} has members 1..{count}")
    return member_dir(run, member)


def _check_output(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--output {out}: a file; name a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"--output {out}: not empty; name a new folder or pass --overwrite")
    if out.is_dir() and any(out.iterdir()) and not is_export(out):
        raise UserError(f"--output {out}: holds files that are not an export; --overwrite replaces exports only")


def _tokens(tokenizer, side: str) -> tuple[str, ...]:
    """The vocabulary by id; an engine maps entries back to ids, so they must be distinct."""
    tokens = tuple(tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size))
    if len(set(tokens)) != len(tokens):
        seen: set[str] = set()
        twice = next(t for t in tokens if t in seen or seen.add(t))
        raise UserError(f"the {side} vocabulary spells {twice!r} twice; an engine finds ids by entry, so it "
                        "cannot be exported")
    return tokens


def _version(package: str = "seqxduce") -> str:
    # the installed distribution's metadata, not `seqxduce.__version__`: the package face would import the whole
    # public API (engine, api, ...) under export
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:  # run from a source tree without installing: say so rather than guess
        return "unknown (not installed)"
