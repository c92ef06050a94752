"""BLEU and chrF through sacrebleu, and two tokenized BLEUs of the literature, clearly labelled as such: the WMT
paper style (13a tokens, compounds split) and the Multi30k papers' (lowercased, Moses-tokenized)."""

from __future__ import annotations

import re

from seqxduce.api import Report, UserError

COMPOUND = re.compile(r"(\S)-(\S)")


def split_compounds(line: str) -> str:
    """Split hyphenated compounds as the tensor2tensor/fairseq WMT14 scripts do ("a-b" -> "a ##AT##-##AT## b")."""
    return COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def paper_tokenize(lines: list[str]) -> list[str]:
    """13a-tokenize and split compounds: the tokenized-BLEU convention of the paper's era (multi-bleu.perl)."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    tokenize = Tokenizer13a()
    return [split_compounds(tokenize(line)) for line in lines]


def moses_lowercase(lines: list[str], lang: str) -> list[str]:
    """Lowercase, then Moses-tokenize (sacremoses, the Perl tokenizer.perl's port; -l lang): the text that
    Multi30k papers of the fairseq era score with whitespace tokens (Wu et al. 2021, the Multi30k task's own
    lowercased tokenized files). Not escaped: '&apos;' for "'" renames a token without moving a boundary, so
    BLEU is the same either way."""
    from sacremoses import MosesTokenizer

    tokenize = MosesTokenizer(lang=lang or "en")
    return [tokenize.tokenize(line.lower(), escape=False, return_str=True) for line in lines]


def score_translations(hypotheses: list[str], references: list[str], tgt_lang: str = "",
                       tokenized_bleu: bool = False, literature_bleu: bool = False,
                       more_references: list[list[str]] | None = None) -> Report:
    """sacreBLEU and chrF of detokenized hypotheses against raw references (and more_references: further
    reference streams, each one line per hypothesis, scored together as sacreBLEU scores several references),
    with sacrebleu's signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    streams = [references, *(more_references or [])]
    for stream in streams:
        if len(hypotheses) != len(stream):
            raise UserError(f"{len(hypotheses)} hypotheses for {len(stream)} references: give one per reference")
    bleu = BLEU(trg_lang=tgt_lang)
    chrf = CHRF()
    bleu_score = bleu.corpus_score(hypotheses, streams)
    chrf_score = chrf.corpus_score(hypotheses, streams)
    # lowercased BLEU (sacrebleu -lc) is what most Multi30k papers quote; cased stays the primary figure
    bleu_lc = BLEU(trg_lang=tgt_lang, lowercase=True)
    lc_score = bleu_lc.corpus_score(hypotheses, streams)
    bleu_signature, chrf_signature = str(bleu.get_signature()), str(chrf.get_signature())
    metrics = {"bleu": bleu_score.score, "chrf": chrf_score.score, "bleu_bp": bleu_score.bp,
               "bleu_lc": lc_score.score}
    lines = [bleu_score.format(signature=bleu_signature), chrf_score.format(signature=chrf_signature),
             lc_score.format(signature=str(bleu_lc.get_signature()))]
    if tokenized_bleu:
        tokenized = BLEU(tokenize="none", force=True)
        tok_score = tokenized.corpus_score(paper_tokenize(hypotheses), [paper_tokenize(s) for s in streams])
        metrics["bleu_tokenized"] = tok_score.score
        lines.append(f"tokenized BLEU (13a tokens + ##AT## compound splitting, paper style; NOT sacreBLEU, "
                     f"not comparable across tokenizations) = {tok_score.score:.2f}")
    if literature_bleu:
        # sacrebleu --tokenize none on text tokenized beforehand: BLEU over the Moses tokens as they are
        literature = BLEU(tokenize="none", force=True)
        lit_score = literature.corpus_score(moses_lowercase(hypotheses, tgt_lang),
                                            [moses_lowercase(s, tgt_lang) for s in streams])
        metrics["bleu_moses_lc"] = lit_score.score
        lines.append(f"literature BLEU (lowercased, Moses-tokenized with sacremoses -l {tgt_lang or 'en'}, "
                     f"then sacreBLEU tokenize=none: Multi30k papers' figure, NOT sacreBLEU) = {lit_score.score:.2f}")
    return Report(metrics=metrics, primary="bleu", text="\n".join(lines), signature=bleu_signature,
                  table={"bleu": "BLEU", "chrf": "chrF"})
