"""The `marian` importer: a Hugging Face Marian folder -> recipe, tokenizer files and Transformer weights.

The decoder starts from config.json's decoder_start_token_id: <pad> in Marian's own models, the run's <s> in a
folder written by `seqxduce export --to huggingface` (the tokenizer's decoder_start), whose run's [task],
[tokenizer], [decode] and tokenizer files (kept beside, with recipe.toml and seqxduce_export.json) are taken
back as they were, so that the import decodes as the run did (seqxduce_export()).

Weight names, Hugging Face -> the Transformer plugin's state_dict (its checkpoints' layout):

    model.shared / model.{encoder,decoder}.embed_tokens   embeddings.source / embeddings.target (one matrix when
                                                          share_encoder_decoder_embeddings)
    lm_head (tied to the decoder's embeddings)            embeddings.output
    final_logits_bias (1, V)                              embeddings.output_bias (V,)
    {encoder,decoder}.layers.N.self_attn.q_proj           {encoder,decoder}.N.self_attn.query
      .k_proj ; .v_proj                                   .key_value (keys then values, one matrix)
      .out_proj                                           .out
    decoder.layers.N.encoder_attn.*                       decoder.N.cross_attn.*
    *.self_attn_layer_norm / encoder_attn_layer_norm      *.self_res.norm / cross_res.norm
    *.fc1 / fc2 / final_layer_norm                        *.transition.inner / outer / transition_res.norm

Marian's sinusoid tables (embed_positions, when a file holds them) are checked to be the table the Transformer
computes with sinusoid_layout = "halves"; a tied copy (lm_head, embed_tokens) to equal the matrix it is tied to.
A tensor left over is refused: nothing in the folder is silently dropped.

A multilingual model (OPUS-MT's en-ROMANCE, en-mul, ...: the target chosen by a `>>fra<<` token written at the
start of the source) is known by its vocabulary's language tokens, `>>xx<<` (as Hugging Face's
MarianTokenizer.supported_language_codes lists them): the recipe's [task] says them (tgt_langs, lang_tag =
"source", lang_tag_format = ">>{lang}<<"), so that `decode --tgt-lang fra` writes `>>fra<<` as a user of
transformers writes it by hand (docs/multilingual.md).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from seqxduce.api import ImportedModel, Importer, UserError

from .config import check_special_ids, inert_note, model_settings
from .generation import decode_settings
from .tokenizer import EOS, PAD, MarianTokenizer, read_vocab
from .tokenizer_settings import MarianTokenizerSettings
from .weights import read_weights

ATTENTION = {"q_proj": "query", "out_proj": "out"}
NORMS = {"self_attn_layer_norm": "self_res.norm", "encoder_attn_layer_norm": "cross_res.norm",
         "final_layer_norm": "transition_res.norm"}
FFN = {"fc1": "transition.inner", "fc2": "transition.outer"}
# a language token of a multilingual model, and the codes the translation task takes (its corpora.LANGUAGE: ISO
# 639, then script or region parts: fra, zho_Hans, pt_br)
LANGUAGE_TOKEN = re.compile(r">>(.+)<<")
LANGUAGE = re.compile(r"[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})*")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, refused in one line when unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; give the folder a Marian model was saved to "
                        "(save_pretrained)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object")
    return data


class MarianImporter(Importer):
    """See the module docstring."""

    def read(self, source: Path, workdir: Path) -> ImportedModel:
        config_file = source / "config.json"
        config = read_json(config_file)
        where = str(config_file)
        if config.get("model_type") != "marian":
            raise UserError(f"{where}: model_type = {config.get('model_type')!r}, not a Marian model; import it with "
                            "the importer of its kind (`seqxduce plugins --kind importer`)")
        shared = bool(config.get("share_encoder_decoder_embeddings", True))
        pieces = read_vocab(source / "vocab.json")
        target_vocab = source / "target_vocab.json"
        tgt_pieces = pieces if shared or not target_vocab.is_file() else read_vocab(target_vocab)
        pad, eos = pieces.index(PAD), pieces.index(EOS)
        if tgt_pieces.index(PAD) != pad or tgt_pieces.index(EOS) != eos:
            raise UserError(f"{target_vocab}: numbers <pad> or </s> otherwise than vocab.json; the model has one "
                            "pad_token_id and one eos_token_id")
        start = check_special_ids(config, where, pad, eos, size=len(tgt_pieces))
        model = model_settings(config, where, (len(pieces), len(tgt_pieces)))
        generation_file = source / "generation_config.json"
        generation = read_json(generation_file) if generation_file.is_file() else config
        check_special_ids(generation, str(generation_file), pad, eos, start)
        decode, notes = decode_settings(generation, str(generation_file if generation_file.is_file() else where),
                                        pad, start)
        tokenizers = {}
        for side, spm_name, side_pieces in (("src", "source.spm", pieces), ("tgt", "target.spm", tgt_pieces)):
            spm_file = source / spm_name
            if not spm_file.is_file():
                raise UserError(f"{spm_file}: no such file; a Marian model comes with source.spm and target.spm")
            MarianTokenizer(MarianTokenizerSettings(tgt_pieces[start])).use(
                spm_file.read_bytes(), side_pieces, str(spm_file))  # refused here, named as given
            shutil.copyfile(spm_file, workdir / f"{side}.spm")
            mapping = {piece: index for index, piece in enumerate(side_pieces)}
            (workdir / f"{side}.vocab.json").write_text(json.dumps(mapping, ensure_ascii=False), encoding="utf-8")
            tokenizers[side] = (workdir, side)
        tensors, weights_file = read_weights(source)
        weights = map_weights(tensors, model, source / weights_file, (len(pieces), len(tgt_pieces)))
        recipe = {
            "task": {"name": "translation", "dataset": "files", "data_dir": "data"},
            "tokenizer": {"name": "marian", "shared": False,
                          **({"decoder_start": tgt_pieces[start]} if start != pad else {})},
            "model": model,
            "decode": decode,
        }
        notes.insert(0, f"read {weights_file}: {sum(t.numel() for t in weights.values() if t is not None):,} "
                        f"values in {len(tensors)} tensors")
        notes += [note for note in (inert_note(config),) if note]
        languages, odd = language_codes(pieces)
        if languages:
            recipe["task"].update(lang_tag="source", lang_tag_format=">>{lang}<<", tgt_langs=languages)
            shown = ", ".join(languages[:8]) + (f", ... ({len(languages)})" if len(languages) > 8 else "")
            notes.append(f"a multilingual model: its target chosen by a token >>xx<< at the start of the source "
                         f"({shown}): decode --tgt-lang {languages[0]} writes >>{languages[0]}<<")
        if odd:
            notes.append(f"language tokens not taken as language codes (write them by hand): {', '.join(odd[:8])}")
        own = seqxduce_export(source)
        if own is not None:
            sections, tokenizers = own
            recipe.update(sections)
            notes.append(f"a folder written by `seqxduce export --to huggingface`: the [task], [tokenizer] and "
                         f"[decode] of its {EXPORT_RECIPE} taken as they were, and its run's tokenizer files, so that "
                         "the import decodes as that run did (the model from config.json)")
        return ImportedModel(recipe=recipe, tokenizers=tokenizers, weights=weights, notes=notes)


EXPORT_METADATA, EXPORT_RECIPE = "seqxduce_export.json", "recipe.toml"  # what `seqxduce export` writes beside


def seqxduce_export(source: Path) -> tuple[dict[str, Any], dict[str, tuple[Path, str]]] | None:
    """A folder `seqxduce export --to huggingface` wrote keeps the run's recipe and tokenizer files: the recipe's
    [task], [tokenizer] and [decode] sections (generation_config.json holds only the closest generate() has to a
    GNMT length penalty or a scored eos at the length limit) and where each side's tokenizer loads from; None
    for any other folder."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the core's dependency tomli
        import tomli as tomllib

    metadata_file, recipe_file = source / EXPORT_METADATA, source / EXPORT_RECIPE
    if not metadata_file.is_file() or not recipe_file.is_file():
        return None
    metadata = read_json(metadata_file)
    if metadata.get("engine") != "huggingface":
        return None
    try:
        recipe = tomllib.loads(recipe_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"{recipe_file}: not a readable recipe ({err}); remove it to import the folder as a plain "
                        "Marian model") from None
    prefixes = sorted({name.split(".")[0] for name in metadata.get("tokenizer_files", [])})
    shared = bool(recipe.get("tokenizer", {}).get("shared", True))
    sides = {"src": prefixes[0]} if shared and len(prefixes) == 1 else (
        {"src": prefixes[0], "tgt": prefixes[1]} if not shared and len(prefixes) == 2 else None)
    if sides is None or any(name not in recipe for name in ("task", "tokenizer", "decode")):
        raise UserError(f"{metadata_file}: names tokenizer files {metadata.get('tokenizer_files')} that do not fit "
                        f"{recipe_file}; export the run again")
    return ({name: recipe[name] for name in ("task", "tokenizer", "decode")},
            {side: (source, prefix) for side, prefix in sides.items()})


def language_codes(pieces: list[str]) -> tuple[list[str], list[str]]:
    """The target languages of a multilingual model's vocabulary, by its >>xx<< tokens in vocabulary order, and
    the tokens of that form whose inside is no language code (left for the user to write by hand)."""
    codes, odd = [], []
    for piece in pieces:
        found = LANGUAGE_TOKEN.fullmatch(piece)
        if found:
            (codes if LANGUAGE.fullmatch(found.group(1)) else odd).append(found.group(1))
    return codes, [f">>{code}<<" for code in odd]


def map_weights(tensors: dict[str, torch.Tensor], model: dict[str, Any], where: Path,
                rows: tuple[int, int]) -> dict[str, torch.Tensor]:
    """Hugging Face names -> the Transformer's state_dict (module docstring), float32; leftovers refused, and a
    tensor of another shape than config.json describes (rows: the source and target vocabulary sizes)."""
    left = {name.removeprefix("model.") if name.startswith("model.") else name: t.float() for name, t in
            tensors.items()}
    for name, tensor in left.items():
        expected = _expected_shape(name, model, rows)
        if expected is not None and tuple(tensor.shape) != expected:
            raise UserError(f"{where}: tensor {name!r} has shape {tuple(tensor.shape)}, but "
                            f"{where.parent / 'config.json'} describes {expected}; the two come from different "
                            "models: give the config.json these weights were saved with")
    out: dict[str, torch.Tensor] = {}

    def take(name: str) -> torch.Tensor:
        if name not in left:
            raise UserError(f"{where}: has no tensor {name!r}; give the weights this config.json was saved with")
        return left.pop(name)

    def tied(name: str, to: torch.Tensor, why: str) -> None:
        copy = left.pop(name, None)
        if copy is not None and not torch.equal(copy, to):
            raise UserError(f"{where}: {name} differs from the matrix it is tied to ({why}); the model cannot be "
                            "imported as it is")

    if model["share_source_target"]:
        embedding = take("shared.weight")
        tied("encoder.embed_tokens.weight", embedding, "share_encoder_decoder_embeddings = true")
        tied("decoder.embed_tokens.weight", embedding, "share_encoder_decoder_embeddings = true")
        out["embeddings.source.weight"] = out["embeddings.target.weight"] = embedding
    else:
        left.pop("shared.weight", None)  # Hugging Face keeps it as the encoder's embedding when not shared
        out["embeddings.source.weight"] = take("encoder.embed_tokens.weight")
        out["embeddings.target.weight"] = take("decoder.embed_tokens.weight")
    target = out["embeddings.target.weight"]
    if model["tie_output"]:
        tied("lm_head.weight", target, "tie_word_embeddings = true")
        out["embeddings.output.weight"] = target
    else:
        out["embeddings.output.weight"] = take("lm_head.weight")
    bias = left.pop("final_logits_bias", None)
    out["embeddings.output_bias"] = torch.zeros(target.size(0)) if bias is None else bias.reshape(-1)
    for side in ("encoder", "decoder"):
        positions = left.pop(f"{side}.embed_positions.weight", None)
        if positions is not None:
            _check_positions(positions, model["d_model"], where, side)
        for n in range(model[f"{side}_layers"]):
            hf, ours = f"{side}.layers.{n}", f"{side}.{n}"
            kinds = [("self_attn", "self_attn")] + ([("encoder_attn", "cross_attn")] if side == "decoder" else [])
            for theirs, mine in kinds:
                for part in ("weight", "bias"):
                    out[f"{ours}.{mine}.query.{part}"] = take(f"{hf}.{theirs}.q_proj.{part}")
                    out[f"{ours}.{mine}.key_value.{part}"] = torch.cat([take(f"{hf}.{theirs}.k_proj.{part}"),
                                                                        take(f"{hf}.{theirs}.v_proj.{part}")])
                    out[f"{ours}.{mine}.out.{part}"] = take(f"{hf}.{theirs}.out_proj.{part}")
            for table in (NORMS, FFN):
                for theirs, mine in table.items():
                    if theirs == "encoder_attn_layer_norm" and side == "encoder":
                        continue
                    for part in ("weight", "bias"):
                        out[f"{ours}.{mine}.{part}"] = take(f"{hf}.{theirs}.{part}")
    if left:
        name = sorted(left)[0]
        raise UserError(f"{where}: tensor {name!r} (and {len(left) - 1} more) has no place in Marian's Transformer "
                        "as config.json describes it; nothing is dropped silently, so the model is not imported")
    return out


def _expected_shape(name: str, model: dict[str, Any], rows: tuple[int, int]) -> tuple[int, ...] | None:
    """The shape config.json gives a Hugging Face tensor (None: one not checked here, e.g. a position table)."""
    d, ff = model["d_model"], model["d_ff"]
    whole = {"shared.weight": (rows[0], d), "encoder.embed_tokens.weight": (rows[0], d),
             "decoder.embed_tokens.weight": (rows[1], d), "lm_head.weight": (rows[1], d),
             "final_logits_bias": (1, rows[1])}
    if name in whole:
        return whole[name]
    if ".layers." not in name:
        return None
    module, part = name.split(".")[-2:]
    weight = {"q_proj": (d, d), "k_proj": (d, d), "v_proj": (d, d), "out_proj": (d, d), "fc1": (ff, d),
              "fc2": (d, ff)}
    if module in weight:
        return weight[module] if part == "weight" else (weight[module][0],)
    return (d,) if module.endswith("layer_norm") else None


def _check_positions(table: torch.Tensor, d_model: int, where: Path, side: str) -> None:
    """A stored position table must be Marian's sinusoids (sines in the first half of the dimensions, cosines in
    the second), which the Transformer computes with sinusoid_layout = "halves": one learned or otherwise changed
    would be lost."""
    position = torch.arange(table.size(0), dtype=torch.float64).unsqueeze(1)
    angle = position / torch.pow(10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    expected = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    if table.shape != expected.shape or not torch.allclose(table.double(), expected, atol=1e-5):
        raise UserError(f"{where}: model.{side}.embed_positions.weight is not Marian's sinusoid table (learned or "
                        "changed positions?); seqxduce's Transformer cannot represent it, so the model is not imported")
