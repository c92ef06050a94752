"""Token embeddings (shared or tied as configured), the position signal (sinusoids or learned), and weight init."""

from __future__ import annotations

import math

import torch
from torch import nn

from seqxduce.api import UserError, VocabInfo

from .char_ngrams import CharNgramEmbedding, NgramSpec
from .settings import CommonSettings


def sinusoid_table(length: int, dim: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (paper, sec. 3.5): (length, dim).

    layout "halves" puts the same d/2 sines in dimensions 0..d/2-1 and the cosines after them (Marian's and
    tensor2tensor's layout); its angles are computed as pos / 10000^(2i/d), as Marian's converter does, so that
    an imported model sees the table it was trained with to the last bit of float32."""
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    table = torch.zeros(length, dim, dtype=torch.float64)
    if layout == "halves":
        angle = position / torch.pow(10000.0, torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (L, d/2)
        table[:, : dim // 2] = torch.sin(angle)
        table[:, dim // 2:] = torch.cos(angle)
        return table.float()
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))  # (d/2,)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table.float()  # float64 first: positions in the thousands lose digits in float32 products


class SinusoidalPositions(nn.Module):
    """The sinusoid table for positions offset..offset+length-1; it grows when a longer input comes."""

    def __init__(self, dim: int, size: int, layout: str = "interleaved"):
        super().__init__()
        self.dim = dim
        self.layout = layout
        # not persistent: it is a function of (size, dim), and a grown table must not break checkpoints
        self.register_buffer("table", sinusoid_table(size, dim, layout), persistent=False)

    def _grow(self, end: int) -> None:
        if end > self.table.size(0):
            self.table = sinusoid_table(max(end, 2 * self.table.size(0)), self.dim, self.layout).to(self.table.device)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        """(length, dim) position signal starting at position `offset`."""
        self._grow(offset + length)
        return self.table[offset:offset + length]

    def rows(self, length: int, offsets: torch.Tensor) -> torch.Tensor:
        """(B, length, dim) position signal, row b starting at position offsets[b] (offsets: (B,) ints)."""
        self._grow(int(offsets.max()) + length)
        index = offsets.to(self.table.device).unsqueeze(1) + torch.arange(length, device=self.table.device)  # (B, L)
        return self.table[index]

    def backward_rows(self, pad: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L, dim) position signal counting down to each row's last real token, which gets offsets[b]
        (0 without offsets); pad (B, L) marks right padding, whose positions are clamped to that last one."""
        real = (~pad).sum(dim=1, keepdim=True)  # (B, 1)
        index = (real - 1 - torch.arange(pad.size(1), device=pad.device)).clamp(min=0)  # (B, L)
        if offsets is not None:
            index = index + offsets.to(pad.device).unsqueeze(1)
        self._grow(int(index.max()) + 1)
        return self.table[index.to(self.table.device)]


def prepend_bos(src: torch.Tensor, bos_id: int) -> torch.Tensor:
    """src (B, S) -> (B, S + 1) with bos_id in front of every row."""
    return torch.cat([torch.full_like(src[:, :1], bos_id), src], dim=1)


class LearnedPositions(nn.Module):
    """One trained vector per position 0..size-1 (Table 3 row E); a position past the table is a UserError.

    The table cannot grow: positions never trained have no vector. It is an nn.Embedding, so the model's
    init gives it N(0, d^-0.5) like the token embeddings (as fairseq's learned positions).
    """

    def __init__(self, dim: int, size: int):
        super().__init__()
        self.table = nn.Embedding(size, dim)

    def _check(self, end: int) -> None:
        size = self.table.num_embeddings
        if end > size:
            raise UserError(f"[model] max_positions = {size}: an input reaches position {end - 1}, past the "
                            f"{size} learned positions (positions = \"learned\"); train with a larger "
                            "max_positions, or keep inputs and decoded outputs shorter (train.max_source_len, "
                            "train.max_target_len, decode.max_len_b)")

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        """(length, dim) position vectors starting at position `offset`."""
        self._check(offset + length)
        return self.table.weight[offset:offset + length]

    def rows(self, length: int, offsets: torch.Tensor) -> torch.Tensor:
        """(B, length, dim) position vectors, row b starting at position offsets[b] (offsets: (B,) ints)."""
        self._check(int(offsets.max()) + length)
        device = self.table.weight.device
        index = offsets.to(device).unsqueeze(1) + torch.arange(length, device=device)  # (B, L)
        return self.table(index)  # (B, L, C)


def make_positions(kind: str, dim: int, size: int, layout: str = "interleaved"
                   ) -> SinusoidalPositions | LearnedPositions:
    """The position signal a model's `positions` (and `sinusoid_layout`) settings name."""
    return LearnedPositions(dim, size) if kind == "learned" else SinusoidalPositions(dim, size, layout)


def training_offsets(module: nn.Module, offset_max: int, batch: int, device: torch.device) -> torch.Tensor | None:
    """(B,) random first positions in [0, offset_max], one per sequence, while `module` trains; else None.

    Drawn from torch's global generator, so the trainer's per-step seed makes them reproducible.
    """
    if not module.training or offset_max <= 0:
        return None
    return torch.randint(0, offset_max + 1, (batch,), device=device)


def training_offset_pair(module: nn.Module, offset_max: int, mode: str, batch: int, device: torch.device
                         ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(source, target) first positions (B,) each while `module` trains: one draw for both when mode is
    "shared", two independent draws when "independent"; (None, None) in eval mode or with offset_max 0."""
    source = training_offsets(module, offset_max, batch, device)
    if source is None or mode == "shared":
        return source, source
    return source, training_offsets(module, offset_max, batch, device)


class Embeddings(nn.Module):
    """Source and target embeddings scaled by sqrt(d_model) (or not, scale = False), and the output projection to
    target logits, with a fixed bias added when output_bias is set (Marian's final_logits_bias).

    With share_embeddings and a shared vocabulary one matrix serves all three (paper, sec. 3.4), as it does with
    share_source_target for two tokenizers over one id space; otherwise the output projection is still tied to
    the target embedding when tie_output is set.
    """

    def __init__(self, vocab: VocabInfo, d_model: int, share_embeddings: bool, tie_output: bool,
                 char_ngrams: NgramSpec | None = None, scale: bool = True, output_bias: bool = False,
                 share_source_target: bool = False):
        super().__init__()
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.target = nn.Embedding(vocab.tgt_size, d_model, padding_idx=vocab.pad_id)
        if share_source_target:
            if vocab.src_size != vocab.tgt_size:
                raise UserError(f"[model] share_source_target: the source vocabulary has {vocab.src_size} ids and "
                                f"the target's {vocab.tgt_size}; one matrix needs one id space: set "
                                "share_source_target = false")
            self.source = self.target
        elif share_embeddings and vocab.shared:
            if vocab.src_size != vocab.tgt_size:
                raise UserError(f"[model] share_embeddings: the vocabulary is marked shared but has "
                                f"{vocab.src_size} source and {vocab.tgt_size} target ids; set "
                                "share_embeddings = false or use one vocabulary")
            self.source = self.target
        else:
            self.source = nn.Embedding(vocab.src_size, d_model, padding_idx=vocab.pad_id)
        self.spelling = None if char_ngrams is None else _spelling(vocab, d_model, char_ngrams)
        self.output = nn.Linear(d_model, vocab.tgt_size, bias=False)
        if tie_output or (share_embeddings and vocab.shared):
            self.output.weight = self.target.weight
        if output_bias:
            # a buffer, not a parameter: Hugging Face's Marian keeps final_logits_bias fixed in fine-tuning too
            self.register_buffer("output_bias", torch.zeros(vocab.tgt_size))
        else:
            self.output_bias = None

    def embed_source(self, src: torch.Tensor) -> torch.Tensor:
        """(B, S) ids -> (B, S, C) scaled embeddings (plus the spelling's n-grams with char_ngrams)."""
        if self.spelling is None:
            return self.source(src) * self.scale
        return (self.source(src) + self.spelling(src)) * self.scale

    def embed_target(self, tgt: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, C) scaled embeddings."""
        return self.target(tgt) * self.scale

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(..., C) decoder states -> (..., V) target logits."""
        logits = self.output(x)
        return logits if self.output_bias is None else logits + self.output_bias.to(logits.dtype)


def char_ngram_spec(settings: CommonSettings) -> NgramSpec | None:
    """The character n-grams a model's char_ngrams settings ask for; None when off."""
    if not settings.char_ngrams:
        return None
    return NgramSpec(settings.char_ngrams_min, settings.char_ngrams, settings.char_ngram_buckets)


def _spelling(vocab: VocabInfo, d_model: int, spec: NgramSpec) -> CharNgramEmbedding:
    if len(vocab.src_tokens) != vocab.src_size:
        raise UserError(f"[model] char_ngrams = {spec.longest}: the model needs the spelling of its "
                        f"{vocab.src_size} source entries, and its builder gave {len(vocab.src_tokens)}; "
                        "build it through seqxduce (Tokenizers.vocab() gives them), or set char_ngrams = 0")
    return CharNgramEmbedding(vocab.src_tokens, d_model, spec, skip={vocab.pad_id, vocab.bos_id, vocab.eos_id})


def init_xavier(model: nn.Module, d_model: int) -> None:
    """Xavier-uniform linear weights, zero biases, N(0, d^-0.5) embeddings with a zero pad row.

    Embeddings go last so that an output projection tied to them keeps the embedding init (as fairseq).
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=d_model**-0.5)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
