"""Every command and Python function that takes a run, on a run trained with [train] members = 2: each does what
a multi-member run asks for (the members' ensemble, or one member said so), or refuses in one line naming the
cause and the way out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import seqxduce
from seqxduce.api import UserError
from seqxduce.cli import add_plugin_commands
from seqxduce.decoding.decode import load_run
from seqxduce.decoding.ensemble import EnsembleModel
from seqxduce.rundir import RunDir
from tests.near_ties import TIE
from tests.tiny import TINY_RECIPE

MEMBERS = ["train.members=2", "train.parallel_members=2", "train.validate_every=3"]
SOURCES = ["1 2 3", "4 5"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The tiny recipe trained as two members (validated at steps 3 and 6, checkpoints at 2, 4 and 6)."""
    out = tmp_path_factory.mktemp("members-commands") / "run"
    result = _invoke("train", TINY_RECIPE, "--out", out, *[a for s in MEMBERS for a in ("--set", s)])
    assert result.exit_code == 0, result.output
    return out


def _invoke(*args, input: str | None = None):
    return CliRunner().invoke(add_plugin_commands(), [str(a) for a in args], input=input)


def _one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def _last(run: Path, k: int = 1) -> Path:
    return RunDir(run if k == 1 else run / "members" / str(k)).step_checkpoints()[-1]


def _scores(outputs) -> list[list[float]]:
    return [[round(hyp.score, 4) for _, hyp in o.nbest] for o in outputs]


def test_decode_nbest_gives_the_ensembles_hypotheses(run: Path, tmp_path: Path):
    (tmp_path / "in.txt").write_text("\n".join(SOURCES) + "\n")
    result = _invoke("decode", run, "--input", tmp_path / "in.txt", "--set", "decode.nbest=2")
    assert result.exit_code == 0, result.output
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    ensemble = seqxduce.decode(run, SOURCES, overrides=["decode.nbest=2"])
    alone = seqxduce.decode(_last(run), SOURCES, overrides=["decode.nbest=2"])
    assert [float(r[1]) for r in rows] == [s for scores in _scores(ensemble) for s in scores]
    assert _scores(ensemble) != _scores(alone)  # the scores tell the ensemble from member 1


def test_decode_annotations_refusal_names_the_model_and_the_members(run: Path, tmp_path: Path):
    (tmp_path / "in.txt").write_text("1 2 3\n")
    result = _invoke("decode", run, "--input", tmp_path / "in.txt", "--annotations", tmp_path / "a.jsonl")
    line = _one_line_error(result)
    assert "'transformer' has no per-position figures" in line and "other member" in line
    assert "without --annotations" in line


class _Figures(torch.nn.Module):
    """A stand-in member with one per-position figure and attention it cannot show."""

    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def annotate(self, src, tgt_in):
        return {"target_ponder": torch.full(tgt_in.shape, self.value)}


def test_an_ensembles_annotations_keep_each_members_figures():
    src, tgt_in = torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)
    figures = EnsembleModel([_Figures(1.0), _Figures(2.0)]).annotate(src, tgt_in)
    assert sorted(figures) == ["target_ponder", "target_ponder_member2"]
    assert figures["target_ponder"].eq(1.0).all() and figures["target_ponder_member2"].eq(2.0).all()


def test_decode_ensemble_of_a_multi_member_run_takes_all_its_members(run: Path):
    loaded = load_run(_last(run), ensemble=[run])
    assert loaded.members == [_last(run), _last(run, 2)]
    assert len(loaded.model.members) == 3


def test_attention_draws_member_1_and_says_how_to_pick_another(run: Path, tmp_path: Path):
    first = _invoke("attention", run, "--input", "1 2 3", "-o", tmp_path / "one.png")
    assert first.exit_code == 0, first.output
    assert "does not expose" not in first.output
    assert f"has 2 members ([train] members); drawing member 1 ({_last(run)}); another with --member K" \
        in first.output
    second = _invoke("attention", run, "--input", "1 2 3", "--member", "2", "-o", tmp_path / "two.png")
    assert second.exit_code == 0 and "drawing member" not in second.output
    assert (tmp_path / "one.png").read_bytes() != (tmp_path / "two.png").read_bytes()
    line = _one_line_error(_invoke("attention", run, "--input", "1 2 3", "--member", "3", "-o", tmp_path / "x.png"))
    assert "--member 3" in line and "give 1..2" in line


def test_attention_of_the_ensemble_in_python_is_refused_by_the_ensemble(run: Path):
    from seqxduce.inspection.attention_maps import attention_view

    with pytest.raises(UserError, match="an ensemble of 2 models has no attention weights of its own") as caught:
        attention_view(load_run(run), "1 2 3")
    assert "transformer" not in str(caught.value)  # the member's model has attention: it is not blamed
    assert attention_view(load_run(run, member=2), "1 2 3").maps["cross"]


def test_plot_draws_one_labelled_curve_per_member(run: Path, tmp_path: Path):
    from seqxduce.inspection.curves import _named_logs

    assert [log.name for log in _named_logs([run])] == ["run member 1", "run member 2"]
    result = _invoke("plot", run, "-o", tmp_path / "curves.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_info_names_the_members_and_a_member_names_its_run(run: Path):
    whole = _invoke("info", run)
    assert whole.exit_code == 0, whole.output
    assert f"+ {run / 'members' / '2'}" in whole.output
    member = _invoke("info", run / "members" / "2")
    assert member.exit_code == 0, member.output
    assert f"member 2 of the run {run}" in member.output


def test_translate_answers_with_the_ensemble(run: Path):
    result = _invoke("translate", run, "--nbest", "2", input="\n".join(SOURCES) + "\n")
    assert result.exit_code == 0, result.output
    scores = [float(line.split("\t")[0]) for line in result.output.splitlines() if "\t" in line]
    expected = [hyp.score for o in seqxduce.decode(run, SOURCES, overrides=["decode.nbest=2"]) for _, hyp in o.nbest]
    # translate decodes each line alone, decode() both in one padded batch: the scores' last bits differ, so
    # they agree within the 4 printed decimals and TIE (rank by rank, which a near-tie's swap keeps)
    assert scores == pytest.approx(expected, abs=5e-5 + TIE)


def test_average_refuses_a_folder_and_checkpoints_of_two_members(run: Path, tmp_path: Path):
    line = _one_line_error(_invoke("average", run, "-o", tmp_path / "a.pt"))
    assert "a folder; name the checkpoint files" in line
    mixed = RunDir(run).step_checkpoints()[-1:] + [_last(run, 2)]
    line = _one_line_error(_invoke("average", *mixed, "-o", tmp_path / "a.pt"))
    assert "members 1 and 2" in line and "ensemble" in line
    assert not (tmp_path / "a.pt").exists()
    one_member = RunDir(run / "members" / "2").step_checkpoints()[-2:]
    assert _invoke("average", *one_member, "-o", tmp_path / "a.pt").exit_code == 0


def test_evaluate_with_the_runs_recipe(run: Path, tmp_path: Path):
    (tmp_path / "hyp.txt").write_text("3 2 1\n")
    (tmp_path / "ref.txt").write_text("3 2 1\n")
    result = _invoke("evaluate", tmp_path / "hyp.txt", tmp_path / "ref.txt", "--recipe", run)
    assert result.exit_code == 0, result.output
    assert "1.0000" in result.output


def test_recipe_info_says_the_figures_are_each_members(run: Path):
    result = _invoke("recipe", "info", run / "recipe.toml")
    assert result.exit_code == 0, result.output
    assert "[train] members = 2: the figures above are each member's" in result.output


def test_train_resume_goes_on_with_every_member(run: Path, tmp_path: Path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    result = _invoke("train", copy / "recipe.toml", "--out", copy, "--resume", "--set", "train.max_steps=8")
    assert result.exit_code == 0, result.output
    assert [_last(copy, k).name for k in (1, 2)] == ["step_00000008.pt", "step_00000008.pt"]
