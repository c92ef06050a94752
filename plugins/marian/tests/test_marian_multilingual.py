"""A multilingual Marian model (OPUS-MT's en-ROMANCE kind: the target chosen by a `>>fra<<` token at the start of
the source) imported: the importer learns its language tokens, `decode --tgt-lang fra` decodes exactly as
transformers' generate() does with `>>fra<<` written by hand (greedy and beam, every language), a language the
model has no token for is refused in one line listing its own, and its CTranslate2 export takes the language
too (issue #77, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import add_plugin_commands
from seqxduce.rundir import RunDir

LANGUAGES = ("fra", "por", "spa", "zho_Hans")
SOURCES = 40  # per language
MAX_NEW_TOKENS = 30  # Hugging Face's limit, eos included: seqxduce's max_len_b = 29 with max_len_a = 0


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MarianMTModel with a >>xx<< token per language, trained a few steps on a word order per language."""
    pytest.importorskip("transformers")
    from seqxduce_marian.testing import build_tiny_marian

    return build_tiny_marian(tmp_path_factory.mktemp("hf") / "tiny-marian-mul", languages=LANGUAGES)


@pytest.fixture(scope="module")
def run(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "marian-mul"
    result = CliRunner().invoke(add_plugin_commands(), ["import", str(folder), "--from", "marian", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "a multilingual model" in result.output and "decode --tgt-lang fra writes >>fra<<" in result.output
    return out


def _sources() -> list[str]:
    from seqxduce_marian.testing import sentences

    return sentences(SOURCES, seed=5)


def _hf_ids(folder: Path, texts: list[str]) -> list[list[int]]:
    """The ids transformers' MarianTokenizer gives texts (eos included)."""
    from transformers import MarianTokenizer

    hf = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"))
    return [hf(text)["input_ids"] for text in texts]


def test_the_import_learns_the_language_tokens(folder: Path, run: Path) -> None:
    from transformers import MarianTokenizer

    task = RunDir(run).load_recipe().task.settings
    assert (task.lang_tag, task.lang_tag_format, task.tgt_langs) == ("source", ">>{lang}<<", list(LANGUAGES))
    hf = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"))
    assert sorted(hf.supported_language_codes) == sorted(f">>{lang}<<" for lang in LANGUAGES)


@pytest.mark.parametrize(("beam", "penalty"), [(1, 0.0), (4, 1.0)])
def test_tgt_lang_decodes_as_generate_with_the_token_written_by_hand(folder: Path, run: Path, beam: int,
                                                                      penalty: float) -> None:
    """For every language: the outputs of --tgt-lang are those of the token written by hand, >= 99% of them
    equal generate()'s (as test_marian_parity's one-pair parity), the log-probabilities of equal outputs within
    1e-4; and the language changes what the model computes."""
    from seqxduce_marian.testing import hf_generate

    sources = _sources()
    overrides = ["decode.max_len_a=0", f"decode.max_len_b={MAX_NEW_TOKENS - 1}"]
    overrides += ["decode.name=greedy"] if beam == 1 else ["decode.name=beam", f"decode.beam={beam}",
                                                           f"decode.alpha={penalty}", "decode.length_penalty=power",
                                                           "decode.limit_eos=free", "decode.early_stopping=never"]
    logprobs, equal, gaps = {}, 0, []
    for lang in LANGUAGES:
        by_hand = [f">>{lang}<< {s}" for s in sources]
        outputs = seqxduce.decode(run, sources, overrides=overrides, tgt_lang=lang)
        assert [o.text for o in outputs] == [o.text for o in seqxduce.decode(run, by_hand, overrides=overrides)]
        reference = hf_generate(folder, _hf_ids(folder, by_hand), beam, MAX_NEW_TOKENS, length_penalty=penalty)
        for out, ref in zip(outputs, reference):
            hyp = out.nbest[0][1]
            if hyp.tokens == ref[0]:
                equal += 1
                if len(ref[0]) < MAX_NEW_TOKENS - 1:  # at the limit: without generate's free eos
                    gaps.append(abs(hyp.logprob - ref[1]))
        logprobs[lang] = [o.nbest[0][1].logprob for o in outputs]
    assert equal >= 0.99 * SOURCES * len(LANGUAGES)
    assert max(gaps) < 1e-4
    for lang in LANGUAGES[1:]:  # the token reached the model (so small a model may still write alike)
        assert logprobs[lang] != logprobs[LANGUAGES[0]], lang


def test_the_commands_take_the_language_and_refuse_one_the_model_lacks(run: Path, tmp_path: Path) -> None:
    given = tmp_path / "in.txt"
    sources = _sources()[:5]
    given.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    cli = add_plugin_commands()
    result = CliRunner().invoke(cli, ["decode", str(run), "--input", str(given), "--tgt-lang", "por"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [o.text for o in seqxduce.decode(run, [f">>por<< {s}" for s in sources])]
    # its source languages are not known (a Marian folder does not say them): a stated one changes nothing
    stated = CliRunner().invoke(cli, ["decode", str(run), "--input", str(given), "--tgt-lang", "por", "--src-lang",
                                      "eng"])
    assert stated.exit_code == 0 and stated.stdout == result.stdout and "notice" not in stated.stderr
    refused = CliRunner().invoke(cli, ["decode", str(run), "--input", str(given), "--tgt-lang", "deu"])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert refused.output.strip() == ("Error: --tgt-lang: target language 'deu': the model has no tag >>deu<<; it "
                                      "writes fra, por, spa, zho_Hans")


def test_the_ctranslate2_export_takes_the_language(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    export = seqxduce.export_run(run, tmp_path / "ct2").directory
    sources = _sources()
    overrides = ["decode.name=greedy", "decode.max_len_a=0", f"decode.max_len_b={MAX_NEW_TOKENS - 1}"]
    for lang in ("fra", "zho_Hans"):
        ours = seqxduce.decode(run, sources, overrides=overrides, tgt_lang=lang)
        theirs = seqxduce.decode(export, sources, overrides=overrides, tgt_lang=lang, engine="ctranslate2")
        same = sum(a.nbest[0][1].tokens == b.nbest[0][1].tokens for a, b in zip(ours, theirs))
        assert same >= 0.99 * SOURCES, (lang, same)
