"""A trained Transformer as a CTranslate2 model (TransformerSpec), for `seqxduce export RUN --to ctranslate2`.

Written from CTranslate2's spec API (ctranslate2.specs) and the layouts its own converters (OpenNMT-py,
fairseq, Marian) fill in; only this plugin knows where its weights live, so the mapping is here:

    ours                                     CTranslate2
    embeddings.source / target (* sqrt C)    encoder.embeddings[0] / decoder.embeddings (scale_embeddings)
    positions (our table, from position 0)   {encoder,decoder}.position_encodings.encodings
    self_attn.query ; self_attn.key_value    self_attention.linear[0] (one fused Q;K;V matrix)
    cross_attn.query / cross_attn.key_value  attention.linear[0] / attention.linear[1] (fused K;V, as ours)
    *.out                                    *.linear[-1]
    self_res / cross_res / transition_res    self_attention / attention / ffn .layer_norm (pre_norm flag
      .norm                                  places it before the sublayer or after the residual)
    transition.inner / .outer                ffn.linear_0 / ffn.linear_1 (activation: the settings')
    encoder_norm / decoder_norm (pre-norm)   encoder.layer_norm / decoder.layer_norm
    embeddings.output (+ output_bias)        decoder.projection (its bias: Marian's final_logits_bias)

The position table is always passed: CTranslate2's own sinusoids are concat(sin, cos) and ours interleave
them (paper, sec. 3.5). The source's eos (and with source_bos its bos) is added by CTranslate2 itself
(add_source_eos / add_source_bos), so a user feeds it the tokenizer's pieces as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from seqxduce.api import ExportRequest, UserError

if TYPE_CHECKING:  # pragma: no cover
    from .base import EncoderDecoderBase

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which every norm of this plugin uses
MIN_POSITIONS = 1024  # sinusoid rows exported at least: CTranslate2 cannot grow the table as our model does


def refusal(model: EncoderDecoderBase) -> str | None:
    """The one setting of this model that CTranslate2 cannot represent, as a one-line reason; None if none."""
    # the model's own refusal first (the Universal Transformer's): asked of the model, so that this module needs no
    # import of the model classes (universal.py imports base.py, which imports this module to export)
    own = model.ct2_refusal()
    if own is not None:
        return own
    s = model.settings
    checks = [
        (s.attention_window > 0, f"[model] attention_window = {s.attention_window}: CTranslate2 has no "
                                 "restricted (band) self-attention in the encoder"),
        (s.char_ngrams > 0, f"[model] char_ngrams = {s.char_ngrams}: CTranslate2 has no character n-gram "
                            "source embeddings"),
        (s.source_positions != "forward", f"[model] source_positions = {s.source_positions!r}: CTranslate2 "
                                          "numbers source positions forward only"),
        (_d_k(model) != _d_v(model), f"[model] d_k = {_d_k(model)}, d_v = {_d_v(model)}: CTranslate2's attention "
                                     "has one head width for queries, keys and values"),
    ]
    return next((reason for failed, reason in checks if failed), None)


def _d_k(model: EncoderDecoderBase) -> int:
    return model.encoder[0].self_attn.d_k


def _d_v(model: EncoderDecoderBase) -> int:
    return model.encoder[0].self_attn.d_v


def export_ctranslate2(model: EncoderDecoderBase, request: ExportRequest) -> None:
    """Build, validate and save the CTranslate2 model of `model` into request.directory."""
    reason = refusal(model)
    if reason is not None:
        raise UserError(f"export --to ctranslate2: {reason}")
    spec = build_spec(model, request)
    spec.validate()
    spec.optimize(quantization=None if request.quantization == "none" else request.quantization)
    spec.save(str(request.directory))


def build_spec(model: EncoderDecoderBase, request: ExportRequest):
    """The ctranslate2.specs.TransformerSpec holding this model's weights and vocabularies."""
    from ctranslate2.specs import transformer_spec

    s = model.settings
    pre_norm = s.norm == "pre"
    heads = model.encoder[0].self_attn.heads
    activation = _activation(s.activation)
    encoder = transformer_spec.TransformerEncoderSpec(len(model.encoder), heads, pre_norm=pre_norm,
                                                      activation=activation)
    decoder = transformer_spec.TransformerDecoderSpec(len(model.decoder), heads, pre_norm=pre_norm,
                                                      activation=activation)
    encoder.scale_embeddings = decoder.scale_embeddings = s.scale_embeddings
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    positions = _position_table(model)
    emb = model.embeddings
    encoder.embeddings[0].weight = _array(emb.source.weight)
    encoder.position_encodings.encodings = positions
    decoder.embeddings.weight = _array(emb.target.weight)
    decoder.position_encodings.encodings = positions
    _set_linear(decoder.projection, emb.output)
    if emb.output_bias is not None:
        decoder.projection.bias = _array(emb.output_bias)
    if pre_norm:
        _set_norm(encoder.layer_norm, model.encoder_norm)
        _set_norm(decoder.layer_norm, model.decoder_norm)
    if _d_k(model) * heads != s.d_model:  # Table 3 rows A/B: heads narrower or wider than d_model / heads
        _set_head_width(encoder, decoder, _d_k(model))
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_res.norm)
        _set_ffn(layer_spec.ffn, layer.transition, layer.transition_res.norm)
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_res.norm)
        _set_cross_attention(layer_spec.attention, layer.cross_attn, layer.cross_res.norm)
        _set_ffn(layer_spec.ffn, layer.transition, layer.transition_res.norm)
    _set_config(spec, request, source_bos=s.source_bos)
    spec.register_source_vocabulary(list(request.source_tokens))
    spec.register_target_vocabulary(list(request.target_tokens))
    return spec


def _activation(name: str):
    """CTranslate2's enum for the settings' activation name."""
    from ctranslate2.specs.common_spec import Activation

    return {"relu": Activation.RELU, "gelu": Activation.GELU, "gelu_tanh": Activation.GELUTanh,
            "swish": Activation.SWISH}[name]


def _set_head_width(encoder, decoder, width: int) -> None:
    """Attention specs that carry head_dim: the encoder's spec takes none as an argument, so every attention
    spec is built anew with it (a spec refuses attributes it was not built with)."""
    from ctranslate2.specs.attention_spec import MultiHeadAttentionSpec

    for layer in [*encoder.layer, *decoder.layer]:
        layer.self_attention = MultiHeadAttentionSpec(self_attention=True, head_dim=width)
        if hasattr(layer, "attention"):
            layer.attention = MultiHeadAttentionSpec(head_dim=width)


def _set_config(spec, request: ExportRequest, source_bos: bool) -> None:
    """Special tokens by our ids; CTranslate2 appends the source eos (and prepends bos) as encode_source does."""
    tokens = request.target_tokens
    config = spec.config
    config.layer_norm_epsilon = LAYER_NORM_EPSILON
    config.unk_token = tokens[request.unk_id]
    config.bos_token = tokens[request.bos_id]
    config.eos_token = tokens[request.eos_id]
    config.decoder_start_token = tokens[request.bos_id]
    config.add_source_eos = True
    config.add_source_bos = source_bos


def _position_table(model: EncoderDecoderBase) -> np.ndarray:
    """Our position vectors from position 0: the learned table, or enough sinusoid rows."""
    from .embedding import SinusoidalPositions

    positions = model.positions
    if isinstance(positions, SinusoidalPositions):  # a function of the position: as many rows as may be needed
        return _array(positions(max(model.settings.max_positions, MIN_POSITIONS)))
    return _array(positions.table.weight)


def _set_self_attention(spec, attention, norm) -> None:
    fused = torch.cat([attention.query.weight, attention.key_value.weight])  # (H*d_k * 3, C): Q;K;V
    bias = torch.cat([attention.query.bias, attention.key_value.bias])
    spec.linear[0].weight, spec.linear[0].bias = _array(fused), _array(bias)
    _set_linear(spec.linear[1], attention.out)
    _set_norm(spec.layer_norm, norm)


def _set_cross_attention(spec, attention, norm) -> None:
    _set_linear(spec.linear[0], attention.query)
    _set_linear(spec.linear[1], attention.key_value)  # already one K;V matrix, CTranslate2's layout
    _set_linear(spec.linear[2], attention.out)
    _set_norm(spec.layer_norm, norm)


def _set_ffn(spec, transition, norm) -> None:
    _set_linear(spec.linear_0, transition.inner)
    _set_linear(spec.linear_1, transition.outer)
    _set_norm(spec.layer_norm, norm)


def _set_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _set_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _array(tensor: torch.Tensor) -> np.ndarray:
    """float32 numpy copy (the spec quantizes later, as asked)."""
    return tensor.detach().float().cpu().numpy().copy()
