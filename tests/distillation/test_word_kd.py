"""Word-level knowledge distillation ([distill] word_kd): the teacher's top-k next-token distributions over the
student's training pairs are computed once (float32, the teacher's ensemble averaged), kept in the cache keyed by
the teacher's checkpoints, k and the encoded pairs, found again by a second student, and gathered into each batch
aligned with its targets; a stop during their pass keeps nothing; the refusals."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from seqxduce import engine
from seqxduce.api import VocabInfo
from seqxduce.cli import cli
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays
from seqxduce.corpus.soft_targets import SoftTargets, SoftTargetsWork, SoftTargetsWriter, pairs_digest
from seqxduce.data import Pair
from seqxduce.decoding.decode import load_run
from seqxduce.distillation import teacher_targets
from tests.tiny import TINY_RECIPE

KD = ("--set", "distill.word_kd=0.5", "--set", "train.max_steps=2")


def invoke(*args: object):
    return CliRunner().invoke(cli, [*map(str, args)])


def soft_folders(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("soft-*") if p.is_dir() and not p.name.endswith(".work"))


def student_pairs(cache: Path, meta: dict) -> PairArrays:
    """The student's encoded training pairs: the prepared dataset in the cache whose ids the set was keyed by."""
    for folder in cache.glob("tokens-*"):
        pairs = binarized.open_dataset(folder)[0]
        if pairs_digest(pairs) == meta["ids"]:
            return pairs
    raise AssertionError("no prepared dataset holds the ids the teacher's distributions were computed for")


def test_the_student_learns_from_the_teachers_distributions_computed_once(teacher: Path, cache: Path,
                                                                          tmp_path: Path) -> None:
    first = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "a", *KD)
    assert first.exit_code == 0, first.output
    assert "the teacher's top 8 next tokens" in first.output
    (folder,) = soft_folders(cache)
    meta = json.loads((folder / "meta.json").read_text())
    pairs = student_pairs(cache, meta)
    soft = SoftTargets.open(folder, pairs)
    assert soft.ids.shape == (int(pairs.tgt_lengths.sum()) + len(pairs), 8)
    # each pair's rows are the teacher's own distribution for that pair alone, teacher-forced on its target
    loaded = load_run(teacher, ("decode.precision=fp32",))
    vocab = loaded.tokenizers.vocab()
    for j in (0, 17, len(pairs) - 1):
        batch = pairs.collate([j], vocab)
        with torch.inference_mode():
            probs = loaded.model(batch.src, batch.tgt_in).logits.float().softmax(-1)[0]
        ids, kept = soft.collate([j], batch.tgt_out.size(1))
        top = probs.topk(8, dim=-1)
        # the same k tokens and their probabilities renormalised, within float16's rounding; the kept first token
        # is compared by its probability, not its id: a near-tie may order it otherwise in another batch shape
        assert torch.allclose(kept[0], top.values / top.values.sum(-1, keepdim=True), atol=2e-3)
        first = probs.gather(-1, ids[0, :, :1]).squeeze(-1)
        assert torch.allclose(first, top.values[:, 0], atol=1e-4)
    # the run says which teacher it learned from, and a second student of it computes nothing
    saved = engine.load_run_recipe(tmp_path / "a")
    assert Path(saved.distill.teacher_run) == teacher.resolve() and saved.distill.word_kd == 0.5
    again = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "b", *KD)
    assert again.exit_code == 0, again.output
    assert "next tokens" not in again.output and soft_folders(cache) == [folder]
    # another k, or another teacher checkpoint, is another set
    other_k = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "c", *KD, "--set", "distill.word_kd_top_k=3")
    assert other_k.exit_code == 0, other_k.output
    step_4 = teacher / "checkpoints" / "step_00000004.pt"
    other_step = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "d", *KD, "--checkpoint", step_4)
    assert other_step.exit_code == 0, other_step.output
    assert engine.load_run_recipe(tmp_path / "d").distill.teacher_checkpoint == str(step_4)
    assert len(soft_folders(cache)) == 3


@pytest.mark.parametrize("pieces", [1, 2])
def test_a_batch_gathers_each_pairs_rows_aligned_with_its_targets(tmp_path: Path, pieces: int) -> None:
    """The rows written by one process, or by two (pairs 0 and 2 in the first piece, pair 1 in the second, as two
    ranks write theirs) and merged, are gathered per pair as its batch's targets are."""
    pairs = PairArrays.from_pairs([Pair([5, 2], [7, 8, 9]), Pair([6, 2], []), Pair([4, 4, 2], [9])])
    owners = np.array([0, 1, 0]) if pieces == 2 else np.zeros(3, dtype=np.int32)
    work = SoftTargetsWork(tmp_path / "soft", pairs, 2, {}, pieces)
    assert work.plan()
    for piece in range(pieces):
        writer = SoftTargetsWriter(tmp_path / "soft", pairs, 2, np.dtype(np.uint16), {}, piece, pieces)
        for j in np.flatnonzero(owners == piece):
            rows = len(pairs.target(j)) + 1
            ids = np.array([[10 * j + r, 1] for r in range(rows)])
            writer.put(j, ids, np.tile(np.array([0.75, 0.25], dtype=np.float16), (rows, 1)))
        writer.save(1)
        writer.close()
        assert work.batches_done(piece) == 1
    soft = SoftTargets.open(work.merge(pairs, owners), pairs)
    assert sorted(p.name for p in (tmp_path / "soft").iterdir()) == ["ids.npy", "meta.json", "probs.npy"]
    vocab = VocabInfo(src_size=100, tgt_size=100, pad_id=0, bos_id=1, eos_id=2, shared=True)
    batch = pairs.collate([2, 0, 1], vocab)
    ids, probs = soft.collate([2, 0, 1], batch.tgt_out.size(1))
    assert ids.shape == (3, 4, 2) == probs.shape
    assert ids[:, :, 0].tolist() == [[20, 21, 0, 0], [0, 1, 2, 3], [10, 0, 0, 0]]
    # probabilities exactly where the targets count (eos included), none at padding
    assert torch.equal(probs.sum(-1) > 0, batch.tgt_out != vocab.pad_id)


def stopped_in_batch(monkeypatch, n: int) -> None:
    """SIGTERM to this process as the teacher's pass begins its n-th batch."""
    real, calls = teacher_targets._teach, []

    def stopped(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(teacher_targets, "_teach", stopped)


def assert_as_never_stopped(folder: Path, teacher: Path, tmp_path: Path, monkeypatch) -> None:
    """The arrays in `folder` are, byte for byte, those of one process's pass never stopped (in a cache of its
    own)."""
    monkeypatch.undo()
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "whole"))
    whole = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "w", *KD)
    assert whole.exit_code == 0, whole.output
    (never_stopped,) = soft_folders(tmp_path / "whole")
    assert never_stopped.name == folder.name
    for name in ("ids.npy", "probs.npy"):
        assert (folder / name).read_bytes() == (never_stopped / name).read_bytes()


def test_a_stopped_teachers_pass_continues_to_the_arrays_of_one_never_stopped(teacher: Path, cache: Path,
                                                                             tmp_path: Path, monkeypatch) -> None:
    """SIGTERM while the teacher's pass is in its third batch: the two batches before it are kept (work folder and
    its progress record), the same command continues after them, and the arrays are those of a pass never
    stopped, byte for byte."""
    real = teacher_targets._teach
    stopped_in_batch(monkeypatch, 3)
    stopped = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "s", *KD)
    assert stopped.exit_code == 128 + signal.SIGTERM, stopped.output
    assert "stopped while computing the teacher's distributions" in stopped.output
    assert "the same command continues after them" in stopped.output
    (work,) = cache.glob("soft-*.work")
    assert soft_folders(cache) == [] and json.loads((work / "progress.json").read_text())["batches"] == 2
    monkeypatch.setattr(teacher_targets, "_teach", real)
    again = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "s", *KD, "--auto-resume")
    assert again.exit_code == 0, again.output
    assert "continuing the teacher's distributions after 2 of" in again.output
    (folder,) = soft_folders(cache)
    assert not work.exists() and not (folder / "progress.json").exists()
    assert_as_never_stopped(folder, teacher, tmp_path, monkeypatch)


def as_a_share(monkeypatch, share: tuple[int, int]) -> None:
    """The run's pass as one process of `share[1]` sharing it (a rank of a world that size) computes it."""
    real = teacher_targets.teacher_soft_targets
    monkeypatch.setattr(teacher_targets, "teacher_soft_targets", lambda *a, **k: real(*a, **{**k, "share": share}))


def test_a_pass_shared_by_processes_merges_to_the_arrays_of_one_and_a_gone_processs_piece_is_taken_over(
        teacher: Path, cache: Path, tmp_path: Path, monkeypatch) -> None:
    """Rank 1 of a world of 3 whose other ranks never come: it computes its own piece (batches 1, 4, ...), then
    takes over the two pieces nobody holds, and merges them. The arrays are those of one process's pass, byte for
    byte (the same process computes each batch as that pass does), and the work folder's pieces are gone."""
    as_a_share(monkeypatch, (1, 3))
    shared = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "s", *KD)
    assert shared.exit_code == 0, shared.output
    said = [line for line in shared.output.splitlines() if "next tokens at" in line]
    assert [line.split("piece ")[1].split(":")[0] for line in said] == ["2 of 3", "3 of 3", "1 of 3"], said
    (folder,) = soft_folders(cache)
    assert sorted(p.name for p in folder.iterdir()) == ["ids.npy", "meta.json", "probs.npy"]
    assert not list(cache.glob("soft-*.work"))
    monkeypatch.undo()
    monkeypatch.setenv("SEQXDUCE_CACHE", str(tmp_path / "alone"))
    alone = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "a", *KD)
    assert alone.exit_code == 0, alone.output
    (by_one,) = soft_folders(tmp_path / "alone")
    assert by_one.name == folder.name  # the key knows no pieces: either pass makes the set of the other
    for name in ("ids.npy", "probs.npy"):
        assert (folder / name).read_bytes() == (by_one / name).read_bytes()


def test_more_processes_than_batches_leave_their_pieces_empty(teacher: Path, cache: Path, tmp_path: Path,
                                                              monkeypatch) -> None:
    """A world larger than the pass has batches (rank 30 of 64 over the tiny teacher's few batches): the pieces of
    no batch write nothing, and the merge makes the whole set from the others."""
    as_a_share(monkeypatch, (30, 64))
    shared = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "s", *KD)
    assert shared.exit_code == 0, shared.output
    (folder,) = soft_folders(cache)
    assert json.loads((folder / "meta.json").read_text())["top_k"] == 8


def test_a_stopped_piece_continues_where_it_stopped(teacher: Path, cache: Path, tmp_path: Path, monkeypatch) -> None:
    """SIGTERM in the second batch of rank 0's piece (of 2): its first batch is kept in its progress record, the
    other piece is not begun; the same command continues the piece after it, then does the other, and the arrays
    are those of a pass never stopped."""
    as_a_share(monkeypatch, (0, 2))
    real = teacher_targets._teach
    stopped_in_batch(monkeypatch, 2)
    stopped = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "s", *KD)
    assert stopped.exit_code == 128 + signal.SIGTERM, stopped.output
    (work,) = cache.glob("soft-*.work")
    assert json.loads((work / "progress-1-of-2.json").read_text())["batches"] == 1
    assert not (work / "progress-2-of-2.json").exists()
    monkeypatch.setattr(teacher_targets, "_teach", real)
    again = invoke("distill", teacher, TINY_RECIPE, "--out", tmp_path / "s", *KD, "--auto-resume")
    assert again.exit_code == 0, again.output
    assert "continuing the teacher's distributions after 1 of" in again.output
    (folder,) = soft_folders(cache)
    assert_as_never_stopped(folder, teacher, tmp_path, monkeypatch)


def test_a_pass_under_way_elsewhere_is_waited_for_not_cleared(tmp_path: Path) -> None:
    """A work folder planned for another pass (another number of pieces) whose piece a live process holds is left
    as it is; once no process holds any of its pieces, it is stale and planned anew."""
    import fcntl

    pairs = PairArrays.from_pairs([Pair([5, 2], [7, 8, 9])])
    theirs = SoftTargetsWork(tmp_path / "soft", pairs, 2, {}, 3)
    assert theirs.plan()
    held = open(theirs.work / "piece-2-of-3.lock", "a")
    fcntl.flock(held, fcntl.LOCK_EX)  # another open file: a lock this process's probe cannot take
    (theirs.work / "progress-2-of-3.json").write_text("kept")
    mine = SoftTargetsWork(tmp_path / "soft", pairs, 2, {}, 1)
    assert not mine.plan() and (theirs.work / "progress-2-of-3.json").read_text() == "kept"
    held.close()
    assert mine.plan() and not (theirs.work / "progress-2-of-3.json").exists() and mine.planned()


def test_word_kd_without_a_teacher_or_with_another_vocabulary_is_refused_in_one_line(teacher: Path, cache: Path,
                                                                                    tmp_path: Path) -> None:
    alone = invoke("train", TINY_RECIPE, "--out", tmp_path / "alone", "--set", "distill.word_kd=0.5")
    assert alone.exit_code == 1 and "learns from a teacher's distributions" in alone.output
    assert "Traceback" not in alone.output
    # a teacher named by hand, but a student with a vocabulary of its own
    other = invoke("train", TINY_RECIPE, "--out", tmp_path / "other", "--set", "distill.word_kd=0.5",
                   "--set", f"distill.teacher_run={teacher}", "--set", "tokenizer.max_size=4")
    assert other.exit_code == 1 and "needs the teacher's tokenizer files" in other.output, other.output
    assert soft_folders(cache) == []
    # word-level distillation alone, on the original targets, with the teacher's vocabulary: it trains
    own = invoke("train", TINY_RECIPE, "--out", tmp_path / "own", "--set", "distill.word_kd=0.5",
                 "--set", f"distill.teacher_run={teacher}", "--tokenizers-from", teacher, "--set",
                 "train.max_steps=2")
    assert own.exit_code == 0, own.output
    assert len(soft_folders(cache)) == 1
    # k without word_kd reads nothing: refused as every unread setting is
    unread = invoke("train", TINY_RECIPE, "--out", tmp_path / "k", "--set", "distill.word_kd=0",
                    "--set", "distill.word_kd_top_k=4")
    assert unread.exit_code != 0 and "word_kd" in unread.output


def test_a_resume_whose_teacher_changed_is_refused_before_anything_is_computed(teacher: Path, cache: Path,
                                                                              tmp_path: Path) -> None:
    """Word-level distillation alone (`train`, the teacher named by hand): the run folder records the teacher's
    distributions it trains with; a resume with the same teacher goes on, one whose teacher was trained on (another
    checkpoint behind the same run) is refused in one line, not trained on other targets without a word."""
    mine = tmp_path / "teacher"
    shutil.copytree(teacher, mine)
    kd = ("--set", "distill.word_kd=0.5", "--set", f"distill.teacher_run={mine}")
    first = invoke("train", TINY_RECIPE, "--out", tmp_path / "s", "--tokenizers-from", mine, *kd,
                   "--set", "train.max_steps=2")
    assert first.exit_code == 0, first.output
    (folder,) = soft_folders(cache)
    assert json.loads((tmp_path / "s" / "word_kd.json").read_text()) == {"soft_targets": folder.name}
    on = invoke("train", TINY_RECIPE, "--out", tmp_path / "s", "--resume", *kd, "--set", "train.max_steps=4")
    assert on.exit_code == 0, on.output
    assert "next tokens" not in on.output  # found, not computed again
    # the teacher trained on: the checkpoint its decode loads is another one now
    newest = sorted((mine / "checkpoints").glob("step_*.pt"))
    shutil.copyfile(newest[0], newest[-1])
    refused = invoke("train", TINY_RECIPE, "--out", tmp_path / "s", "--resume", *kd, "--set", "train.max_steps=6")
    assert refused.exit_code == 1 and "now gives" in refused.output and "Traceback" not in refused.output
    assert soft_folders(cache) == [folder]  # refused before anything was computed
