"""`[distill] member_outputs` (data diversification, Nguyen et al. 2020): each member of a teacher run of several
members decodes the training sources alone beside the ensemble, each into a set of its own keyed as the ensemble's,
and the student trains on every source with the ensemble's output, then each member's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from seqxduce import engine
from seqxduce.api import Example, UserError
from seqxduce.cli import cli
from seqxduce.components import build_task, data_dir
from seqxduce.corpus.distilled import DistilledSet, DistilledTask, student_task
from seqxduce.files import file_digest
from seqxduce.rundir import RunDir
from tests.tiny import TINY_RECIPE
from tests.tiny_teacher import Lines, made_by_hand

MEMBERS = ("--set", "distill.member_outputs=true")
FEW_STEPS = ("--set", "train.max_steps=2")
# the tiny teacher's members end every output at once; a minimum length makes them write (and differ), and shows
# that the teacher's --teacher-set search is each member's too
SEARCH = ("--teacher-set", "decode.min_len=3")
SAME_SEARCH = ("--set", "decode.min_len=3")


@pytest.fixture(scope="module")
def two_members(tmp_path_factory) -> Path:
    """A tiny teacher of two members (seeds 1 and 2)."""
    out = tmp_path_factory.mktemp("members") / "run"
    engine.train(TINY_RECIPE, out, overrides=["train.members=2", "train.validate_every=0"])
    return out


def invoke(*args: object) -> object:
    return CliRunner().invoke(cli, list(map(str, args)))


def decoded(tmp_path: Path, name: str, sources: Path, *run_args: object) -> bytes:
    """What `seqxduce decode RUN_ARGS --input sources` writes."""
    out = tmp_path / f"{name}.txt"
    result = invoke("decode", *run_args, "--input", sources, "-o", out)
    assert result.exit_code == 0, result.output
    return out.read_bytes()


def test_each_member_decodes_alone_beside_the_ensemble_and_the_student_reads_every_output(
        two_members: Path, cache: Path, tmp_path: Path) -> None:
    result = invoke("distill", two_members, TINY_RECIPE, "--out", tmp_path / "student", *MEMBERS, *FEW_STEPS, *SEARCH)
    assert result.exit_code == 0, result.output
    saved = RunDir(tmp_path / "student").load_recipe()
    ensemble = DistilledSet(Path(saved.distill.targets))
    members = [DistilledSet(Path(folder)) for folder in saved.distill.member_targets]
    assert len(members) == 2 and all(made.complete for made in (ensemble, *members))
    assert len({ensemble.folder, *(m.folder for m in members)}) == 3 == len(list(cache.glob("distilled-*")))
    # each set is its teacher's own decode of the same sources: the ensemble, member 1 alone, member 2 alone
    sources = ensemble.sources
    assert all(m.sources.read_bytes() == sources.read_bytes() for m in members)
    assert ensemble.targets.read_bytes() == decoded(tmp_path, "ensemble", sources, two_members, *SAME_SEARCH)
    assert members[0].targets.read_bytes() == decoded(tmp_path, "first", sources, two_members,
                                                      "--set", "train.members=1", *SAME_SEARCH)
    assert members[1].targets.read_bytes() == decoded(tmp_path, "second", sources,
                                                      two_members / "members" / "2", *SAME_SEARCH)
    assert members[0].targets.read_bytes() != members[1].targets.read_bytes(), "the members must be told apart"
    # the student's training split: each source with the ensemble's output, then member 1's, then member 2's
    lines = [p.read_text().splitlines() for p in (sources, ensemble.targets, *(m.targets for m in members))]
    expected = [Example(source, target) for source, *targets in zip(*lines, strict=True) for target in targets]
    task = student_task(saved, build_task(saved))
    assert list(task.stream("train", data_dir(saved))) == expected
    # a second student of the same teacher decodes nothing
    again = invoke("distill", two_members, TINY_RECIPE, "--out", tmp_path / "again", *MEMBERS, *FEW_STEPS, *SEARCH)
    assert again.exit_code == 0, again.output
    assert again.output.count("made already") == 3 and len(list(cache.glob("distilled-*"))) == 3
    # the student continued without the members' sets would train on other data: refused in one line
    other = invoke("distill", two_members, TINY_RECIPE, "--out", tmp_path / "student", *FEW_STEPS, *SEARCH,
                   "--auto-resume")
    assert other.exit_code == 1 and "was trained on the distilled set" in other.output, other.output


def test_a_checkpoint_file_of_a_teacher_of_members_decodes_alone_as_decode_takes_it(
        two_members: Path, cache: Path, tmp_path: Path) -> None:
    """`distill --checkpoint FILE` with a teacher of two members behaves as `decode --checkpoint FILE`: that file
    alone decodes (not refused, nor ensembled with the other member), and the set's key names it alone; each
    member's own outputs beside it ([distill] member_outputs) are refused in one line, before any decoding."""
    step = RunDir(two_members).step_checkpoints()[-1]  # member 1's newest step
    refused = invoke("distill", two_members, TINY_RECIPE, "--out", tmp_path / "refused", "--checkpoint", step,
                     *MEMBERS, *FEW_STEPS)
    assert refused.exit_code == 1 and f"--checkpoint {step} is one file" in refused.output, refused.output
    assert "Traceback" not in refused.output and not list(cache.glob("distilled-*"))
    result = invoke("distill", two_members, TINY_RECIPE, "--out", tmp_path / "student", "--checkpoint", step,
                    *FEW_STEPS, *SEARCH)
    assert result.exit_code == 0, result.output
    assert f"(1 model: {step.name})" in result.output
    (folder,) = cache.glob("distilled-*")
    made = DistilledSet(folder)
    assert made.complete and Path(RunDir(tmp_path / "student").load_recipe().distill.targets) == folder
    assert json.loads(made.record_file.read_text())["teacher"]["checkpoints"] == [file_digest(step)]
    assert made.targets.read_bytes() == decoded(tmp_path, "file", made.sources, two_members, "--checkpoint", step,
                                                *SAME_SEARCH)


def test_a_teacher_of_one_model_has_no_members_to_add(teacher: Path, cache: Path, tmp_path: Path) -> None:
    result = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "student", *MEMBERS)
    assert result.exit_code == 1, result.output
    assert "[distill] member_outputs adds each member's own outputs" in result.output
    assert "is one model" in result.output and "Traceback" not in result.output
    assert not list(cache.glob("distilled-*")), "nothing was decoded"
    # the key alone makes a student recipe: train refuses it, naming distill
    trained = invoke("train", TINY_RECIPE, "--out", tmp_path / "x", *MEMBERS)
    assert trained.exit_code == 1 and "run `seqxduce distill TEACHER_RUN" in trained.output, trained.output


def test_members_sets_follow_the_ensembles_and_the_originals_come_last(tmp_path: Path) -> None:
    pairs = [(f"s{i}", f"t{i}") for i in range(50)]
    ensemble = made_by_hand(tmp_path / "e", pairs, [f"e{i}" for i in range(50)])
    members = [made_by_hand(tmp_path / f"m{k}", pairs, [f"m{k}-{i}" for i in range(50)]) for k in (1, 2)]
    task = DistilledTask(Lines(pairs), ensemble, 1.0, members)
    expected = [Example(f"s{i}", t) for i in range(50) for t in (f"e{i}", f"m1-{i}", f"m2-{i}", f"t{i}")]
    assert list(task.stream("train", tmp_path)) == expected
    # the members' outputs are part of what the prepared data are keyed by
    assert [m.targets for m in members] == task.data_files("train", tmp_path)[3:5]


def test_a_members_set_of_other_sources_is_refused_naming_both(tmp_path: Path) -> None:
    pairs = [(f"s{i}", f"t{i}") for i in range(4)]
    ensemble = made_by_hand(tmp_path / "e", pairs, ["e"] * 4)
    shorter = made_by_hand(tmp_path / "short", pairs[:3], ["m"] * 3)
    with pytest.raises(UserError, match=r"short was made from other sources \(pairs\)"):
        DistilledTask(Lines(pairs), ensemble, 0.0, [shorter])
    unfinished = DistilledSet(tmp_path / "unfinished")
    with pytest.raises(UserError, match="is not a finished distilled set"):
        DistilledTask(Lines(pairs), ensemble, 0.0, [unfinished])
