"""Recipe settings of the Transformer and the Universal Transformer (torch-free: `seqxduce plugins` reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import UserError, setting


@dataclass
class CommonSettings:
    """Settings both models share: widths, dropout, normalisation, embedding sharing, positions, init."""

    d_model: int = setting(512, help="model width C (paper base: 512, big: 1024)")
    d_ff: int = setting(2048, help="inner width of the position-wise feed-forward / transition (base: 2048)")
    heads: int = setting(8, help="attention heads; d_model must be divisible by it (base: 8, big: 16)")
    dropout: float = setting(0.1, help="dropout on sublayer outputs and on embeddings+positions (base: 0.1)")
    attention_dropout: float = setting(0.0, help="dropout on attention weights (0 in the paper)")
    activation_dropout: float = setting(0.0, help="dropout after the ReLU of the feed-forward (0 in the paper)")
    norm: str = setting("post", help="post: x = LN(x + f(x)) as in the paper; pre: x = x + f(LN(x)), final LN",
                        choices=("post", "pre"))
    share_embeddings: bool = setting(True, help="one matrix for source, target and output embeddings when the "
                                                "vocabulary is shared")
    tie_output: bool = setting(True, help="tie the output projection to the target embedding (paper, sec. 3.4)")
    position_offset_max: int = setting(0, help="training only: each sequence's positions start at a random "
                                               "offset in [0, this] (see position_offsets), so "
                                               "positions past the training lengths are seen (UT paper); 0 = off")
    position_offsets: str = setting("shared", help="with position_offset_max: shared = one offset per pair for "
                                                   "source and target; independent = one each, so training also "
                                                   "sees source-target position distances beyond its lengths",
                                    choices=("shared", "independent"))
    source_positions: str = setting("forward", help="forward: source positions count up from the first token; "
                                                    "backward: they count down to the source's eos (0 there, "
                                                    "plus any offset), so the end of every source sits at the "
                                                    "same positions whatever its length",
                                    choices=("forward", "backward"))
    source_bos: bool = setting(False, help="start every source with the bos token inside the encoder, so its "
                                           "first position is marked as its eos marks the last (a reversing "
                                           "model sees where to stop)")
    max_positions: int = setting(1024, help="initial size of the sinusoid table; it grows for longer inputs")
    init: str = setting("xavier", help="xavier: Xavier-uniform linears, N(0, d^-0.5) embeddings "
                                       "(tensor2tensor/fairseq); torch: PyTorch defaults",
                        choices=("xavier", "torch"))


@dataclass
class TransformerSettings(CommonSettings):
    """The Transformer of Vaswani et al. 2017."""

    layers: int = setting(6, help="encoder and decoder layers N (paper: 6)")
    encoder_layers: int = setting(0, help="encoder layers (0 = same as layers)")
    decoder_layers: int = setting(0, help="decoder layers (0 = same as layers)")

    def validate(self) -> None:
        """Run by the recipe loader, so that a bad width fails before any data is prepared."""
        check_transformer(self)


@dataclass
class UniversalSettings(CommonSettings):
    """The Universal Transformer of Dehghani et al. 2019, with optional Adaptive Computation Time."""

    steps: int = setting(6, help="recurrent depth steps T without ACT (one shared layer applied T times)")
    act: bool = setting(False, help="Adaptive Computation Time: each position decides when to stop (Graves 2016)")
    act_max_steps: int = setting(8, help="most depth steps a position may take with ACT")
    act_epsilon: float = setting(0.01, help="a position halts once its halting probabilities pass 1 - epsilon")
    act_loss_weight: float = setting(0.01, help="weight of the ponder cost (mean N + R) added to the loss")
    act_halting_bias_init: float = setting(1.0, help="initial bias of the halting unit (higher halts sooner)")
    timestep_signal: str = setting("sinusoid", help="depth-step signal added at each step: sinusoid of t, "
                                                    "or learned (one vector per step)",
                                   choices=("sinusoid", "learned"))
    transition: str = setting("ffn", help="transition function: ffn (position-wise) or sepconv "
                                          "(depthwise-separable convolution, causal in the decoder)",
                              choices=("ffn", "sepconv"))
    conv_kernel: int = setting(3, help="kernel width of the sepconv transition")

    def validate(self) -> None:
        """Run by the recipe loader, so that a bad width fails before any data is prepared."""
        check_universal(self)


TRANSFORMER_PRESETS: dict[str, dict[str, object]] = {
    "base": {"layers": 6, "d_model": 512, "d_ff": 2048, "heads": 8, "dropout": 0.1},
    "big": {"layers": 6, "d_model": 1024, "d_ff": 4096, "heads": 16, "dropout": 0.3},
}

UNIVERSAL_PRESETS: dict[str, dict[str, object]] = {
    "base": {"steps": 6, "d_model": 512, "d_ff": 2048, "heads": 8, "dropout": 0.1},
    "big": {"steps": 6, "d_model": 1024, "d_ff": 4096, "heads": 16, "dropout": 0.3},
}


def check_common(settings: CommonSettings) -> None:
    """Raise a UserError naming the [model] key of a setting the model cannot be built with."""
    if settings.d_model <= 0 or settings.d_model % 2:
        raise UserError(f"[model] d_model = {settings.d_model}: use a positive even width (sinusoids pair up)")
    if settings.heads <= 0 or settings.d_model % settings.heads:
        raise UserError(f"[model] heads = {settings.heads} does not divide d_model = {settings.d_model}; "
                        "pick heads so that d_model / heads is a whole number")
    if settings.d_ff <= 0:
        raise UserError(f"[model] d_ff = {settings.d_ff}: use a positive width")
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        value = getattr(settings, key)
        if not 0.0 <= value < 1.0:
            raise UserError(f"[model] {key} = {value}: use a probability in [0, 1)")
    if settings.position_offset_max < 0:
        raise UserError(f"[model] position_offset_max = {settings.position_offset_max}: use 0 (off) or a "
                        "positive largest offset")
    if settings.max_positions <= 0:
        raise UserError(f"[model] max_positions = {settings.max_positions}: use a positive size")


def check_transformer(settings: TransformerSettings) -> None:
    """Validate Transformer settings (see check_common)."""
    check_common(settings)
    if settings.layers <= 0:
        raise UserError(f"[model] layers = {settings.layers}: use a positive count of layers")
    for key in ("encoder_layers", "decoder_layers"):
        if getattr(settings, key) < 0:
            raise UserError(f"[model] {key} = {getattr(settings, key)}: use a positive count, "
                            "or 0 for 'same as layers'")


def check_universal(settings: UniversalSettings) -> None:
    """Validate Universal Transformer settings (see check_common)."""
    check_common(settings)
    if settings.steps <= 0:
        raise UserError(f"[model] steps = {settings.steps}: use at least one depth step")
    if settings.act_max_steps <= 0:
        raise UserError(f"[model] act_max_steps = {settings.act_max_steps}: use at least one step")
    if settings.act_loss_weight < 0.0:
        raise UserError(f"[model] act_loss_weight = {settings.act_loss_weight}: use 0 (no ponder cost) or a "
                        "positive weight, e.g. 0.01")
    if not 0.0 < settings.act_epsilon < 1.0:
        raise UserError(f"[model] act_epsilon = {settings.act_epsilon}: use a value in (0, 1), e.g. 0.01")
    if settings.conv_kernel <= 0:
        raise UserError(f"[model] conv_kernel = {settings.conv_kernel}: use a positive kernel width")
