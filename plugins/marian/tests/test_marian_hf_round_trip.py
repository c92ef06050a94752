"""`seqxduce export RUN --to huggingface`: a run trained by seqxduce (SentencePiece, the paper's interleaved
sinusoids) as a folder transformers loads with no custom code, whose generate() gives seqxduce's outputs; the
folder imported back (`seqxduce import --from marian`) decodes as the run did; an imported Marian model exports
back to its own format; ONNX through Optimum where it installs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import add_plugin_commands

pytest.importorskip("transformers", reason="transformers is not installed (the `test` extra)")

SOURCES = 40


def _ok(*args: object) -> str:
    result = CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _sources() -> list[str]:
    from seqxduce_marian.testing import sentences

    return sentences(SOURCES, seed=5)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny seqxduce run (80 steps of reversing word order), trained once."""
    from seqxduce_marian.testing import train_tiny_seqxduce_run

    return train_tiny_seqxduce_run(tmp_path_factory.mktemp("seqxduce-run"))


@pytest.fixture(scope="module")
def exported(trained: Path) -> Path:
    out = trained.parent / "hf"
    said = _ok("export", trained, "--to", "huggingface", "-o", out)
    assert "for huggingface" in said
    return out


def _generate(folder: Path, sources: list[str], **overrides) -> tuple[list[list[int]], list[str]]:
    """transformers' generate() from the folder's own generation_config (overrides on top): the output ids
    without the start token and eos, and the texts its tokenizer makes of them."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(folder)
    model = MarianMTModel.from_pretrained(folder).eval()
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, **overrides)
    start, eos, pad = (model.generation_config.decoder_start_token_id, model.config.eos_token_id,
                       model.config.pad_token_id)
    ids = [[t for t in row[1:] if t not in (eos, pad)] for row in out.tolist()]
    assert all(row[0] == start for row in out.tolist())
    return ids, tokenizer.batch_decode(out, skip_special_tokens=True)


def test_the_folder_loads_with_the_auto_classes(exported: Path) -> None:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianMTModel, MarianTokenizer

    assert isinstance(AutoTokenizer.from_pretrained(exported), MarianTokenizer)
    assert isinstance(AutoModelForSeq2SeqLM.from_pretrained(exported), MarianMTModel)
    for name in ("config.json", "model.safetensors", "generation_config.json", "source.spm", "target.spm",
                 "vocab.json", "tokenizer_config.json", "README.md"):
        assert (exported / name).is_file(), name
    generation = json.loads((exported / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["max_new_tokens"] == 21
    card = (exported / "README.md").read_text()
    assert "seqxduce export" in card and "--to huggingface" in card and "[model]" in card
    assert "gnmt" in card  # what generate() cannot say is said there


def test_tokenizer_gives_seqxduce_s_ids(trained: Path, exported: Path) -> None:
    from transformers import MarianTokenizer

    from seqxduce.rundir import RunDir

    rundir = RunDir(trained)
    ours = rundir.tokenizers.load(rundir.load_recipe()).src
    theirs = MarianTokenizer.from_pretrained(exported)
    sources = _sources() + ["ünïcödé words 123", ""]
    assert [ours.encode(s) + [ours.eos_id] for s in sources] == [theirs(s)["input_ids"] for s in sources]


def test_greedy_generate_is_seqxduce_s_greedy(trained: Path, exported: Path) -> None:
    sources = _sources()
    ids, _ = _generate(exported, sources, num_beams=1)
    outputs = seqxduce.decode(trained, sources, overrides=["decode.name=greedy"])
    assert [o.nbest[0][1].tokens for o in outputs] == ids
    assert len({tuple(row) for row in ids}) > 10  # the outputs depend on the source


def test_beam_generate_is_seqxduce_s_beam(trained: Path, exported: Path) -> None:
    """beam 4 as generation_config.json says it; seqxduce with the penalty and limit eos generate() has (the
    run's GNMT penalty and scored eos are the model card's notes)."""
    sources = _sources()
    ids, _ = _generate(exported, sources)
    outputs = seqxduce.decode(trained, sources, overrides=["decode.length_penalty=power", "decode.limit_eos=free"])
    same = sum(o.nbest[0][1].tokens == row for o, row in zip(outputs, ids))
    assert same >= 0.99 * SOURCES


def test_round_trip_decodes_as_the_run(trained: Path, exported: Path, tmp_path: Path) -> None:
    back = tmp_path / "back"
    said = _ok("import", exported, "--from", "marian", "-o", back)
    assert "seqxduce export --to huggingface" in said
    sources = _sources()
    for overrides in ([], ["decode.name=greedy"]):
        original = seqxduce.decode(trained, sources, overrides=overrides)
        again = seqxduce.decode(back, sources, overrides=overrides)
        assert [o.nbest[0][1].tokens for o in again] == [o.nbest[0][1].tokens for o in original]
        assert [o.text for o in again] == [o.text for o in original]


def test_an_imported_marian_model_exports_back_to_its_own_format(tmp_path: Path) -> None:
    """A Marian folder (random weights and final_logits_bias: the tensors are what is compared) imported, then
    exported: the same config, vocabulary and tensors, bit for bit, and generation defaults that mean the same."""
    import torch
    from seqxduce_marian.testing import build_tiny_marian
    from transformers import MarianMTModel

    marian_folder = build_tiny_marian(tmp_path / "marian", train_steps=0)
    marian_run, out = tmp_path / "run", tmp_path / "again"
    _ok("import", marian_folder, "--from", "marian", "-o", marian_run)
    _ok("export", marian_run, "--to", "huggingface", "-o", out)
    original = json.loads((marian_folder / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    for key in ("d_model", "encoder_layers", "decoder_layers", "vocab_size", "activation_function", "pad_token_id",
                "eos_token_id", "decoder_start_token_id", "scale_embedding", "share_encoder_decoder_embeddings"):
        assert config[key] == original[key], key
    assert json.loads((out / "vocab.json").read_text()) == json.loads((marian_folder / "vocab.json").read_text())
    first, second = MarianMTModel.from_pretrained(marian_folder), MarianMTModel.from_pretrained(out)
    theirs, ours = first.state_dict(), second.state_dict()
    assert set(theirs) == set(ours)
    assert all(torch.equal(theirs[name], ours[name]) for name in theirs)  # the same tensors, bit for bit
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["max_new_tokens"] == 63  # max_length 64 with the start
    assert generation["decoder_start_token_id"] == original["decoder_start_token_id"]


def test_a_word_tokenizer_run_is_refused_in_one_line(tmp_path: Path) -> None:
    from seqxduce.testing import repository_root, train_tiny_run

    tiny = repository_root(Path(__file__).parent) / "tests" / "fixtures" / "tiny.toml"  # word tokenizer
    run = train_tiny_run(tiny, tmp_path / "run")
    result = CliRunner().invoke(add_plugin_commands(), ["export", str(run), "--to", "huggingface", "-o",
                                                        str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "[tokenizer] name = 'word'" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_onnx_through_optimum_generates_as_transformers(exported: Path, tmp_path: Path) -> None:
    """ORTModelForSeq2SeqLM of the folder (optimum's ONNX export) generates what transformers does."""
    try:
        from optimum.onnxruntime import ORTModelForSeq2SeqLM
    except ImportError:
        pytest.skip("optimum's ONNX Runtime models are not installed: optimum-onnx 0.1.0, the only release with "
                    "ORTModelForSeq2SeqLM for optimum 2, needs transformers < 4.58, and this environment has "
                    "transformers 5 (pip install 'optimum-onnx[onnxruntime]' beside transformers 4.57)")
    import torch
    from transformers import MarianTokenizer

    onnx = ORTModelForSeq2SeqLM.from_pretrained(exported, export=True)
    tokenizer = MarianTokenizer.from_pretrained(exported)
    sources = _sources()
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = onnx.generate(**batch, num_beams=1)
    ids, _ = _generate(exported, sources, num_beams=1)
    eos, pad = onnx.config.eos_token_id, onnx.config.pad_token_id
    assert [[t for t in row[1:] if t not in (eos, pad)] for row in out.tolist()] == ids


def test_ctranslate2_refuses_a_hugging_face_export_in_one_line(exported: Path) -> None:
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install -e '.[ctranslate2]')")
    result = CliRunner().invoke(add_plugin_commands(), ["decode", str(exported), "--engine", "ctranslate2",
                                                        "--input", "-"], input="the cat\n")
    assert result.exit_code != 0 and "an export for huggingface" in result.output
    assert len(result.output.strip().splitlines()) == 1
