"""Every command on an imported Marian run: fine-tuning it on new parallel text (the loss on that text falls, and
a resumed fine-tuning is bit-exact), score, evaluate, info, attention, translate, serve's service; and the
refusals of what the import cannot represent."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import seqxduce
from seqxduce.cli import add_plugin_commands


def _invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args], input=input)


def _ok(*args: str) -> str:
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Your own parallel text: a copying task the imported model was not trained on (it reverses)."""
    from seqxduce_marian.testing import sentences

    data = tmp_path_factory.mktemp("mydata")
    for split, count, seed in (("train", 200, 11), ("valid", 20, 12), ("test", 20, 13)):
        lines = sentences(count, seed=seed, longest=6)
        (data / f"{split}.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (data / f"{split}.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data


FINE_TUNE = ["train.max_steps=12", "train.schedule=constant", "train.lr=0.002", "train.max_tokens=600",
             "train.validate_every=6", "train.checkpoint_every=6", "train.valid_decode_examples=5",
             "train.log_every=3", "train.device=cpu", "train.patience=5"]


def _sets(data: Path, extra: list[str]) -> list[str]:
    out = []
    for value in [f"task.data_dir={data}", *FINE_TUNE, *extra]:
        out += ["--set", value]
    return out


def _total_logprob(run: Path, data: Path, tmp: Path) -> float:
    scores = tmp / f"{run.name}.scores"
    _ok("score", run, "--source", data / "valid.en", "--target", data / "valid.de", "-o", scores)
    return sum(float(line.split("\t")[0]) for line in scores.read_text(encoding="utf-8").splitlines())


def test_fine_tune_lowers_the_loss_and_resumes_exactly(marian_run: Path, parallel: Path, tmp_path: Path) -> None:
    recipe = marian_run / "recipe.toml"
    tuned = tmp_path / "tuned"
    _ok("train", recipe, "--init-from", marian_run, "--out", tuned, *_sets(parallel, []))
    assert (tuned / "best.pt").is_file()
    assert _total_logprob(tuned, parallel, tmp_path) > _total_logprob(marian_run, parallel, tmp_path) + 1.0
    # 6 steps, then --resume to 12: the same weights as 12 in one go
    split = tmp_path / "split"
    _ok("train", recipe, "--init-from", marian_run, "--out", split, *_sets(parallel, ["train.max_steps=6"]))
    _ok("train", split / "recipe.toml", "--out", split, "--resume", "--set", "train.max_steps=12")
    a = torch.load(tuned / "checkpoints" / "step_00000012.pt", weights_only=True)["model"]
    b = torch.load(split / "checkpoints" / "step_00000012.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the fixed logits bias is the imported one, untouched by fine-tuning (as Hugging Face keeps it)
    imported = torch.load(marian_run / "checkpoints" / "step_00000000.pt", weights_only=True)["model"]
    assert torch.equal(a["embeddings.output_bias"], imported["embeddings.output_bias"])


def test_commands_on_the_import(marian_run: Path, parallel: Path, tmp_path: Path) -> None:
    info = json.loads(_ok("info", marian_run, "--json"))
    assert info
    hyp = tmp_path / "test.hyp"
    _ok("decode", marian_run, "--input", parallel / "test.en", "-o", hyp, "--beam", "3")
    assert "BLEU" in _ok("evaluate", hyp, parallel / "test.de", "--recipe", marian_run)
    assert "BLEU" in _ok("decode", marian_run, "--split", "test", "--set", f"task.data_dir={parallel}")
    # a test split with a second reference: sacreBLEU's multi-reference BLEU of the same outputs
    second = [line.upper() for line in (parallel / "test.de").read_text(encoding="utf-8").splitlines()]
    (tmp_path / "test.de.2").write_text("\n".join(second) + "\n", encoding="utf-8")
    split_out = tmp_path / "split.hyp"
    report = _ok("decode", marian_run, "--split", "test", "-o", split_out, "--set", f"task.data_dir={parallel}",
                 "--set", f'task.more_references=["{tmp_path / "test.de.2"}"]')
    outputs = split_out.read_text(encoding="utf-8").splitlines()
    first = (parallel / "test.de").read_text(encoding="utf-8").splitlines()
    import sacrebleu

    assert "nrefs:2|" in report and f"= {sacrebleu.corpus_bleu(outputs, [first, second]).score:.2f}" in report
    for name in ("sampling",):
        _ok("decode", marian_run, "--input", parallel / "test.en", "-o", tmp_path / name, "--set",
            f"decode.name={name}")
    translated = _invoke("translate", marian_run, input="the cat sat\n")
    assert translated.exit_code == 0, translated.output
    pytest.importorskip("matplotlib")
    _ok("attention", marian_run, "--input", "the cat sat on the mat", "-o", tmp_path / "attention.png")
    assert (tmp_path / "attention.png").is_file()


def test_serve_service_decodes_the_import(marian_run: Path) -> None:
    outputs = seqxduce.decode(marian_run, ["the big dog"])
    assert outputs[0].text


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(folder, target)
    return target


@pytest.mark.parametrize(("key", "value"), [("encoder_layerdrop", 0.1), ("normalize_before", True),
                                            ("my_new_key", 3), ("activation_function", "tanh")])
def test_refuses_what_it_cannot_represent(marian_folder: Path, tmp_path: Path, key: str, value: object) -> None:
    folder = _copy(marian_folder, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    result = _invoke("import", folder, "--from", "marian", "-o", tmp_path / "run")
    assert result.exit_code == 1
    assert key in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "recipe.toml").exists()


def test_pickled_weights_load_safely(marian_folder: Path, marian_run: Path, tmp_path: Path) -> None:
    """Only pytorch_model.bin: read with torch.load(weights_only=True), the same run as from safetensors."""
    from seqxduce_marian.weights import read_safetensors

    folder = _copy(marian_folder, tmp_path)
    torch.save(read_safetensors(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    _ok("import", folder, "--from", "marian", "-o", tmp_path / "run")
    a = torch.load(tmp_path / "run" / "checkpoints" / "step_00000000.pt", weights_only=True)["model"]
    b = torch.load(marian_run / "checkpoints" / "step_00000000.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a damaged one is refused in one line
    (folder / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    result = _invoke("import", folder, "--from", "marian", "-o", tmp_path / "run2")
    assert result.exit_code == 1 and "pytorch_model.bin" in result.output


def test_a_missing_tensor_is_refused(marian_folder: Path, tmp_path: Path) -> None:
    from seqxduce_marian.weights import read_safetensors

    folder = _copy(marian_folder, tmp_path)
    tensors = read_safetensors(folder / "model.safetensors")
    del tensors["model.decoder.layers.1.fc2.bias"]
    (folder / "model.safetensors").unlink()
    torch.save(tensors, folder / "pytorch_model.bin")
    result = _invoke("import", folder, "--from", "marian", "-o", tmp_path / "run")
    assert result.exit_code == 1 and "decoder.layers.1.fc2.bias" in result.output


def test_recipe_describes_the_model(marian_run: Path) -> None:
    """config.json and generation_config.json as the run's recipe: Marian's architecture, generate's defaults."""
    from seqxduce.recipe import load_recipe

    recipe = load_recipe(marian_run / "recipe.toml")
    model, decode = recipe.model.settings, recipe.decode.settings
    assert (model.activation, model.sinusoid_layout, model.scale_embeddings, model.output_bias,
            model.share_source_target, model.tie_output, model.norm) == ("swish", "halves", True, True, True, True,
                                                                        "post")
    assert (recipe.decode.core.name, decode.beam, decode.alpha, decode.length_penalty, decode.limit_eos,
            decode.max_len_a, decode.max_len_b) == ("beam", 4, 1.0, "power", "free", 0.0, 62)
    assert decode.early_stopping is False  # the folder gives none: generate's default
    assert (recipe.tokenizer.core.name, recipe.tokenizer.core.shared) == ("marian", False)


@pytest.mark.parametrize(("given", "imported"), [({}, False), ({"early_stopping": None}, False),
                                                 ({"early_stopping": False}, False),
                                                 ({"early_stopping": True}, True),
                                                 ({"early_stopping": "never"}, "never")])
def test_the_folders_stopping_rule_is_imported(given: dict, imported: object) -> None:
    from seqxduce_marian.generation import decode_settings

    decode, notes = decode_settings({"num_beams": 4, **given}, "generation_config.json", 5)
    assert decode["early_stopping"] is imported or decode["early_stopping"] == imported == "never"
    assert any("decode.early_stopping" in note for note in notes)


@pytest.mark.parametrize("value", ["always", 1, 0.5])
def test_an_unknown_stopping_rule_is_refused(value: object) -> None:
    from seqxduce_marian.generation import decode_settings

    with pytest.raises(seqxduce.UserError, match=r"generation_config.json: early_stopping = .*: generate\(\) takes "
                                                 r"true, false or \"never\""):
        decode_settings({"num_beams": 4, "early_stopping": value}, "generation_config.json", 5)


def test_the_hubs_generation_keys_import_and_decode_as_generate(marian_folder: Path, tmp_path: Path) -> None:
    """A folder as current transformers saves OPUS-MT models on the hub: generation_config.json with
    renormalize_logits = true (transformers PR #25459) and bos_token_id. It imports with renormalize on, and beam
    search then gives generate()'s outputs and scores."""
    from seqxduce_marian.testing import hf_generate, sentences
    from transformers import GenerationConfig, MarianMTModel

    folder = _copy(marian_folder, tmp_path)
    generation = json.loads((folder / "generation_config.json").read_text())
    generation.update(renormalize_logits=True, bos_token_id=0, forced_eos_token_id=0, max_length=31)
    (folder / "generation_config.json").write_text(json.dumps(generation))
    MarianMTModel.from_pretrained(folder)
    GenerationConfig.from_pretrained(folder)
    output = _ok("import", folder, "--from", "marian", "-o", tmp_path / "run")
    assert "renormalize_logits = true" in output
    loaded = seqxduce.engine.load_run(tmp_path / "run", ["decode.early_stopping=never"])
    assert loaded.recipe.decode.settings.renormalize is True
    sources = sentences(100, seed=9)
    source_ids = [loaded.tokenizers.src.encode(s) + [loaded.tokenizers.src.eos_id] for s in sources]
    reference = hf_generate(folder, source_ids, 4, 30, length_penalty=1.0, renormalize=True)
    outputs = seqxduce.engine.decode(loaded, sources)
    equal = [(o.nbest[0][1].score, ref[2]) for o, ref in zip(outputs, reference) if o.nbest[0][1].tokens == ref[0]]
    assert len(equal) >= 99
    assert max(abs(a - b) for a, b in equal) < 1e-4


def test_a_2020_layout_folder_imports(marian_folder: Path, tmp_path: Path) -> None:
    """The layout of the first OPUS-MT uploads: generation defaults inside config.json (no
    generation_config.json), _num_labels and output_past, pickled weights. MarianMTModel.from_pretrained loads
    it, and so does the import, its harmless keys noted."""
    from seqxduce_marian.weights import read_safetensors
    from transformers import MarianMTModel

    folder = _copy(marian_folder, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    config.update(_num_labels=3, output_past=True, id2label={"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"},
                  label2id={"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}, num_beams=6, max_length=512,
                  bad_words_ids=generation["bad_words_ids"], classif_dropout=0.0, normalize_embedding=False)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").unlink()
    torch.save(read_safetensors(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    MarianMTModel.from_pretrained(folder)
    output = _ok("import", folder, "--from", "marian", "-o", tmp_path / "run")
    assert "_num_labels" in output and "output_past" in output
    decode = seqxduce.engine.load_run(tmp_path / "run").recipe.decode.settings
    assert (decode.beam, decode.max_len_b, decode.renormalize) == (6, 510, False)


def _refusal(folder: Path, out: Path) -> str:
    result = _invoke("import", folder, "--from", "marian", "-o", out)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    return result.output.strip()


def test_refusals_name_the_users_files_and_fix(marian_folder: Path, marian_run: Path, tmp_path: Path) -> None:
    """A damaged source.spm is named where it is (not as a temporary copy); a config.json that disagrees with the
    weights' shapes is the folder's fault, not a plugin's bug; importing over a run suggests what import can do."""
    folder = _copy(marian_folder, tmp_path)
    (folder / "source.spm").write_bytes(b"not a sentencepiece model")
    line = _refusal(folder, tmp_path / "a")
    assert line.startswith(f"Error: {folder / 'source.spm'}: not a SentencePiece model")
    assert "seqxduce-import" not in line

    folder = _copy(marian_folder, tmp_path / "b")
    config = json.loads((folder / "config.json").read_text())
    config.update(encoder_ffn_dim=2 * config["encoder_ffn_dim"], decoder_ffn_dim=2 * config["decoder_ffn_dim"])
    (folder / "config.json").write_text(json.dumps(config))
    line = _refusal(folder, tmp_path / "c")
    assert "config.json" in line and "fc1" in line and "different models" in line and "report" not in line

    line = _refusal(marian_folder, marian_run)
    assert "--overwrite" in line and "--resume" not in line
