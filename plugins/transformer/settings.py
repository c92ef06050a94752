"""Recipe settings of the Transformer and the Universal Transformer (torch-free: `seqxduce plugins` reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from seqxduce.api import Settings, UserError, setting


@dataclass
class CommonSettings(Settings):
    """Settings both models share: widths, dropout, normalisation, embedding sharing, positions, init."""

    d_model: int = setting(512, help="model width C, even (paper base: 512, big: 1024)", min=2)
    d_ff: int = setting(2048, help="inner width of the position-wise feed-forward / transition (base: 2048)", min=1)
    heads: int = setting(8, help="attention heads; d_model must be divisible by it unless d_k and d_v are set "
                                 "(base: 8, big: 16)", min=1)
    d_k: int = setting(0, help="query/key width per head (0 = d_model / heads; Table 3 rows A and B vary it)", min=0)
    d_v: int = setting(0, help="value width per head (0 = d_model / heads; Table 3 row A varies it)", min=0)
    attention_window: int = setting(0, help="restricted self-attention (paper sec. 4, Table 1): an encoder "
                                            "position attends to the r positions on each side of it, a decoder "
                                            "position to the r before it, and itself; 0 = unrestricted", min=0)
    dropout: float = setting(0.1, help="dropout on sublayer outputs and on embeddings+positions (base: 0.1)",
                             min=0.0, max=1.0, max_exclusive=True)
    attention_dropout: float = setting(0.0, help="dropout on attention weights (0 in the paper)", min=0.0, max=1.0,
                                       max_exclusive=True)
    activation_dropout: float = setting(0.0, help="dropout after the ReLU of the feed-forward (0 in the paper)",
                                        min=0.0, max=1.0, max_exclusive=True)
    norm: str = setting("post", help="post: x = LN(x + f(x)) as in the paper; pre: x = x + f(LN(x)), final LN",
                        choices=("post", "pre"))
    share_embeddings: bool = setting(True, help="one matrix for source, target and output embeddings when the "
                                                "vocabulary is shared")
    tie_output: bool = setting(True, help="tie the output projection to the target embedding (paper, sec. 3.4)")
    position_offset_max: int = setting(0, help="training only: each sequence's positions start at a random "
                                               "offset in [0, this] (see position_offsets), so "
                                               "positions past the training lengths are seen (UT paper); 0 = off",
                                      min=0)
    position_offsets: str = setting("shared", help="with position_offset_max: shared = one offset per pair for "
                                                   "source and target; independent = one each, so training also "
                                                   "sees source-target position distances beyond its lengths",
                                    choices=("shared", "independent"),
                                    ignored_when={"position_offset_max": (0,)},
                                    instead="set position_offset_max > 0 to draw offsets")
    source_positions: str = setting("forward", help="forward: source positions count up from the first token; "
                                                    "backward: they count down to the source's eos (0 there, "
                                                    "plus any offset), so the end of every source sits at the "
                                                    "same positions whatever its length (needs positions = "
                                                    "sinusoid)",
                                    choices=("forward", "backward"))
    source_bos: bool = setting(False, help="start every source with the bos token inside the encoder, so its "
                                           "first position is marked as its eos marks the last (a reversing "
                                           "model sees where to stop)")
    positions: str = setting("sinusoid", help="position signal: sinusoid (paper sec. 3.5) or learned (one "
                                              "trained vector per position, Table 3 row E)",
                             choices=("sinusoid", "learned"))
    max_positions: int = setting(1024, help="sinusoid: initial size of the table, which grows for longer inputs; "
                                            "learned: the number of positions learned, and a longer input is an "
                                            "error (keep train.max_*_len and decoded lengths below it)", min=1)
    char_ngrams: int = setting(0, help="character-aware source embeddings: each source entry's embedding adds the "
                                       "mean of hashed embeddings of its character n-grams of char_ngrams_min.."
                                       "this many characters (fastText; the entry lower-cased, in < >), so rare "
                                       "words share what their spelling says with common ones and an unknown-word "
                                       "class such as <unk-lc-ing> with the -ing words; 0 = off", min=0)
    char_ngrams_min: int = setting(3, help="shortest character n-gram of char_ngrams", min=1,
                                   ignored_when={"char_ngrams": (0,)}, instead="set char_ngrams > 0 to turn them on")
    char_ngram_buckets: int = setting(16384, help="hash buckets (embedding rows) of the character n-grams",
                                      min=1, ignored_when={"char_ngrams": (0,)},
                                      instead="set char_ngrams > 0 to turn them on")
    activation: str = setting("relu", help="activation of the feed-forward's inner layer: relu (paper), gelu (exact), "
                                           "gelu_tanh (its tanh approximation) or swish (x * sigmoid(x), "
                                           "Marian's)", choices=("relu", "gelu", "gelu_tanh", "swish"))
    sinusoid_layout: str = setting("interleaved", help="positions = sinusoid: interleaved = sin and cos in "
                                                       "alternate dimensions (paper, sec. 3.5); halves = every "
                                                       "sin first, then every cos (Marian, tensor2tensor)",
                                   choices=("interleaved", "halves"))
    scale_embeddings: bool = setting(True, help="multiply token embeddings by sqrt(d_model) (paper, sec. 3.4; "
                                                "Marian's scale_embedding)")
    output_bias: bool = setting(False, help="add a fixed bias to the output logits (Marian's final_logits_bias): "
                                            "it comes with imported weights and is not trained, as in Hugging "
                                            "Face's MarianMTModel; zeros in a model trained from scratch")
    share_source_target: bool = setting(False, help="one matrix for source and target embeddings although the two "
                                                    "sides have their own tokenizers ([tokenizer] shared = false) "
                                                    "over one id space, as Marian's two SentencePiece models with "
                                                    "one vocab.json; the two vocabulary sizes must agree")
    init: str = setting("xavier", help="xavier: Xavier-uniform linears, N(0, d^-0.5) embeddings "
                                       "(tensor2tensor/fairseq); torch: PyTorch defaults",
                        choices=("xavier", "torch"))

    def validate(self) -> None:
        """The widths' rules across keys (bounds are declared above)."""
        if self.d_model % 2:
            raise UserError(f"[model] d_model = {self.d_model}: use an even width (sinusoids pair up)")
        if (not self.d_k or not self.d_v) and self.d_model % self.heads:
            raise UserError(f"[model] heads = {self.heads} does not divide d_model = {self.d_model}; "
                            "pick heads so that d_model / heads is a whole number, or set d_k and d_v")
        if self.char_ngrams and self.char_ngrams < self.char_ngrams_min:
            raise UserError(f"[model] char_ngrams = {self.char_ngrams} is below char_ngrams_min = "
                            f"{self.char_ngrams_min}: give the longest n-gram (>= the shortest), or 0 for off")
        if self.sinusoid_layout != "interleaved" and self.positions != "sinusoid":
            raise UserError(f"[model] sinusoid_layout = {self.sinusoid_layout!r} applies to positions = \"sinusoid\" "
                            f"only; positions = {self.positions!r} given: remove sinusoid_layout")
        if self.source_positions == "backward" and self.positions != "sinusoid":
            raise UserError(f"[model] source_positions = \"backward\" needs positions = \"sinusoid\" (a learned "
                            f"table has no rows to count down from); positions = {self.positions!r} given")


@dataclass
class TransformerSettings(CommonSettings):
    """The Transformer of Vaswani et al. 2017."""

    layers: int = setting(6, help="encoder and decoder layers N (paper: 6)", min=1)
    encoder_layers: int = setting(0, help="encoder layers (0 = same as layers)", min=0)
    decoder_layers: int = setting(0, help="decoder layers (0 = same as layers)", min=0)

    def decode_time_keys(self) -> set[str]:
        """Keys `seqxduce decode --set model.KEY=...` may change: none changes the trained function."""
        return {"max_positions"} if self.positions == "sinusoid" else set()


# ACT's keys are read only with act = true (steps without it)
_WITH_ACT = {"ignored_when": {"act": (False,)}, "instead": "set act = true for Adaptive Computation Time"}


@dataclass
class UniversalSettings(CommonSettings):
    """The Universal Transformer of Dehghani et al. 2019, with optional Adaptive Computation Time."""

    steps: int = setting(6, help="recurrent depth steps T without ACT (one shared layer applied T times)", min=1,
                         ignored_when={"act": (True,)}, instead="with ACT, act_max_steps bounds the depth")
    act: bool = setting(False, help="Adaptive Computation Time: each position decides when to stop (Graves 2016)")
    act_max_steps: int = setting(8, help="most depth steps a position may take with ACT", min=1, **_WITH_ACT)
    act_epsilon: float = setting(0.01, help="a position halts once its halting probabilities pass 1 - epsilon",
                                 min=0.0, max=1.0, min_exclusive=True, max_exclusive=True, **_WITH_ACT)
    act_loss_weight: float = setting(0.01, help="weight of the ponder cost (mean N + R) added to the loss "
                                                "(0 = no ponder cost)", min=0.0, **_WITH_ACT)
    act_halting_bias_init: float = setting(1.0, help="initial bias of the halting unit (higher halts sooner)",
                                           **_WITH_ACT)
    timestep_signal: str = setting("sinusoid", help="depth-step signal added at each step: sinusoid of t, "
                                                    "or learned (one vector per step)",
                                   choices=("sinusoid", "learned"))
    transition: str = setting("ffn", help="transition function: ffn (position-wise) or sepconv "
                                          "(depthwise-separable convolution, causal in the decoder)",
                              choices=("ffn", "sepconv"))
    conv_kernel: int = setting(3, help="kernel width of the sepconv transition", min=1,
                               read_when={"transition": ("sepconv",)}, instead='set transition = "sepconv"')

    def decode_time_keys(self) -> set[str]:
        """Keys `seqxduce decode --set model.KEY=...` may change: the recurrence depth (the shared layer runs
        any number of times; paper sec. 2.1), and with ACT its halting threshold. A learned timestep signal has
        one vector per trained step, so its depth is fixed."""
        keys = {"max_positions"} if self.positions == "sinusoid" else set()
        if self.timestep_signal == "sinusoid":
            keys |= {"act_max_steps", "act_epsilon"} if self.act else {"steps"}
        return keys


TRANSFORMER_PRESETS: dict[str, dict[str, object]] = {
    "base": {"layers": 6, "d_model": 512, "d_ff": 2048, "heads": 8, "dropout": 0.1},
    "big": {"layers": 6, "d_model": 1024, "d_ff": 4096, "heads": 16, "dropout": 0.3},
}

UNIVERSAL_PRESETS: dict[str, dict[str, object]] = {
    "base": {"steps": 6, "d_model": 512, "d_ff": 2048, "heads": 8, "dropout": 0.1},
    "big": {"steps": 6, "d_model": 1024, "d_ff": 4096, "heads": 16, "dropout": 0.3},
}
