"""Word alignments of decoded outputs from the model's encoder-decoder attention (`seqxduce decode --alignments`),
in the Pharaoh format of fast_align and fairseq (`0-0 1-2 ...`: source word - target word, 0-based).

As fairseq's --print-alignment does: one layer's attention (the [decode] alignment_layer, default the
penultimate), averaged over heads ([decode] alignment_heads), read from a teacher-forced pass over the source and
the output, and each target token linked to the source token it attends to most. Unlike fairseq, the links are
between the words a user sees, not subword pieces: a source word receives the attention of all its pieces (their
sum), a target word attends as its pieces do on average, and eos is dropped on both sides. Words are the
whitespace words of the tokenizers' decoded text: for the target, the output's text before the task's
postprocess (for translation, the output as printed); for the source, the source as its tokenizer reads it (its
own words when the tokenizer keeps the spaces, as the built-in ones do).

The core asks the model through the optional Model.attention_weights capability (seqxduce.api); an ensemble
averages its members' alignment matrices, each read from that member's own layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from seqxduce.api import Model, Tokenizer, UserError
from seqxduce.data import encode_source, pad_sources
from seqxduce.decoding.decode import LoadedRun, Output


def word_of_pieces(tokenizer: Tokenizer, ids: Sequence[int]) -> list[int | None]:
    """For each id, the index of the whitespace word of tokenizer.decode(ids) that it spells: a piece that adds
    no letters (sentencepiece's lone '▁', a space token, a special id) goes with the word that follows it, and
    with none (None) at the end.

    Asked of the tokenizer's own decode of each prefix, so any tokenizer works without the core knowing how it
    marks word boundaries ('▁', '@@', a space token): the piece that makes the prefix's text one word longer
    starts a word, one that only adds characters continues the last."""
    words: list[int | None] = []
    letters, waiting = 0, []  # waiting: pieces of whitespace, for the next word
    for end in range(1, len(ids) + 1):
        split = tokenizer.decode(list(ids[:end])).split()
        now = sum(len(w) for w in split)
        if now > letters:
            for index in waiting:
                words[index] = len(split) - 1
            waiting = []
            words.append(len(split) - 1)
        else:
            waiting.append(end - 1)
            words.append(None)
        letters = now
    return words


def word_alignment(attention: torch.Tensor, source_words: Sequence[int | None],
                   target_words: Sequence[int | None]) -> list[tuple[int, int]]:
    """(source word, target word) links of an attention matrix (target pieces, source pieces) given each piece's
    word (None: no word, left out): per target word, the source word with the most attention, summed over its
    pieces and averaged over the target word's pieces (the average does not change the argmax; it keeps the
    matrix a distribution per target word)."""
    n_src = 1 + max((w for w in source_words if w is not None), default=-1)
    n_tgt = 1 + max((w for w in target_words if w is not None), default=-1)
    if n_src == 0 or n_tgt == 0:
        return []
    attention = attention.float()
    src_index = torch.tensor([-1 if w is None else w for w in source_words])
    tgt_index = torch.tensor([-1 if w is None else w for w in target_words])
    # pieces to words: a (pieces, words) one-hot matrix per side, the pieces without a word in no column
    to_src = (src_index.unsqueeze(1) == torch.arange(n_src).unsqueeze(0)).float()  # (S, n_src)
    to_tgt = (tgt_index.unsqueeze(1) == torch.arange(n_tgt).unsqueeze(0)).float()  # (T, n_tgt)
    words = to_tgt.T @ attention[: len(target_words), : len(source_words)] @ to_src  # (n_tgt, n_src)
    words = words / to_tgt.sum(dim=0).clamp(min=1).unsqueeze(1)
    best = words.argmax(dim=1).tolist()
    return [(s, t) for t, s in enumerate(best)]


def pharaoh(links: Sequence[tuple[int, int]]) -> str:
    """Links as one Pharaoh line: `source-target` pairs, space-separated, in target order."""
    return " ".join(f"{s}-{t}" for s, t in sorted(links, key=lambda link: (link[1], link[0])))


def layer_of(count: int, layer: int) -> int:
    """0-based index of the 1-based [decode] alignment_layer among count layers (negative: from the end, a model
    with fewer layers than asked back from its first)."""
    if layer > count:
        raise UserError(f"[decode] alignment_layer = {layer}: the model has {count} layers (or depth steps); give "
                        f"1..{count}, or -1 for the last")
    return layer - 1 if layer > 0 else max(count + layer, 0)


def cross_attention(model: Model, src: torch.Tensor, tgt_in: torch.Tensor, layer: int, heads: int,
                    what: str) -> torch.Tensor:
    """The encoder-decoder attention (B, T, S) of one layer averaged over its first `heads` heads (0 = all), from a
    teacher-forced pass; an ensemble's members averaged. `what` names the model in the error of one that does
    not expose its weights."""
    from seqxduce.decoding.ensemble import EnsembleModel

    if isinstance(model, EnsembleModel):
        maps = [cross_attention(m, src, tgt_in, layer, heads, what) for m in model.members]
        return torch.stack(maps).mean(dim=0)
    ask = getattr(model, "attention_weights", None)  # optional in the Model contract
    weights = ask(src, tgt_in) if ask is not None else None
    if weights is None or not weights.cross:
        raise UserError(f"{what} does not expose its attention weights (Model.attention_weights); decode without "
                        "--alignments")
    chosen = weights.cross[layer_of(len(weights.cross), layer)]  # (B, H, T, S)
    if heads > chosen.size(1):
        raise UserError(f"[decode] alignment_heads = {heads}: the model has {chosen.size(1)} heads; give "
                        f"1..{chosen.size(1)}, or 0 for all")
    return chosen[:, : heads or None].float().mean(dim=1)


def align_outputs(run: LoadedRun, outputs: Sequence[Output]) -> list[str]:
    """One Pharaoh line per line that decode prints (engine.format_outputs): per output its best hypothesis's
    alignment, or with an n-best list one line per hypothesis."""
    src_tok, tgt_tok = run.tokenizers.src, run.tokenizers.tgt
    core = run.recipe.decode.core
    what = f"{run.run_dir}: model [model] name = {run.recipe.model.core.name!r}"
    # what each printed line shows: an output's best hypothesis, or each of its n-best; None: no hypothesis at all
    shown: list[tuple[str, list[int]] | None] = []
    for o in outputs:
        hyps = o.nbest if len(o.nbest) > 1 else o.nbest[:1]
        shown.extend([(o.source, hyp.tokens) for _, hyp in hyps] or [None])
    pairs = [p for p in shown if p is not None]
    links: list[str] = []
    for start in range(0, len(pairs), core.batch_size):
        chunk = pairs[start:start + core.batch_size]
        sources = [encode_source(src_tok, s) for s, _ in chunk]
        src = pad_sources(sources, src_tok.pad_id).to(run.device)  # (B, S)
        tgt_in = pad_sources([[tgt_tok.bos_id] + t for _, t in chunk], tgt_tok.pad_id).to(run.device)  # (B, T)
        with torch.no_grad():
            attention = cross_attention(run.model, src, tgt_in, core.alignment_layer, core.alignment_heads,
                                        what).cpu()
        for row, (s_ids, (_, tokens)) in enumerate(zip(sources, chunk)):
            # the source's eos and the target's (the last row) belong to no word
            links.append(pharaoh(word_alignment(attention[row], word_of_pieces(src_tok, s_ids[:-1]),
                                                word_of_pieces(tgt_tok, tokens))))
    found = iter(links)
    return ["" if p is None else next(found) for p in shown]
