"""decode's front: the run is loaded once and the command says what it loaded; `--checkpoint best|average|last|PATH`;
the flags users of fairseq-generate and onmt_translate type first; a recipe given where a run is expected."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce import engine
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.decode import load_run, source_batches
from seqxduce.rundir import BEST_FILE
from tests.near_ties import TIE, assert_same_texts
from tests.tiny import TINY_RECIPE

SOURCES = "1 2 3\n4 5\n6\n1 2 3 4 5 6\n"


def _invoke(*args):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args])


@pytest.fixture
def run(tiny_run: Path, tmp_path: Path) -> Path:
    """A copy of the tiny run (checkpoints at 2, 4, 6 and their average), without a best checkpoint."""
    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy)
    (copy / BEST_FILE).unlink(missing_ok=True)
    (tmp_path / "in.txt").write_text(SOURCES)
    return copy


def _decoding_with(result) -> str:
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if line.startswith("decoding with"))


def test_checkpoint_chooses_among_the_runs_checkpoints(run: Path):
    source = run.parent / "in.txt"
    assert _decoding_with(_invoke("decode", run, "--input", source)) == f"decoding with {run / 'average.pt'}"
    assert _decoding_with(_invoke("decode", run, "--input", source, "--checkpoint", "average")) == \
        f"decoding with {run / 'average.pt'}"
    last = run / "checkpoints" / "step_00000006.pt"
    assert _decoding_with(_invoke("decode", run, "--input", source, "--checkpoint", "last")) == f"decoding with {last}"
    older = run / "checkpoints" / "step_00000002.pt"
    assert _decoding_with(_invoke("decode", run, "--input", source, "--checkpoint", older)) == \
        f"decoding with {older}"


def test_checkpoint_best_reads_best_pt_or_says_how_to_get_one(run: Path):
    source = run.parent / "in.txt"
    refused = _invoke("decode", run, "--input", source, "--checkpoint", "best")
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "kept no best checkpoint (best.pt)" in refused.output and "validate_every" in refused.output
    shutil.copyfile(run / "checkpoints" / "step_00000004.pt", run / BEST_FILE)
    assert _decoding_with(_invoke("decode", run, "--input", source, "--checkpoint", "best")) == \
        f"decoding with {run / BEST_FILE}"


def test_checkpoint_refuses_a_file_run_and_an_unknown_choice(run: Path):
    source = run.parent / "in.txt"
    named = _invoke("decode", run / "average.pt", "--input", source, "--checkpoint", "last")
    assert named.exit_code == 1 and "is one checkpoint already; give the run directory" in named.output
    unknown = _invoke("decode", run, "--input", source, "--checkpoint", "newest")
    assert unknown.exit_code == 1 and "choose best, average, last or name a checkpoint file" in unknown.output


def test_load_run_says_what_it_loaded(run: Path):
    loaded = load_run(run, checkpoint="last")
    assert loaded.checkpoint == run / "checkpoints" / "step_00000006.pt" and loaded.members == []
    assert loaded.described() == str(loaded.checkpoint)
    assert engine.decode(loaded, ["1 2 3"])[0].text == engine.decode(run, ["1 2 3"], checkpoint="last")[0].text


def test_the_shortcut_flags_are_the_decode_settings(run: Path, monkeypatch):
    import seqxduce.decoding.decode as decoding

    seen = {}
    real = decoding.load_run

    def spy(path, overrides=(), ensemble=(), checkpoint=None, changes=()):
        loaded = real(path, overrides, ensemble, checkpoint, changes=changes)
        seen["run"] = loaded
        return loaded

    monkeypatch.setattr(decoding, "load_run", spy)  # what the engine's load (RunSpec.load) calls
    result = _invoke("decode", run, "--input", run.parent / "in.txt", "--beam", "3", "--batch-tokens", "7",
                     "--device", "cpu", "--nbest", "2")
    assert result.exit_code == 0, result.output
    recipe = seen["run"].recipe
    assert (recipe.decode.settings.beam, recipe.decode.settings.nbest) == (3, 2)
    assert (recipe.decode.core.batch_tokens, recipe.train.device) == (7, "cpu")
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 1, 1, 2, 2, 3, 3]  # two hypotheses of each source, with scores
    help_text = _invoke("decode", "--help").output
    for flag in ("--beam", "--nbest", "--batch-tokens", "--device", "--checkpoint", "decode.max_len_b"):
        assert flag in help_text


def test_batching_by_tokens_decodes_the_same(run: Path):
    lines = SOURCES.splitlines()
    by_count = engine.decode(run, lines)
    by_tokens = engine.decode(run, lines, overrides=["decode.batch_tokens=5"])
    # other batches: the last bits of the scores move (rounding them to 4 decimals can still tell them apart),
    # and a near-tie may go the other way (tests/near_ties.py)
    assert_same_texts(run, lines, [o.text for o in by_count], [o.text for o in by_tokens])
    for tokens, count in zip(by_tokens, by_count):
        if tokens.text == count.text:
            assert tokens.nbest[0][1].score == pytest.approx(count.nbest[0][1].score, abs=TIE)


def test_length_batches_cap_padded_tokens():
    lengths = [1, 2, 2, 3, 9]
    assert source_batches(range(5), lengths, batch_size=2) == [[0, 1], [2, 3], [4]]
    assert source_batches(range(5), lengths, batch_size=64, batch_tokens=6) == [[0, 1, 2], [3], [4]]


@pytest.mark.parametrize("command", ["decode", "info"])
def test_a_recipe_given_as_a_run_says_train_it_first(command: str, tmp_path: Path):
    args = [command, TINY_RECIPE] + (["--input", "-"] if command == "decode" else [])
    result = _invoke(*args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"that is a recipe: train it first with `seqxduce train {TINY_RECIPE}`" in result.output


def test_nbest_1_narrows_a_recipes_nbest_to_the_best(run: Path):
    result = _invoke("decode", run, "--input", run.parent / "in.txt", "--set", "decode.nbest=2", "--nbest", "1")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == len(SOURCES.splitlines()) and "\t" not in result.stdout


def test_a_refused_shortcut_is_named_as_typed(run: Path):
    result = _invoke("decode", run, "--input", run.parent / "in.txt", "--set", "decode.name=greedy", "--beam", "3")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "Error: --beam: 3 is not for decoder 'greedy', which has no setting 'beam'" in result.output
