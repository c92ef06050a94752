"""A trained Transformer as a Hugging Face MarianMTModel folder, for `seqxduce export RUN --to huggingface`.

Marian's Transformer is the paper's: post-norm layers without final norms, sinusoid positions, embeddings scaled
or not, a fixed logits bias, biases on every projection. What this plugin computes with other settings has no
class in transformers that computes it exactly (pre-norm: MBart adds a LayerNorm on the embeddings, M2M100 and
FSMT compute other sinusoid frequencies; learned positions: Marian's table is recomputed, not loaded, whenever
it is saved again), so those are refused before anything is written, naming the setting (`refusal`).

Weight names, ours -> Hugging Face (the `marian` importer's table read backwards):

    embeddings.source / target / output       model.shared (one id space, one matrix), or
                                              model.encoder/decoder.embed_tokens and lm_head when not tied
    embeddings.output_bias (zeros if none)    final_logits_bias (1, V)
    {encoder,decoder}.N.self_attn.query       model.{encoder,decoder}.layers.N.self_attn.q_proj
      .key_value (keys then values)           .k_proj ; .v_proj
      .out                                    .out_proj
    decoder.N.cross_attn.*                    model.decoder.layers.N.encoder_attn.*
    *.self_res / cross_res / transition_res   *.self_attn_layer_norm / encoder_attn_layer_norm / final_layer_norm
      .norm
    *.transition.inner / outer                *.fc1 / fc2

Positions. Marian's sinusoids put every sine in the first half of the dimensions and every cosine in the second
(sinusoid_layout = "halves"); ours, by default, interleave them (the paper's layout). The two are the same
signal with the model's dimensions in another order, so the export renumbers the residual stream's dimensions
(sines first, then cosines) in every tensor that reads or writes it: the columns of the embeddings, of the
output projection and of every projection reading the stream (q, k, v, fc1), the rows and biases of every
projection writing it (out_proj, fc2), and the LayerNorms' weights and biases. The function computed is the
same; only the order of the sums inside a LayerNorm or a matrix product changes, as any other kernel may. The
position tables are written too (model.*.embed_positions.weight, our own values, renumbered), so that the
exported model adds the very vectors ours adds; Hugging Face recomputes its own when a folder lacks them.

Special ids: the decoder starts from our bos (decoder_start_token_id), ends with eos, and every search of ours
bans pad and bos: generate's bad_words_ids say the same. The generation defaults (generation_config.json) are
the run's [decode] settings where generate() has them; what it cannot say is a note in the export's model card.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from seqxduce.api import ExportRequest, UserError

if TYPE_CHECKING:  # pragma: no cover
    from .base import EncoderDecoderBase

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "swish": "swish"}
SPECIAL_NAMES = ("<pad>", "</s>", "<unk>")  # Marian's tokenizer's defaults


def refusal(model: EncoderDecoderBase) -> str | None:
    """The one setting of this model that MarianMTModel cannot compute, as a one-line reason; None if none."""
    own = model.hf_refusal()
    if own is not None:
        return own
    s = model.settings
    attention = model.encoder[0].self_attn
    checks = [
        (s.norm != "post", f"[model] norm = {s.norm!r}: Marian's Transformer is post-norm, and no transformers "
                           "class computes a pre-norm Transformer with sinusoid positions and no embedding "
                           "LayerNorm (MBart normalizes its embeddings, M2M100 and FSMT compute other sinusoids)"),
        (s.positions != "sinusoid", f"[model] positions = {s.positions!r}: Marian's positions are sinusoids "
                                    "(a learned table would be recomputed as sinusoids when the folder is saved "
                                    "again)"),
        (s.attention_window > 0, f"[model] attention_window = {s.attention_window}: transformers' Marian has no "
                                 "restricted (band) self-attention"),
        (s.char_ngrams > 0, f"[model] char_ngrams = {s.char_ngrams}: Marian has no character n-gram source "
                            "embeddings"),
        (s.source_positions != "forward", f"[model] source_positions = {s.source_positions!r}: Marian numbers "
                                          "source positions forward only"),
        (s.source_bos, "[model] source_bos = true: Marian's encoder reads no bos before the source"),
        (attention.d_k != attention.d_v or attention.d_k * attention.heads != s.d_model,
         f"[model] d_k = {s.d_k}, d_v = {s.d_v}: Marian's heads are d_model / heads wide for queries, keys and "
         "values"),
        (len(model.encoder) > 0 and model.encoder[0].self_attn.heads != model.decoder[0].self_attn.heads,
         "[model] heads: Marian's encoder and decoder have one head count each, taken from one setting here"),
    ]
    return next((reason for failed, reason in checks if failed), None)


def residual_order(model: EncoderDecoderBase) -> torch.Tensor:
    """Our dimension index for each of Marian's (module docstring): sines first, then cosines."""
    d = model.settings.d_model
    if model.settings.sinusoid_layout == "halves":
        return torch.arange(d)
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def export_huggingface(model: EncoderDecoderBase, request: ExportRequest) -> None:
    """Write config.json, generation_config.json, model.safetensors, vocab.json (target_vocab.json with two
    vocabularies) and tokenizer_config.json into request.directory; the tokenizer plugin writes source.spm and
    target.spm."""
    reason = refusal(model)
    if reason is not None:
        raise UserError(f"export --to huggingface: {reason}; nothing was written")
    if request.quantization != "none":
        raise UserError(f"export --to huggingface --quantization {request.quantization}: the folder holds float32 "
                        "weights (transformers quantizes at load); leave --quantization out")
    order = residual_order(model)
    config, separate = marian_config(model, request)
    tensors = marian_tensors(model, order, config)
    generation = generation_config(request, config, model.settings.max_positions)
    directory = Path(request.directory)
    write_json(directory / "config.json", config)
    write_json(directory / "generation_config.json", generation)
    write_safetensors(directory / "model.safetensors", tensors)
    write_json(directory / "vocab.json", {t: i for i, t in enumerate(request.source_tokens)})
    if separate:
        write_json(directory / "target_vocab.json", {t: i for i, t in enumerate(request.target_tokens)})
    tokens = request.target_tokens
    write_json(directory / "tokenizer_config.json", {
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": separate, "model_max_length": config[
            "max_position_embeddings"], "unk_token": tokens[request.unk_id], "eos_token": tokens[request.eos_id],
        "pad_token": tokens[request.pad_id]})
    if model.settings.sinusoid_layout != "halves":
        request.notes.append("positions: the model's interleaved sinusoids are Marian's halves with the model's "
                             "dimensions renumbered (sines first, then cosines) in every weight that touches the "
                             "residual stream: the same function")


def marian_config(model: EncoderDecoderBase, request: ExportRequest) -> tuple[dict[str, Any], bool]:
    """config.json of the MarianMTModel computing what `model` computes, and whether its vocabularies differ."""
    s = model.settings
    emb = model.embeddings
    separate = request.source_tokens != request.target_tokens
    shared = emb.source is emb.target
    tied = emb.output.weight is emb.target.weight
    for side, tokens, size in (("source", request.source_tokens, model.vocab.src_size),
                               ("target", request.target_tokens, model.vocab.tgt_size)):
        if len(tokens) != size:
            raise UserError(f"export --to huggingface: the {side} vocabulary has {len(tokens)} entries and the "
                            f"model {size} rows: the run's tokenizer and checkpoint disagree")
    heads = model.encoder[0].self_attn.heads
    config = {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": len(request.source_tokens),
        "decoder_vocab_size": len(request.target_tokens),
        "d_model": s.d_model,
        "encoder_layers": len(model.encoder),
        "decoder_layers": len(model.decoder),
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": model.encoder[0].transition.inner.out_features,
        "decoder_ffn_dim": model.decoder[0].transition.inner.out_features,
        "activation_function": ACTIVATIONS[s.activation],
        "dropout": s.dropout,
        "attention_dropout": s.attention_dropout,
        "activation_dropout": s.activation_dropout,
        "max_position_embeddings": s.max_positions,  # generate() cannot go past them; ours grow
        "scale_embedding": bool(s.scale_embeddings),
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": tied,
        "normalize_before": False,
        "static_position_embeddings": True,
        "pad_token_id": request.pad_id,
        "eos_token_id": request.eos_id,
        "decoder_start_token_id": request.bos_id,
        "forced_eos_token_id": request.eos_id,
        "is_encoder_decoder": True,
        "use_cache": True,
    }
    return config, separate


def marian_tensors(model: EncoderDecoderBase, order: torch.Tensor, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Hugging Face name -> float32 tensor, the residual dimensions renumbered by `order` (module docstring)."""
    emb = model.embeddings
    out: dict[str, torch.Tensor] = {}

    def reads(weight: torch.Tensor) -> torch.Tensor:  # (out, C): a projection reading the residual stream
        return weight[:, order]

    def writes(weight: torch.Tensor) -> torch.Tensor:  # (C, in) or (C,): writing it, or a norm's vector
        return weight[order]

    if config["share_encoder_decoder_embeddings"]:
        out["model.shared.weight"] = reads(emb.source.weight)
    else:
        out["model.encoder.embed_tokens.weight"] = reads(emb.source.weight)
        out["model.decoder.embed_tokens.weight"] = reads(emb.target.weight)
    if not config["tie_word_embeddings"]:
        out["lm_head.weight"] = reads(emb.output.weight)
    bias = emb.output_bias if emb.output_bias is not None else torch.zeros(emb.output.weight.size(0))
    out["final_logits_bias"] = bias.reshape(1, -1)
    table = reads(model.positions(config["max_position_embeddings"]))
    out["model.encoder.embed_positions.weight"] = table
    out["model.decoder.embed_positions.weight"] = table
    for side, layers in (("encoder", model.encoder), ("decoder", model.decoder)):
        for n, layer in enumerate(layers):
            hf = f"model.{side}.layers.{n}"
            kinds = [("self_attn", layer.self_attn, layer.self_res.norm, "self_attn_layer_norm")]
            if side == "decoder":
                kinds.append(("encoder_attn", layer.cross_attn, layer.cross_res.norm, "encoder_attn_layer_norm"))
            for name, attention, norm, norm_name in kinds:
                keys, values = attention.key_value.weight.split([attention.heads * attention.d_k,
                                                                 attention.heads * attention.d_v])
                key_bias, value_bias = attention.key_value.bias.split([attention.heads * attention.d_k,
                                                                       attention.heads * attention.d_v])
                out[f"{hf}.{name}.q_proj.weight"] = reads(attention.query.weight)
                out[f"{hf}.{name}.q_proj.bias"] = attention.query.bias
                out[f"{hf}.{name}.k_proj.weight"] = reads(keys)
                out[f"{hf}.{name}.k_proj.bias"] = key_bias
                out[f"{hf}.{name}.v_proj.weight"] = reads(values)
                out[f"{hf}.{name}.v_proj.bias"] = value_bias
                out[f"{hf}.{name}.out_proj.weight"] = writes(attention.out.weight)
                out[f"{hf}.{name}.out_proj.bias"] = writes(attention.out.bias)
                out[f"{hf}.{norm_name}.weight"] = writes(norm.weight)
                out[f"{hf}.{norm_name}.bias"] = writes(norm.bias)
            out[f"{hf}.fc1.weight"] = reads(layer.transition.inner.weight)
            out[f"{hf}.fc1.bias"] = layer.transition.inner.bias
            out[f"{hf}.fc2.weight"] = writes(layer.transition.outer.weight)
            out[f"{hf}.fc2.bias"] = writes(layer.transition.outer.bias)
            out[f"{hf}.final_layer_norm.weight"] = writes(layer.transition_res.norm.weight)
            out[f"{hf}.final_layer_norm.bias"] = writes(layer.transition_res.norm.bias)
    return {name: tensor.detach().float().cpu().contiguous() for name, tensor in out.items()}


def generation_config(request: ExportRequest, config: dict[str, Any], positions: int) -> dict[str, Any]:
    """generation_config.json: the run's [decode] settings as generate() takes them (the `marian` importer's
    generation.py read backwards); what generate() cannot say goes to request.notes, for the model card."""
    pad, bos, eos = request.pad_id, request.bos_id, request.eos_id
    generation: dict[str, Any] = {
        "decoder_start_token_id": bos, "pad_token_id": pad, "eos_token_id": eos, "forced_eos_token_id": eos,
        # every seqxduce search bans pad, and bos where it differs from eos
        "bad_words_ids": [[pad]] + ([[bos]] if bos not in (pad, eos) else []),
        "num_beams": 1, "do_sample": False,
    }
    name, search = request.decoder, request.search
    notes = request.notes
    if search is None or not hasattr(search, "max_len_a"):
        notes.append(f"generation: [decode] name = {name!r} has no generate() settings here; generate() runs "
                     "greedy with the defaults of generation_config.json")
        generation["max_length"] = positions
        return generation
    if search.max_len_a == 0:
        generation["max_new_tokens"] = max(1, int(search.max_len_b)) + 1
    else:
        # seqxduce's limit grows with the source; generate's is one number: the longest it could be for a source
        # as long as the position table allows
        generation["max_new_tokens"] = positions - 1
        notes.append(f"generation: [decode] max_len_a = {search.max_len_a:g}, max_len_b = {search.max_len_b} "
                     "bound an output by its source's length, which generate() cannot: max_new_tokens = "
                     f"{positions - 1} (the position table); pass max_new_tokens per call for the run's limit")
    if getattr(search, "min_len", 0):
        generation["min_new_tokens"] = int(search.min_len)
    if name == "beam" and hasattr(search, "beam"):
        generation["num_beams"] = int(search.beam)
        generation["early_stopping"] = search.stopping_rule()
        if search.renormalize:
            generation["renormalize_logits"] = True
        if search.limit_eos == "scored":
            # without forced_eos_token_id generate() would write one more token at the limit instead of eos
            notes.append("generation: [decode] limit_eos = \"scored\" charges the eos a hypothesis is forced to end "
                         "with at the length limit its log-probability; generate()'s forced_eos_token_id gives it "
                         "for free (limit_eos = \"free\"): beam outputs that reach the limit may rank otherwise")
        generation["length_penalty"] = float(search.alpha)
        if search.length_penalty != "power" and search.alpha != 0:
            notes.append(f"generation: [decode] length_penalty = \"gnmt\" (alpha = {search.alpha:g}) divides a "
                         f"hypothesis's log-probability by ((5 + length) / 6)^{search.alpha:g}, which generate() "
                         f"cannot: its length_penalty = {search.alpha:g} divides by length^{search.alpha:g}, the "
                         "closest it has; beam outputs may differ where the two rank hypotheses differently "
                         "(decode with decode.length_penalty = \"power\" to compare exactly)")
        if search.nbest > 1:
            notes.append(f"generation: [decode] nbest = {search.nbest}: pass num_return_sequences = "
                         f"{search.nbest} to generate()")
    elif name != "greedy":
        notes.append(f"generation: [decode] name = {name!r} has no generate() counterpart; generation_config.json "
                     "says greedy")
    return generation


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """The safetensors layout (the marian plugin reads it the same way): an 8-byte little-endian header length,
    a JSON header of name -> dtype, shape and byte range, then the raw float32 little-endian data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        data = tensors[name].numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset,
                                                                                            offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)))
        file.write(encoded)
        for blob in blobs:
            file.write(blob)

