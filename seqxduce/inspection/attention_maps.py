"""The attention weights of a trained run for one sentence, with the tokens on both axes (`seqxduce attention`).

The core asks the model for them through the optional Model.attention_weights capability (seqxduce.api); it
never looks inside a model. Per-position figures from Model.annotate (a Universal Transformer's ponder counts)
come along, to be drawn beside the rows they belong to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from seqxduce.api import UserError
from seqxduce.data import encode_source
from seqxduce.decoding.decode import LoadedRun, decode_lines

KINDS = ("encoder", "decoder", "cross")
KIND_TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention",
               "cross": "encoder-decoder attention"}


@dataclass
class AttentionView:
    """One sentence pair's attention maps, as (H, queries, keys) tensors per kind and layer, and its tokens.

    Decoder position j reads input_tokens[j] (bos, then the output) and chooses output_tokens[j] (the output,
    then eos): decoder self-attention has input tokens on both axes, encoder-decoder attention the output
    tokens chosen on its rows and the source tokens on its columns."""

    source_tokens: list[str]  # what the encoder reads: the source's tokens and eos
    input_tokens: list[str]
    output_tokens: list[str]
    maps: dict[str, list[torch.Tensor]]  # kind -> per layer (or depth step): (H, Lq, Lk)
    unit: str = "layer"
    output_text: str = ""
    figures: dict[str, list[float]] = field(default_factory=dict)  # source_* / target_* per-position figures

    def rows(self, kind: str) -> list[str]:
        """The tokens of one kind's queries."""
        return {"encoder": self.source_tokens, "decoder": self.input_tokens, "cross": self.output_tokens}[kind]

    def columns(self, kind: str) -> list[str]:
        """The tokens of one kind's keys."""
        return {"encoder": self.source_tokens, "decoder": self.input_tokens, "cross": self.source_tokens}[kind]

    def row_figures(self, kind: str) -> dict[str, list[float]]:
        """The per-position figures that belong to one kind's rows (source figures to encoder rows)."""
        side = "source_" if kind == "encoder" else "target_"
        return {name: values for name, values in self.figures.items() if name.startswith(side)}


def attention_view(run: LoadedRun, source: str, target: str | None = None) -> AttentionView:
    """The attention maps of source and its output: the run's decoder's best output, or `target` as given."""
    model, src_tok, tgt_tok = run.model, run.tokenizers.src, run.tokenizers.tgt
    ask = getattr(model, "attention_weights", None)  # optional in the Model contract
    if ask is None:
        raise UserError(f"{run.run_dir}: model [model] name = {run.recipe.model.core.name!r} does not expose "
                        "its attention weights (Model.attention_weights)")
    if target is None:
        best = decode_lines(run, [source])[0]
        tokens, text = best.nbest[0][1].tokens if best.nbest else [], best.text
    else:
        tokens, text = tgt_tok.encode(target), target
    src_ids = encode_source(src_tok, source)
    src = torch.tensor([src_ids], device=run.device)  # (1, S)
    tgt_in = torch.tensor([[tgt_tok.bos_id] + tokens], device=run.device)  # (1, T)
    with torch.no_grad():
        weights = ask(src, tgt_in)
    if weights is None:
        raise UserError(f"{run.run_dir}: model [model] name = {run.recipe.model.core.name!r} does not expose "
                        "its attention weights (Model.attention_weights)")
    annotate = getattr(model, "annotate", None)
    with torch.no_grad():
        figures = annotate(src, tgt_in) if annotate is not None else {}
    maps = {kind: [w[0].float().cpu() for w in weights.of(kind)] for kind in KINDS}  # (H, Lq, Lk) each
    return AttentionView(
        source_tokens=[src_tok.id_to_token(i) for i in src_ids],
        input_tokens=[tgt_tok.id_to_token(i) for i in [tgt_tok.bos_id] + tokens],
        output_tokens=[tgt_tok.id_to_token(i) for i in tokens + [tgt_tok.eos_id]],
        maps=maps, unit=weights.unit, output_text=text,
        figures={name: values[0].float().cpu().tolist() for name, values in figures.items()},
    )


def select(count: int, wanted: Sequence[int] | None, what: str) -> list[int]:
    """0-based indices of the 1-based `wanted` (negative counts from the end) among count; None: all."""
    if wanted is None:
        return list(range(count))
    chosen = []
    for number in wanted:
        index = number - 1 if number > 0 else count + number
        if number == 0 or not 0 <= index < count:
            raise UserError(f"--{what} {number}: the model has {count} {what} (give 1..{count}, or -1 for the last)")
        chosen.append(index)
    return chosen
