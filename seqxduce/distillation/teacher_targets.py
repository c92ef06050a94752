"""The teacher's distributions a student learns from with word-level knowledge distillation ([distill] word_kd):
the teacher run (its ensemble of members, averaged in probability as its decode averages them) reads every
training pair of the student teacher-forced, and its k most probable next tokens at each target position are kept
(corpus.soft_targets), computed once per teacher, k and encoded pairs.

The teacher computes in float32 whatever its decode precision: these are training targets, kept for the run's
life, and the pass costs a forward of the teacher per training pair once (a few minutes for Multi30k's 29,000 on
two CPU cores). The ranks of a torchrun world share the pass: rank r computes the batches k with k % world = r
into a piece of its own, and the last to find every piece whole merges them into the set (byte for byte the
arrays of one process's pass). Processes that are no world (a student's members) find the set made, or wait for
the one computing it. Who computes what is settled by file locks, not collectives, because the pass may outlast
[train] collective_timeout at scale; a piece whose process is gone is taken over by one still running. Each piece
records the batches it wrote every SAVE_SECONDS and when a signal stops it; the same command continues after them
(corpus.soft_targets.SoftTargetsWriter)."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from seqxduce.api import UserError, VocabInfo
from seqxduce.console import PairsProgress, console
from seqxduce.corpus.arrays import PairArrays, length_batches
from seqxduce.corpus.binarized import ids_dtype
from seqxduce.corpus.soft_targets import (
    META,
    PREFIX,
    SoftTargets,
    SoftTargetsWork,
    SoftTargetsWriter,
    pairs_digest,
    soft_key,
)
from seqxduce.corpus.token_cache import cache_root
from seqxduce.distillation.teacher import find_teacher
from seqxduce.files import file_digest
from seqxduce.recipe import Recipe
from seqxduce.signals import stop_while_preparing

if TYPE_CHECKING:
    from seqxduce.decoding.decode import PlannedRun

TEACHER_OVERRIDES = ("decode.precision=fp32",)  # see the module's docstring
SAVE_SECONDS = 30.0  # how often the pass records the batches it wrote (a stop records them too)
WAIT_SECONDS = 1.0  # how often a process whose pieces are done looks for the others'


def teacher_soft_targets(recipe: Recipe, pairs: PairArrays, tokenizer_files: Sequence[Path],
                         root: Path | None = None, expected: str | None = None,
                         share: tuple[int, int] = (0, 1)) -> SoftTargets:
    """The soft targets of `pairs` from recipe's [distill] teacher_run, found in the cache or computed there.
    tokenizer_files: the student's, which must be the teacher's (the same ids on both sides of the KL term).
    expected: the set a resumed run trained with; another one is refused before anything is computed. share: this
    process's piece of the pass and how many processes share it (a torchrun world's rank and size). The training
    run is handed this function by its caller (engine.train), as training imports no distillation."""
    d = recipe.distill
    checkpoint = d.teacher_checkpoint or None
    where = f"[distill] teacher_run = {d.teacher_run}"
    if not Path(d.teacher_run).is_dir():
        raise UserError(f"{where}: no such run directory; give the teacher's run (the --out of its `seqxduce train`)")
    # the teacher as the sequence-level teacher and decode find it: one answer to which checkpoints decode
    teacher = find_teacher(Path(d.teacher_run), TEACHER_OVERRIDES, checkpoint)
    theirs = [file_digest(p) for p in teacher.tokenizer_files]
    if theirs != [file_digest(p) for p in tokenizer_files]:
        raise UserError(f"{where}: word_kd compares the teacher's and the student's next-token distributions, which "
                        "needs the teacher's tokenizer files; start the student with the teacher's [tokenizer] "
                        "(`seqxduce distill` then takes its files) or with --tokenizers-from the teacher")
    parts = {"checkpoints": [file_digest(p) for p in teacher.checkpoints], "tokenizers": theirs,
             "top_k": d.word_kd_top_k, "ids": pairs_digest(pairs)}
    folder = (root or cache_root()) / (PREFIX + soft_key(parts))
    if expected is not None and folder.name != expected:
        raise UserError(f"{where}: this run trained with the teacher's distributions {expected}, but its teacher "
                        f"now gives {folder.name} (its checkpoints, tokenizer files or word_kd_top_k changed); "
                        "continue with the teacher and k it started with, or train into another --out")
    folder.parent.mkdir(parents=True, exist_ok=True)
    if not (folder / META).is_file():
        meta = {"teacher": str(Path(d.teacher_run)), "max_tokens": recipe.train.max_tokens, **parts}
        batches = length_batches(pairs.src_lengths, pairs.tgt_lengths, recipe.train.max_tokens, seed=0, epoch=0,
                                 shuffle=False)
        pass_ = _Pass(teacher.plan, Path(d.teacher_run), checkpoint, pairs, d.word_kd_top_k, batches, share)
        pass_.make(SoftTargetsWork(folder, pairs, d.word_kd_top_k, meta, share[1]))
    return SoftTargets.open(folder, pairs)


class _Pass:
    """The teacher's pass over the pairs, in batches of the training's max_tokens sorted by length (the teacher's
    forward only: no activation is kept for a backward), shared by `share[1]` processes: this one computes its
    piece (batch k is piece k % pieces), then any piece whose process is gone, and whoever finds every piece whole
    merges them. The teacher is loaded once, when a piece is first computed."""

    def __init__(self, plan: PlannedRun, teacher: Path, checkpoint: str | None, pairs: PairArrays, top_k: int,
                 batches: Any, share: tuple[int, int]):
        self.plan, self.teacher, self.checkpoint, self.pairs, self.top_k = plan, teacher, checkpoint, pairs, top_k
        self.batches, (self.piece, self.pieces) = batches, share
        self.loaded: Any = None

    def own(self, piece: int) -> range:
        """The batches of a piece."""
        return range(piece, len(self.batches), self.pieces)

    def owners(self) -> np.ndarray:
        """Each pair's piece: its batch's."""
        owners = np.full(len(self.pairs), -1, dtype=np.int32)
        for k in range(len(self.batches)):
            owners[self.batches.indices(k)] = k % self.pieces
        if (owners < 0).any():
            raise RuntimeError(f"{int((owners < 0).sum())} pairs are in no batch of the teacher's pass")
        return owners

    def make(self, work: SoftTargetsWork) -> None:
        """Compute and merge the pieces (a stop keeps the batches written), or wait for the processes that do."""
        lock_file = work.folder.with_name(work.folder.name + ".lock")
        started, waiting = time.perf_counter(), False
        while True:
            with open(lock_file, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the process ends
                if (work.folder / META).is_file():
                    return
                ours = work.plan()
                left = [p for p in self._order() if work.batches_done(p) < len(self.own(p))] if ours else None
                if left == []:
                    work.merge(self.pairs, self.owners() if self.pieces > 1 else None)
                    console.print(f"distill: the teacher's distributions made in {work.folder}")
                    return
            computed = False
            for piece in left or ():
                with work.piece_lock(piece) as mine:
                    if mine and work.planned() and work.batches_done(piece) < len(self.own(piece)):
                        with stop_while_preparing("computing the teacher's distributions for word_kd, before the "
                                                  "first step", "the batches written are kept, and the same "
                                                  "command continues after them"):
                            self._compute(piece, work)
                        computed = True
            if not computed:  # other processes hold what is left: their pieces, or another pass
                if not waiting:
                    console.print("distill: waiting for the other processes' pieces of the teacher's distributions")
                    waiting = True
                time.sleep(WAIT_SECONDS)
            elif self.loaded is not None and not waiting:
                console.print(f"distill: this process's pieces computed in {time.perf_counter() - started:.0f} s")

    def _order(self) -> list[int]:
        """The pieces this process takes, its own first."""
        return [(self.piece + i) % self.pieces for i in range(self.pieces)]

    def _compute(self, piece: int, work: SoftTargetsWork) -> None:
        """One piece's batches, continued after those a stopped pass wrote."""
        from seqxduce.decoding.decode import load_run

        if self.loaded is None:
            self.loaded = load_run(self.teacher, TEACHER_OVERRIDES, checkpoint=self.checkpoint)
        loaded = self.loaded
        vocab = loaded.tokenizers.vocab()
        own = self.own(piece)
        pairs = self.pairs
        folder = work.folder
        writer = SoftTargetsWriter(folder, pairs, self.top_k, ids_dtype(vocab.tgt_size), work.meta, piece,
                                   self.pieces)
        first = writer.done
        done_pairs = sum(len(self.batches.indices(k)) for k in own[:first])
        piece_pairs = sum(len(self.batches.indices(k)) for k in own)
        rows = int(pairs.tgt_lengths.sum()) + len(pairs)
        size = rows * self.top_k * (ids_dtype(vocab.tgt_size).itemsize + 2) / 1e6  # ids and float16 probabilities
        models = 1 + len(loaded.members)
        shared = f", piece {piece + 1} of {self.pieces}: {piece_pairs:,} pairs" if self.pieces > 1 else ""
        console.print(f"distill: the teacher's top {self.top_k} next tokens at {rows:,} target positions of "
                      f"{len(pairs):,} pairs ({models} model{'s' if models > 1 else ''}: {self.plan.described()}"
                      f"{shared}) into {folder} ({size:,.0f} MB)")
        if first:
            console.print(f"distill: continuing the teacher's distributions after {first:,} of {len(own):,} "
                          f"batches ({done_pairs:,} pairs)")
        last_save = time.monotonic()
        i = first
        try:
            with torch.inference_mode(), PairsProgress("distill: the teacher's distributions", piece_pairs,
                                                       start=done_pairs) as progress:
                for i in range(first, len(own)):
                    indices = self.batches.indices(own[i]).tolist()
                    _teach(loaded.model, pairs, indices, vocab, self.top_k, writer, loaded.device)
                    progress.advance(len(indices))
                    if time.monotonic() - last_save >= SAVE_SECONDS:
                        writer.save(i + 1)
                        last_save = time.monotonic()
                i = len(own)
        except BaseException:
            writer.save(i)  # the batches before the one under way are whole: the next run continues there
            raise
        writer.save(len(own))
        writer.close()


def _teach(model: torch.nn.Module, pairs: PairArrays, indices: list[int], vocab: VocabInfo, top_k: int,
           writer: SoftTargetsWriter, device: torch.device) -> None:
    """One batch: the teacher's log-probabilities (an ensemble's are its members' averaged in probability),
    their top k per position renormalised, each pair's rows written."""
    batch = pairs.collate(indices, vocab).to(device)
    logprobs = model(batch.src, batch.tgt_in).logits.float().log_softmax(dim=-1)
    top, ids = logprobs.topk(top_k, dim=-1)
    probs = top.softmax(dim=-1)  # the k probabilities renormalised: exp(top) / sum(exp(top))
    ids_np, probs_np = ids.cpu().numpy(), probs.cpu().numpy().astype(np.float16)
    for row, j in enumerate(indices):
        length = int(pairs.tgt_lengths[j]) + 1
        writer.put(j, ids_np[row, :length], probs_np[row, :length])
