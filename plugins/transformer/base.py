"""What the Transformer and the Universal Transformer share: the embeddings and positions they start with, the
final LayerNorms of pre-norm stacks, the learning-rate schedule's width, and the beam reorder of memory and cache.

The subclasses build their layers between EncoderDecoderBase.__init__ and finish_init(), so parameters are
created, initialised and listed (state_dict keys, optimizer order) exactly as before this base existed.
"""

from __future__ import annotations

import torch
from torch import nn

from seqxduce.api import ExportRequest, Model, VocabInfo

from .dropout import Dropout
from .embedding import Embeddings, char_ngram_spec, init_xavier, make_positions
from .settings import CommonSettings
from .state import DecoderCache, Memory


def final_norm(d_model: int, pre_norm: bool) -> nn.Module:
    """Pre-norm stacks end in a LayerNorm (their residual stream is never normalised); post-norm needs none."""
    return nn.LayerNorm(d_model) if pre_norm else nn.Identity()


class EncoderDecoderBase(nn.Module, Model):
    """Embeddings, positions and embedding dropout; finish_init() adds the final norms and the initialisation."""

    def __init__(self, settings: CommonSettings, vocab: VocabInfo):
        super().__init__()
        s = settings
        self.settings = s
        self.vocab = vocab
        self.embeddings = Embeddings(vocab, s.d_model, s.share_embeddings, s.tie_output, char_ngrams=char_ngram_spec(s),
                                     scale=s.scale_embeddings, output_bias=s.output_bias,
                                     share_source_target=s.share_source_target)
        self.positions = make_positions(s.positions, s.d_model, s.max_positions, s.sinusoid_layout)
        self.embed_drop = Dropout(s.dropout)

    def finish_init(self) -> None:
        """The final norms (after the layers, as the parameter order has always been) and the initialisation."""
        s = self.settings
        self.encoder_norm = final_norm(s.d_model, s.norm == "pre")
        self.decoder_norm = final_norm(s.d_model, s.norm == "pre")
        if s.init == "xavier":
            init_xavier(self, s.d_model)

    @property
    def schedule_width(self) -> int:
        """d_model, for the learning-rate schedule."""
        return self.settings.d_model

    @property
    def positions_limit(self) -> int:
        """[model] max_positions: where learned positions end, the sinusoid table's first size."""
        return self.settings.max_positions

    def reorder(self, memory: Memory, cache: DecoderCache | None,
                index: torch.Tensor) -> tuple[Memory, DecoderCache | None]:
        """Keep search rows `index` (B',) of memory and cache (cache may be None); memory rows and cross-attention
        keys/values move only when a source leaves (state.plan_rows)."""
        plan = memory.plan(index)
        return memory.take(plan), None if cache is None else cache.select(index, plan)

    def ct2_refusal(self) -> str | None:
        """Why CTranslate2 cannot hold this model class at all, in one line; None when it can (ct2_export.py then
        checks the settings)."""
        return None

    def hf_refusal(self) -> str | None:
        """Why no transformers class computes this model class, in one line; None when Marian's may (hf_export.py
        then checks the settings)."""
        return None

    def export(self, request: ExportRequest) -> bool:
        """To CTranslate2 (ct2_export.py) or a Hugging Face Marian folder (hf_export.py), each refusing what it
        cannot hold (the Universal Transformer, ...)."""
        if request.engine == "ctranslate2":
            from .ct2_export import export_ctranslate2

            export_ctranslate2(self, request)
            return True
        if request.engine == "huggingface":
            from .hf_export import export_huggingface

            export_huggingface(self, request)
            return True
        return False
