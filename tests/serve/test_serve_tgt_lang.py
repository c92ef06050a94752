"""`seqxduce serve` of a multilingual run (issue #77): a request's "tgt_lang" (or an input's own) decodes as
`decode --tgt-lang` does, a language the run never saw is a 422 listing those it knows, a zero-shot direction
is answered with a notice."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

import seqxduce
from tests.serve.test_serve import call, serving

pytest.importorskip("uvicorn", reason="the serve extra is not installed (pip install -e '.[serve]')")

WORDS = {"cat": ("Katze", "chat"), "dog": ("Hund", "chien"), "red": ("rot", "rouge"), "house": ("Haus", "maison"),
         "sees": ("sieht", "voit"), "a": ("ein", "un")}
RECIPE = """
[task]
name = "translation"
dataset = "files"
data_dir = "data"
lang_tag = "target"
max_ratio = 0
corpus = [{src_lang = "en", tgt_lang = "de"}, {src_lang = "en", tgt_lang = "fr"}]
[tokenizer]
name = "sentencepiece"
vocab_size = 50
[model]
name = "transformer"
layers = 1
d_model = 16
d_ff = 32
heads = 2
[train]
device = "cpu"
max_tokens = 200
max_steps = 6
warmup_steps = 4
validate_every = 0
checkpoint_every = 6
[decode]
name = "beam"
beam = 2
"""
SOURCES = ["a cat sees a dog", "a red house", "a dog"]


@pytest.fixture(scope="module")
def tagged_run(tmp_path_factory) -> Iterator[Path]:
    """en→de and en→fr, the language the decoder's first token, trained for seconds."""
    root = tmp_path_factory.mktemp("serve_tgt_lang")
    rng = random.Random(0)
    for split, n in (("train", 200), ("valid", 4), ("test", 4)):
        english = [" ".join(rng.choice(list(WORDS)) for _ in range(rng.randint(2, 5))) for _ in range(n)]
        for lang, column in (("en", None), ("de", 0), ("fr", 1)):
            lines = english if column is None else [" ".join(WORDS[w][column] for w in s.split()) for s in english]
            (root / "data").mkdir(exist_ok=True)
            (root / "data" / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "r.toml").write_text(RECIPE, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQXDUCE_CACHE", str(root / "cache"))
        patch.chdir(root)
        yield seqxduce.train(root / "r.toml", root / "run").run_dir


def test_a_language_per_request_decodes_as_decode_tgt_lang_does(tagged_run, tmp_path):
    expected = {lang: [o.text for o in seqxduce.decode(tagged_run, SOURCES, tgt_lang=lang)] for lang in ("de", "fr")}
    with serving(tagged_run, tmp_path, "--threads", "1") as server:
        for lang in ("de", "fr"):
            status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES, "tgt_lang": lang})
            assert status == 200, answer
            assert [hyps[0]["text"] for hyps in answer["outputs"]] == expected[lang] and "notices" not in answer
        status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": SOURCES[0], "tgt_lang": "fr"},
                                                                   SOURCES[1]], "tgt_lang": "de"})
        assert status == 200 and [hyps[0]["text"] for hyps in answer["outputs"]] == [expected["fr"][0],
                                                                                     expected["de"][1]]
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES[:1], "tgt_lang": "fr", "nbest": 2})
        assert status == 200 and all(h["text"].startswith("<2fr>") for h in answer["outputs"][0])  # the forced tag

        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES, "tgt_lang": "es"})
        assert status == 422 and answer["error"] == "tgt_lang: target language 'es': the run never saw it; it " \
                                                    "writes de, fr"
        status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": "a cat", "tgt_lang": "en"}]})
        assert status == 422 and answer["error"].startswith("inputs[0].tgt_lang: target language 'en': the run saw "
                                                            "it only as a source")
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES, "tgt_lang": ["de"]})
        assert status == 400 and answer["error"] == "tgt_lang: a string is expected, not a list"
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES, "src_lang": "en"})
        assert status == 422 and "send tgt_lang too" in answer["error"]

        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES[:1], "tgt_lang": "de", "src_lang": "fr"})
        assert status == 200 and answer["notices"] == [
            "fr→de was never trained (the run's directions: en→de, en→fr): decoded zero-shot, of unknown quality"]
        assert call(server, "/health")[0] == 200


def test_the_ctranslate2_engine_serves_a_language_per_request(tagged_run, tmp_path):
    """serve --engine ctranslate2 of the run's export: the tag forced as CTranslate2's target_prefix, answers as
    `decode --engine ctranslate2 --tgt-lang` gives them."""
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    export = seqxduce.export_run(tagged_run, tmp_path / "ct2").directory
    expected = {lang: [o.text for o in seqxduce.decode(export, SOURCES, tgt_lang=lang, engine="ctranslate2")]
                for lang in ("de", "fr")}
    with serving(export, tmp_path, "--engine", "ctranslate2", "--threads", "1") as server:
        for lang in ("de", "fr"):
            status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES, "tgt_lang": lang})
            assert status == 200, answer
            assert [hyps[0]["text"] for hyps in answer["outputs"]] == expected[lang]
        status, _, answer = call(server, "/v1/decode", {"inputs": [{"source": SOURCES[0], "tgt_lang": "fr"},
                                                                   SOURCES[1]], "tgt_lang": "de"})
        assert status == 200 and [hyps[0]["text"] for hyps in answer["outputs"]] == [expected["fr"][0],
                                                                                     expected["de"][1]]
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES[:1], "tgt_lang": "fr", "nbest": 2})
        assert status == 200 and all(h["text"].startswith("<2fr>") for h in answer["outputs"][0])
        status, _, answer = call(server, "/v1/decode", {"inputs": SOURCES, "tgt_lang": "es"})
        assert status == 422 and answer["error"] == "tgt_lang: target language 'es': the run never saw it; it " \
                                                    "writes de, fr"
