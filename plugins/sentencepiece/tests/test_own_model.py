"""[tokenizer] model_file (and target_model_file): an existing SentencePiece model instead of training one, its
special ids kept, its size the vocabulary size; a mismatch with vocab_size, or a model without a pad, refused."""

from __future__ import annotations

import io
from pathlib import Path

import sentencepiece as spm
from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands
from seqxduce.testing import tiny_recipe

WORDS = "the a cat dog sat ran on under mat house big small red".split()


def _model(path: Path, size: int, **ids: int) -> Path:
    """A unigram model over generated sentences; ids: pad_id, unk_id, bos_id, eos_id as spm_train takes them."""
    lines = [" ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(2 + i % 5)) for i in range(200)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=size,
                                   model_type="unigram", minloglevel=2, num_threads=1, **ids)
    path.write_bytes(model.getvalue())
    return path


def _data(folder: Path) -> Path:
    folder.mkdir()
    for split in ("train", "valid", "test"):
        lines = [" ".join(WORDS[(i * 3 + k) % len(WORDS)] for k in range(3)) for i in range(40)]
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _recipe(tmp: Path, **tokenizer: object) -> Path:
    recipe = tmp / "r.toml"
    recipe.write_text(tiny_recipe({"name": "translation", "data_dir": str(_data(tmp / "data"))},
                                  {"name": "sentencepiece", **tokenizer}, {"max_steps": 1, "validate_every": 0},
                                  {"name": "greedy", "max_len_b": 3}), encoding="utf-8")
    return recipe


def _train(recipe: Path, out: Path):
    return CliRunner().invoke(add_plugin_commands(), ["train", str(recipe), "--out", str(out)])


def test_one_model_for_both_sides_is_used_as_it_is(tmp_path: Path) -> None:
    own = _model(tmp_path / "own.model", 30, pad_id=3, unk_id=0, bos_id=1, eos_id=2)
    result = _train(_recipe(tmp_path, model_file=str(own), vocab_size=30), tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "tokenizer.model").read_bytes() == own.read_bytes()
    decoded = CliRunner().invoke(add_plugin_commands(), ["decode", str(tmp_path / "run"), "--input", "-"],
                                 input="the cat sat\n")
    assert decoded.exit_code == 0, decoded.output


def test_one_model_per_side(tmp_path: Path) -> None:
    source = _model(tmp_path / "src.model", 30, pad_id=3, unk_id=0, bos_id=1, eos_id=2)
    target = _model(tmp_path / "tgt.model", 30, pad_id=0, unk_id=1, bos_id=2, eos_id=3)
    recipe = _recipe(tmp_path, shared=False, model_file=str(source), target_model_file=str(target), vocab_size=30)
    result = _train(recipe, tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "src_tokenizer.model").read_bytes() == source.read_bytes()
    assert (tmp_path / "run" / "tgt_tokenizer.model").read_bytes() == target.read_bytes()


def test_a_size_mismatch_and_a_model_without_pad_are_refused(tmp_path: Path) -> None:
    own = _model(tmp_path / "own.model", 30, pad_id=3, unk_id=0, bos_id=1, eos_id=2)
    result = _train(_recipe(tmp_path, model_file=str(own), vocab_size=8000), tmp_path / "run")
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]  # (after the task's line on the data it read)
    assert last.startswith("Error: [tokenizer] model_file") and "Traceback" not in result.output
    assert "has 30 pieces but vocab_size = 8000: set vocab_size = 30" in last
    (tmp_path / "data").rename(tmp_path / "data0")
    plain = _model(tmp_path / "plain.model", 30)  # spm_train's defaults: no pad piece
    result = _train(_recipe(tmp_path, model_file=str(plain), vocab_size=30), tmp_path / "run2")
    assert result.exit_code == 1 and "no pad piece" in result.output


def test_a_model_replaced_at_the_same_path_is_prepared_anew(tmp_path: Path) -> None:
    # the prepared training data (tokenizers and ids) are keyed by the model file's bytes, not its path
    own = _model(tmp_path / "own.model", 30, pad_id=3, unk_id=0, bos_id=1, eos_id=2)
    recipe = _recipe(tmp_path, model_file=str(own), vocab_size=30)
    assert _train(recipe, tmp_path / "first").exit_code == 0
    replaced = _model(tmp_path / "other.model", 30, pad_id=0, unk_id=1, bos_id=2, eos_id=3).read_bytes()
    assert replaced != own.read_bytes()
    own.write_bytes(replaced)
    result = _train(recipe, tmp_path / "second")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "second" / "tokenizer.model").read_bytes() == replaced
