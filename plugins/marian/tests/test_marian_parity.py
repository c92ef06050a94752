"""An imported Marian model decodes as Hugging Face's generate() does (greedy and beam), and its CTranslate2
export as CTranslate2's own converter of the same folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import cli
from seqxduce.rundir import RunDir

SOURCES = 300
MAX_NEW_TOKENS = 30  # Hugging Face's limit, eos included: seqxduce's max_len_b = 29 with max_len_a = 0


def _sources() -> list[str]:
    from seqxduce_marian.testing import sentences

    return sentences(SOURCES, seed=5)


def _source_ids(run: Path, sources: list[str]) -> list[list[int]]:
    rundir = RunDir(run)
    src = rundir.tokenizers.load(rundir.load_recipe()).src
    return [src.encode(s) + [src.eos_id] for s in sources]


def test_tokenization_matches_hugging_face(marian_folder: Path, marian_run: Path) -> None:
    from transformers import MarianTokenizer

    hf = MarianTokenizer(str(marian_folder / "source.spm"), str(marian_folder / "target.spm"),
                         str(marian_folder / "vocab.json"))
    sources = _sources() + [">>unknown<< the cat", "ünïcödé words 123"]
    assert _source_ids(marian_run, sources) == [hf(s)["input_ids"] for s in sources]


@pytest.mark.parametrize(("beam", "penalty"), [(1, 0.0), (4, 0.0), (4, 1.0)])
def test_decoding_matches_generate(marian_folder: Path, marian_run: Path, beam: int, penalty: float) -> None:
    """>= 99% of the outputs equal generate()'s (length_penalty p as decode.length_penalty = "power", alpha = p;
    its forced eos at the limit as limit_eos = "free"), the log-probabilities of equal outputs within 1e-4 (an
    output at the limit: without generate's free eos)."""
    from seqxduce_marian.testing import hf_generate

    sources = _sources()
    reference = hf_generate(marian_folder, _source_ids(marian_run, sources), beam, MAX_NEW_TOKENS,
                            length_penalty=penalty)
    overrides = ["decode.max_len_a=0", f"decode.max_len_b={MAX_NEW_TOKENS - 1}"]
    overrides += ["decode.name=greedy"] if beam == 1 else ["decode.name=beam", f"decode.beam={beam}",
                                                           f"decode.alpha={penalty}", "decode.length_penalty=power",
                                                           "decode.limit_eos=free", "decode.early_stopping=never"]
    outputs = seqxduce.decode(marian_run, sources, overrides=overrides)
    equal = [(out.nbest[0][1], ref) for out, ref in zip(outputs, reference) if out.nbest[0][1].tokens == ref[0]]
    assert len(equal) >= 0.99 * SOURCES
    gaps = [abs(hyp.logprob - ref[1]) for hyp, ref in equal if len(ref[0]) < MAX_NEW_TOKENS - 1]
    assert max(gaps) < 1e-4
    assert len({tuple(ref[0]) for ref in reference}) > 10  # the outputs depend on the source


def test_decode_command(marian_run: Path, tmp_path: Path) -> None:
    """The CLI decodes a file with the imported recipe's own [decode] (beam 4, from generation_config.json)."""
    source = tmp_path / "in.txt"
    source.write_text("the cat sat on the mat\na big dog\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["decode", str(marian_run), "--input", str(source), "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "o").read_text(encoding="utf-8").splitlines()
    expected = [o.text for o in seqxduce.decode(marian_run, ["the cat sat on the mat", "a big dog"])]
    assert lines == expected and all(lines)


def test_export_decodes_like_ctranslate2_converter(marian_folder: Path, marian_run: Path, tmp_path: Path) -> None:
    """`seqxduce export --to ctranslate2` of the import and ct2-transformers-converter of the folder give the same
    greedy and beam outputs (as pieces: CTranslate2's converter drops <pad> from the vocabulary, where our export
    keeps it as the decoder's start and `decode --engine ctranslate2` bans it, as here; its models take the
    source's </s> from the caller, ours add it)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    ours = tmp_path / "ours"
    result = CliRunner().invoke(cli, ["export", str(marian_run), "--to", "ctranslate2", "-o", str(ours)])
    assert result.exit_code == 0, result.output
    theirs = tmp_path / "theirs"
    TransformersConverter(str(marian_folder)).convert(str(theirs))
    rundir = RunDir(marian_run)
    src = rundir.tokenizers.load(rundir.load_recipe()).src
    batch = [[src.id_to_token(i) for i in src.encode(s)] for s in _sources()]
    for beam in (1, 4):
        options = dict(beam_size=beam, max_decoding_length=MAX_NEW_TOKENS, length_penalty=0.0)
        got = [ctranslate2.Translator(str(ours), device="cpu").translate_batch(
                   batch, suppress_sequences=[["<pad>"]], **options),
               ctranslate2.Translator(str(theirs), device="cpu").translate_batch(
                   [tokens + ["</s>"] for tokens in batch], **options)]
        same = sum(a.hypotheses[0] == b.hypotheses[0] for a, b in zip(*got))
        assert same >= 0.99 * SOURCES, (beam, same)


def test_detokenization_matches_hugging_face(marian_folder: Path, tmp_path: Path) -> None:
    """Every piece of the joint vocabulary, alone and in every pair, and random sequences decode as
    MarianTokenizer.decode(ids, skip_special_tokens=True): pieces only the source model has (the tiny model's
    vocab.json is the union of a unigram and a BPE model's), a language tag and a piece neither model has."""
    import json
    import random
    import shutil

    from seqxduce_marian.tokenizer import MarianTokenizer as Ours
    from seqxduce_marian.tokenizer import read_vocab
    from transformers import MarianTokenizer

    for name in ("source.spm", "target.spm"):
        shutil.copyfile(marian_folder / name, tmp_path / name)
    mapping = json.loads((marian_folder / "vocab.json").read_text(encoding="utf-8"))
    for extra in (">>fra<<", "\u2581highchair", "chair\u2581"):
        mapping[extra] = len(mapping)
    (tmp_path / "vocab.json").write_text(json.dumps(mapping), encoding="utf-8")
    hf = MarianTokenizer(str(tmp_path / "source.spm"), str(tmp_path / "target.spm"), str(tmp_path / "vocab.json"))
    ours = Ours()
    ours.use((tmp_path / "target.spm").read_bytes(), read_vocab(tmp_path / "vocab.json"), "target.spm")
    ids = list(range(len(mapping)))
    rng = random.Random(0)
    sequences = [[i] for i in ids] + [[i, j] for i in ids for j in ids]
    sequences += [[rng.choice(ids) for _ in range(rng.randint(3, 12))] for _ in range(500)]
    for use_source in (False, True):  # Hugging Face's default with one vocab.json is the source model
        wrong = [s for s in sequences
                 if ours.decode(s) != hf.decode(s, skip_special_tokens=True, use_source_tokenizer=use_source)]
        assert not wrong, [hf.convert_ids_to_tokens(s) for s in wrong[:3]]
    assert ours.decode([mapping["\u2581dog"], mapping["\u2581highchair"]]) == "dog highchair"
