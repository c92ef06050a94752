"""config.json of a Hugging Face Marian model -> the Transformer plugin's [model] settings, key by key.

Every key is either mapped to a setting, checked to hold the one value the Transformer represents (and then
left out), or known to change nothing the model computes (metadata, initialisation, caching). Any other key,
or a checked one with another value, is refused in one line naming it: never approximated.
"""

from __future__ import annotations

from typing import Any

from seqxduce.api import UserError

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "swish": "swish", "silu": "swish"}

# keys that change nothing in the function the model computes, nor in fine-tuning it
INERT = {"_name_or_path", "architectures", "transformers_version", "model_type", "dtype", "torch_dtype", "init_std",
         "use_cache", "id2label", "label2id", "num_labels", "gradient_checkpointing", "classif_dropout",
         "classifier_dropout", "num_hidden_layers", "output_attentions", "output_hidden_states",
         "return_dict", "bos_token_id", "_attn_implementation_autoset", "problem_type", "tokenizer_class",
         "prefix", "task_specific_params", "finetuning_task", "chunk_size_feed_forward", "pruned_heads",
         "tie_encoder_decoder", "add_cross_attention", "cross_attention_hidden_size", "is_encoder_decoder",
         "is_decoder", "extra_pos_embeddings", "sep_token_id", "_commit_hash", "model_max_length",
         # older saves (the 2020 OPUS-MT layout): label counts and the old name of use_cache
         "_num_labels", "output_past"}

# keys with the only value the Transformer (and Hugging Face's MarianMTModel) computes with
FIXED: dict[str, Any] = {"normalize_before": False, "normalize_embedding": False, "add_final_layer_norm": False,
                         "static_position_embeddings": True, "add_bias_logits": False, "encoder_layerdrop": 0.0,
                         "decoder_layerdrop": 0.0, "is_encoder_decoder": True, "is_decoder": False,
                         "tie_encoder_decoder": False, "add_cross_attention": False}

# generation defaults: mapped to [decode] (generation.py); a value they cannot hold is refused there
GENERATION = {"num_beams", "max_length", "max_new_tokens", "min_length", "length_penalty", "early_stopping",
              "bad_words_ids", "num_beam_groups", "do_sample", "num_return_sequences", "no_repeat_ngram_size",
              "repetition_penalty", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
              "forced_bos_token_id", "forced_eos_token_id", "decoder_start_token_id", "pad_token_id",
              "eos_token_id", "encoder_no_repeat_ngram_size", "_from_model_config", "remove_invalid_values",
              "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "renormalize_logits",
              "output_scores", "return_dict_in_generate", "output_attentions", "output_hidden_states",
              "use_cache", "transformers_version", "min_new_tokens"}

MAPPED = {"d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
          "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "dropout", "attention_dropout",
          "activation_dropout", "max_position_embeddings", "scale_embedding", "share_encoder_decoder_embeddings",
          "tie_word_embeddings", "vocab_size", "decoder_vocab_size", "pad_token_id", "eos_token_id",
          "decoder_start_token_id", "forced_eos_token_id"}


def refuse(where: str, key: str, value: Any, why: str) -> UserError:
    """The one-line refusal of a config key."""
    return UserError(f"{where}: {key} = {value!r}: {why}; seqxduce's Transformer cannot represent it, so the model "
                     "is not imported")


def check_keys(config: dict[str, Any], where: str) -> None:
    """Refuse a key that is neither mapped, fixed, inert nor a generation default, and a fixed key of another value."""
    for key, value in config.items():
        if key in FIXED:
            if value != FIXED[key] and not (key.endswith("layerdrop") and not value):
                raise refuse(where, key, value, f"Marian's Transformer has {key} = {FIXED[key]!r}")
        elif key not in MAPPED | INERT | GENERATION:
            raise UserError(f"{where}: {key} = {value!r} is a key the Marian importer does not know; seqxduce "
                            "imports only what it represents exactly: remove the key if it changes nothing, or "
                            "ask for it to be supported")


def inert_note(config: dict[str, Any]) -> str | None:
    """The import's note naming the keys of config.json left out because they change nothing it computes."""
    left = sorted(key for key in config if key in INERT)
    return f"config.json: not imported, as they change nothing the model computes: {', '.join(left)}" if left else None


def model_settings(config: dict[str, Any], where: str, vocab_sizes: tuple[int, int]) -> dict[str, Any]:
    """The [model] section of the Transformer that computes what config.json describes."""
    check_keys(config, where)

    def get(key: str) -> Any:
        if key not in config:
            raise UserError(f"{where}: has no {key}; give the config.json the model was saved with")
        return config[key]

    def same(first: str, second: str) -> Any:
        if get(first) != get(second):
            raise refuse(where, second, get(second), f"differs from {first} = {get(first)!r} (the Transformer has "
                                                     "one value for encoder and decoder)")
        return get(first)

    activation = get("activation_function")
    if activation not in ACTIVATIONS:
        raise refuse(where, "activation_function", activation, f"choose from {', '.join(ACTIVATIONS)}")
    d_model, heads = get("d_model"), same("encoder_attention_heads", "decoder_attention_heads")
    if d_model % 2 or d_model % heads:
        raise refuse(where, "d_model", d_model, f"not an even multiple of {heads} heads")
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    src_size, tgt_size = vocab_sizes
    vocab = get("vocab_size")
    decoder_vocab = config.get("decoder_vocab_size") or vocab
    if vocab != src_size:
        raise refuse(where, "vocab_size", vocab, f"but the source vocabulary has {src_size} entries")
    if (vocab if shared else decoder_vocab) != tgt_size:
        raise refuse(where, "decoder_vocab_size", decoder_vocab, f"but the target vocabulary has {tgt_size} entries")
    return {
        "name": "transformer",
        "d_model": d_model,
        "heads": heads,
        "d_ff": same("encoder_ffn_dim", "decoder_ffn_dim"),
        "layers": get("encoder_layers"),
        "encoder_layers": get("encoder_layers"),
        "decoder_layers": get("decoder_layers"),
        "activation": ACTIVATIONS[activation],
        "dropout": float(config.get("dropout", 0.1)),
        "attention_dropout": float(config.get("attention_dropout", 0.0)),
        "activation_dropout": float(config.get("activation_dropout", 0.0)),
        "norm": "post",
        "positions": "sinusoid",
        "sinusoid_layout": "halves",
        "max_positions": get("max_position_embeddings"),
        "scale_embeddings": bool(config.get("scale_embedding", False)),
        "output_bias": True,
        "share_embeddings": False,
        "share_source_target": shared,
        "tie_output": bool(config.get("tie_word_embeddings", True)),
    }


def check_special_ids(config: dict[str, Any], where: str, pad: int, eos: int, start: int | None = None,
                      size: int | None = None) -> int:
    """pad, eos, the decoder's start and the forced eos as vocab.json numbers them; returns the start's id.

    Marian's decoder starts from <pad>; a model exported by seqxduce starts from its own bos, any id but eos of
    the vocabulary (`start`: the id it must be, once config.json gave it; `size`: the vocabulary's)."""
    expected = {"pad_token_id": pad, "eos_token_id": eos, "forced_eos_token_id": eos}
    for key, wanted in expected.items():
        value = config.get(key, wanted)
        if value is not None and value != wanted:
            raise refuse(where, key, value, f"vocab.json numbers {'<pad>' if wanted == pad else '</s>'} {wanted} "
                                            "(Marian's decoder ends with </s>)")
    value = config.get("decoder_start_token_id")
    wanted = pad if start is None else start
    if value is None:
        return wanted
    if start is not None and value != start:
        raise refuse(where, "decoder_start_token_id", value, f"but config.json's is {start}")
    if not isinstance(value, int) or value == eos or (size is not None and not 0 <= value < size):
        raise refuse(where, "decoder_start_token_id", value, "the decoder must start from a piece of vocab.json "
                                                             "other than </s> (<pad> in Marian's models)")
    return value
