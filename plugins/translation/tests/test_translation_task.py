"""The translation task: registration, examples from each data set, sacreBLEU/chrF scoring, recipes."""

import subprocess
import sys
from pathlib import Path

import pytest
from seqxduce_sentencepiece.settings import SentencePieceSettings
from seqxduce_translation import build_translation_task, register_tasks
from seqxduce_translation.metrics import paper_tokenize, split_compounds
from seqxduce_translation.settings import TranslationSettings

from seqxduce.api import Example, Task, UserError
from seqxduce.recipe import read_toml
from seqxduce.settings import TaskCore
from seqxduce.settings_check import make_settings
from seqxduce.testing import default_shared, repository_root

REPOSITORY = repository_root(Path(__file__))
RECIPES = REPOSITORY / "recipes"
DEFAULT_SHARED = default_shared(REPOSITORY)

HYPS = ["the cat sat on the mat .", "a quick brown fox jumps", "hello world"]
REFS = ["the cat sat on the mat .", "the quick brown fox jumped", "hello there world"]


def task(**settings) -> Task:
    return build_translation_task(TranslationSettings(**settings))


def test_registers_under_its_name():
    seen = {}
    register_tasks(register=lambda name, factory, **kw: seen.update({name: (factory, kw)}))
    factory, kw = seen["translation"]
    assert factory is build_translation_task and kw["settings"] is TranslationSettings and kw["help"]


def test_import_loads_neither_sacrebleu_nor_torch():
    code = "import sys, seqxduce_translation; print(*(m in sys.modules for m in ('sacrebleu', 'torch', 'rich')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


def test_bleu_and_chrf_equal_sacrebleus_own_figures():
    from sacrebleu.metrics import BLEU, CHRF

    report = task(tgt_lang="en").score(HYPS, REFS)
    assert report.primary == "bleu"
    assert report.metrics["bleu"] == pytest.approx(BLEU().corpus_score(HYPS, [REFS]).score)
    assert report.metrics["chrf"] == pytest.approx(CHRF().corpus_score(HYPS, [REFS]).score)
    # by hand: p_n = 12/14, 8/11, 6/8, 4/6; BP = exp(1 - 15/14)
    assert report.metrics["bleu"] == pytest.approx(69.568, abs=1e-3)
    assert report.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert report.signature in report.text and "chrF2" in report.text


def test_lowercased_bleu_is_reported_with_its_signature():
    shouted = [h.upper() for h in HYPS]
    report = task(tgt_lang="en").score(shouted, REFS)
    assert report.metrics["bleu_lc"] == pytest.approx(69.568, abs=1e-3)  # as the cased score of HYPS
    assert report.metrics["bleu"] < 10.0  # cased, the shouted words miss
    assert "case:lc" in report.text and report.signature.startswith("nrefs:1|case:mixed")


def test_perfect_and_empty_outputs():
    assert task().score(REFS, REFS).metrics["bleu"] == pytest.approx(100.0)
    assert task().score(["", "", ""], REFS).metrics["bleu"] == 0.0
    with pytest.raises(UserError, match="2 hypotheses for 3 references"):
        task().score(HYPS[:2], REFS)


def test_tokenized_bleu_is_labelled_and_splits_compounds():
    assert split_compounds("ein well-known Fall") == "ein well ##AT##-##AT## known Fall"
    assert paper_tokenize(["Das ist gut-gemacht, oder?"]) == ["Das ist gut ##AT##-##AT## gemacht , oder ?"]
    plain = task().score(["a well-known fact"], ["a well-known fact ."])
    assert "bleu_tokenized" not in plain.metrics
    report = task(tokenized_bleu=True).score(["a well-known fact"], ["a well-known fact ."])
    from sacrebleu.metrics import BLEU

    expected = BLEU(tokenize="none", force=True).corpus_score(
        ["a well ##AT##-##AT## known fact"], [["a well ##AT##-##AT## known fact ."]]).score
    assert report.metrics["bleu_tokenized"] == pytest.approx(expected)
    assert "NOT sacreBLEU" in report.text


def test_score_files(tmp_path):
    (tmp_path / "hyp").write_text("\n".join(HYPS) + "\n")
    (tmp_path / "ref").write_text("\n".join(REFS) + "\n")
    assert task().score_files(tmp_path / "hyp", tmp_path / "ref").metrics["bleu"] == pytest.approx(69.568, abs=1e-3)


def test_files_dataset_cleans_train_only(tmp_path):
    (tmp_path / "train.en").write_text("a b\n\n" + "w " * 300 + "\nc d\n")
    (tmp_path / "train.de").write_text("A B\nleer\nW\nC D\n")
    (tmp_path / "dev.en").write_text("x\n\n")
    (tmp_path / "dev.de").write_text("X\nY\n")
    t = task(valid_prefix="dev")
    assert t.examples("train", tmp_path) == [Example("a b", "A B"), Example("c d", "C D")]
    assert (t.stats["train"].empty_dropped, t.stats["train"].too_long) == (1, 1)
    valid = t.examples("valid", tmp_path)
    assert [(e.source, e.ref) for e in valid] == [("x", "X"), ("", "Y")]
    with pytest.raises(UserError, match="test.en: no such file; .*test_prefix"):
        t.examples("test", tmp_path)
    with pytest.raises(UserError, match="unknown split 'dev'"):
        t.examples("dev", tmp_path)


def test_the_stream_gives_what_examples_gives_one_pair_at_a_time(tmp_path, capsys):
    (tmp_path / "train.en").write_text("a b\n\n" + "w " * 300 + "\nc d\n")
    (tmp_path / "train.de").write_text("A B\nleer\nW\nC D\n")
    (tmp_path / "valid.en").write_text("x\n\n")
    (tmp_path / "valid.de").write_text("X\nY\n")
    t = task()
    stream = t.stream("train", tmp_path)
    assert next(stream) == Example("a b", "A B") and t.stats["train"].read == 1  # read as it goes
    assert list(stream) == [Example("c d", "C D")]
    assert (t.stats["train"].read, t.stats["train"].kept, t.stats["train"].too_long) == (4, 2, 1)
    assert "4 pairs read, 2 kept; dropped 1 empty, 1 too long" in capsys.readouterr().err
    assert list(t.stream("valid", tmp_path)) == t.examples("valid", tmp_path)
    (tmp_path / "train.en").write_text("")
    (tmp_path / "train.de").write_text("")
    with pytest.raises(UserError, match="train.en: the training file is empty"):
        list(t.stream("train", tmp_path))


def test_preparing_a_corpus_never_lists_its_training_split(tmp_path, monkeypatch):
    """`seqxduce prepare` reads the training pairs through Task.stream (twice: the tokenizer, the encoding)."""
    from seqxduce_translation.task import TranslationTask

    from seqxduce import components
    from seqxduce.corpus import binarized, prepare
    from seqxduce.recipe import load_recipe

    words = "the a cat dog sat ran on under mat rug".split()
    for side in ("en", "de"):
        lines = [" ".join(words[(i + k) % 10] for k in range(i % 7 + 1)) for i in range(300)]
        (tmp_path / f"train.{side}").write_text("\n".join(lines) + "\n")
    recipe_file = tmp_path / "r.toml"
    recipe_file.write_text('[task]\nname = "translation"\ndataset = "files"\ndata_dir = "."\nsrc_lang = "en"\n'
                           'tgt_lang = "de"\n[tokenizer]\nname = "word"\n[model]\nname = "transformer"\n')
    listed = TranslationTask.examples

    def refuse_train(self, split, data_dir):
        assert split != "train", "the training split was read into a list"
        return listed(self, split, data_dir)

    monkeypatch.setattr(TranslationTask, "examples", refuse_train)
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "cache"))
    recipe = load_recipe(recipe_file)
    task = components.build_task(recipe)
    folder = prepare.prepare_training_data(recipe, task, components.data_dir(recipe))
    pairs, meta = binarized.open_dataset(folder)
    assert len(pairs) == meta["read"] == task.stats["train"].kept == 300


def test_multi30k_from_the_shared_plain_files(multi30k):
    t = task(dataset="multi30k", src_lang="en", tgt_lang="de", download=False)
    valid = t.examples("valid", multi30k)
    test = t.examples("test", multi30k)
    assert (len(valid), len(test)) == (1014, 1000)
    first = (multi30k / "test_2016_flickr.de").read_text(encoding="utf-8").split("\n", 1)[0]
    assert test[0].ref == first
    train = t.examples("train", multi30k)
    assert t.stats["train"].read == 29000 and len(train) == t.stats["train"].kept
    assert train[0] == Example("Two young, White males are outside near many bushes.",
                               "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.")


# ---------------------------------------------------------------- recipes


def read_recipe(name: str) -> dict:
    return read_toml(RECIPES / name)


@pytest.mark.parametrize("name", ["wmt14_en_de_base.toml", "wmt14_en_de_big.toml", "wmt14_en_fr_big.toml",
                                  "multi30k_en_de.toml"])
def test_recipe_task_and_tokenizer_sections_validate(name):
    recipe = read_recipe(name)
    core_task = {k: v for k, v in recipe["task"].items() if k in ("name", "data_dir")}
    make_settings(TaskCore, core_task, "task", name)
    assert recipe["task"]["name"] == "translation"
    make_settings(TranslationSettings, {k: v for k, v in recipe["task"].items() if k not in core_task}, "task", name)
    assert recipe["tokenizer"]["name"] == "sentencepiece"
    tokenizer = {k: v for k, v in recipe["tokenizer"].items() if k not in ("name", "shared")}
    make_settings(SentencePieceSettings, tokenizer, "tokenizer", name)
    assert recipe["model"]["name"] == "transformer" and recipe["decode"]["name"] == "beam"


def test_multi30k_recipe_points_at_the_shared_data():
    data_dir = RECIPES / read_recipe("multi30k_en_de.toml")["task"]["data_dir"]
    assert data_dir.resolve() == (DEFAULT_SHARED / "data" / "multi30k").resolve()


def test_paper_recipes_hold_table_3():
    base, big, fr = (read_recipe(f"wmt14_{n}.toml") for n in ("en_de_base", "en_de_big", "en_fr_big"))
    assert (base["model"]["preset"], base["model"]["dropout"], base["train"]["max_steps"]) == ("base", 0.1, 100000)
    assert (big["model"]["preset"], big["model"]["dropout"], big["train"]["max_steps"]) == ("big", 0.3, 300000)
    assert (fr["model"]["dropout"], fr["tokenizer"]["vocab_size"], base["tokenizer"]["vocab_size"]) == (
        0.1, 32000, 37000)
    assert (base["train"]["average_last"], big["train"]["average_last"]) == (5, 20)
    for recipe in (base, big, fr):
        assert (recipe["decode"]["beam"], recipe["decode"]["alpha"], recipe["decode"]["max_len_b"]) == (4, 0.6, 50)
        assert (recipe["train"]["warmup_steps"], recipe["train"]["label_smoothing"]) == (4000, 0.1)
