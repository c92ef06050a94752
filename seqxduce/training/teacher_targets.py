"""The teacher's distributions a student learns from with word-level knowledge distillation ([distill] word_kd):
the teacher run (its ensemble of members, averaged in probability as its decode averages them) reads every
training pair of the student teacher-forced, and its k most probable next tokens at each target position are kept
(corpus.soft_targets), computed once per teacher, k and encoded pairs.

The teacher computes in float32 whatever its decode precision: these are training targets, kept for the run's
life, and the pass costs a forward of the teacher per training pair once (a few minutes for Multi30k's 29,000 on
two CPU cores). Processes that share the cache folder take turns by a file lock, so that a torchrun world or a
student's members compute it once and the others map it; the lock is a file's, not a collective's, because the
pass may outlast [train] collective_timeout at scale. The pass records the batches it wrote every SAVE_SECONDS and
when a signal stops it; the same command continues after them (corpus.soft_targets.SoftTargetsWriter)."""

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
from seqxduce.corpus.distilled import file_digest
from seqxduce.corpus.soft_targets import META, PREFIX, SoftTargets, SoftTargetsWriter, pairs_digest, soft_key
from seqxduce.corpus.token_cache import cache_root
from seqxduce.recipe import Recipe
from seqxduce.signals import stop_while_preparing

if TYPE_CHECKING:
    from seqxduce.decoding.decode import PlannedRun

TEACHER_OVERRIDES = ("decode.precision=fp32",)  # see the module's docstring
SAVE_SECONDS = 30.0  # how often the pass records the batches it wrote (a stop records them too)


def teacher_soft_targets(recipe: Recipe, pairs: PairArrays, tokenizer_files: Sequence[Path],
                         root: Path | None = None, expected: str | None = None) -> SoftTargets:
    """The soft targets of `pairs` from recipe's [distill] teacher_run, found in the cache or computed there.
    tokenizer_files: the student's, which must be the teacher's (the same ids on both sides of the KL term).
    expected: the set a resumed run trained with; another one is refused before anything is computed."""
    from seqxduce.decoding.decode import plan_run

    d = recipe.distill
    teacher = Path(d.teacher_run)
    checkpoint = d.teacher_checkpoint or None
    where = f"[distill] teacher_run = {d.teacher_run}"
    if not teacher.is_dir():
        raise UserError(f"{where}: no such run directory; give the teacher's run (the --out of its `seqxduce train`)")
    plan = plan_run(teacher, TEACHER_OVERRIDES, checkpoint=checkpoint)
    theirs = [file_digest(p) for p in plan.run.tokenizers.files(plan.recipe)]
    if theirs != [file_digest(p) for p in tokenizer_files]:
        raise UserError(f"{where}: word_kd compares the teacher's and the student's next-token distributions, which "
                        "needs the teacher's tokenizer files; start the student with the teacher's [tokenizer] "
                        "(`seqxduce distill` then takes its files) or with --tokenizers-from the teacher")
    parts = {"checkpoints": [file_digest(p) for p in (plan.checkpoint, *plan.members)], "tokenizers": theirs,
             "top_k": d.word_kd_top_k, "ids": pairs_digest(pairs)}
    folder = (root or cache_root()) / (PREFIX + soft_key(parts))
    if expected is not None and folder.name != expected:
        raise UserError(f"{where}: this run trained with the teacher's distributions {expected}, but its teacher "
                        f"now gives {folder.name} (its checkpoints, tokenizer files or word_kd_top_k changed); "
                        "continue with the teacher and k it started with, or train into another --out")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the process ends
        if not (folder / META).is_file():
            with stop_while_preparing("computing the teacher's distributions for word_kd, before the first step",
                                      "the batches written are kept, and the same command continues after them"):
                _compute(plan, teacher, checkpoint, pairs, d.word_kd_top_k, folder, parts, recipe.train.max_tokens)
    return SoftTargets.open(folder, pairs)


def _compute(plan: PlannedRun, teacher: Path, checkpoint: str | None, pairs: PairArrays, top_k: int,
             folder: Path, parts: dict[str, Any], max_tokens: int) -> None:
    """The pass over the pairs, in batches of the training's max_tokens sorted by length (the teacher's forward
    only: no activation is kept for a backward)."""
    from seqxduce.decoding.decode import load_run

    started = time.perf_counter()
    loaded = load_run(teacher, TEACHER_OVERRIDES, checkpoint=checkpoint)
    vocab = loaded.tokenizers.vocab()
    models = 1 + len(loaded.members)
    rows = int(pairs.tgt_lengths.sum()) + len(pairs)
    size = rows * top_k * (ids_dtype(vocab.tgt_size).itemsize + 2) / 1e6  # ids and float16 probabilities
    console.print(f"distill: the teacher's top {top_k} next tokens at {rows:,} target positions of {len(pairs):,} "
                  f"pairs ({models} model{'s' if models > 1 else ''}: {plan.described()}) into {folder} "
                  f"({size:,.0f} MB)")
    writer = SoftTargetsWriter(folder, pairs, top_k, ids_dtype(vocab.tgt_size),
                               {"teacher": str(teacher), "max_tokens": max_tokens, **parts})
    batches = length_batches(pairs.src_lengths, pairs.tgt_lengths, max_tokens, seed=0, epoch=0, shuffle=False)
    first = writer.done
    done_pairs = sum(len(batches.indices(k)) for k in range(first))
    if first:
        console.print(f"distill: continuing the teacher's distributions after {first:,} of {len(batches):,} batches "
                      f"({done_pairs:,} pairs)")
    last_save = time.monotonic()
    k = first
    try:
        with torch.inference_mode(), PairsProgress("distill: the teacher's distributions", len(pairs),
                                                   start=done_pairs) as progress:
            for k in range(first, len(batches)):
                indices = batches.indices(k).tolist()
                _teach(loaded.model, pairs, indices, vocab, top_k, writer, loaded.device)
                progress.advance(len(indices))
                if time.monotonic() - last_save >= SAVE_SECONDS:
                    writer.save(k + 1)
                    last_save = time.monotonic()
            k = len(batches)
    except BaseException:
        writer.save(k)  # the batches before the one under way are whole: the next run continues there
        raise
    writer.close()
    console.print(f"distill: the teacher's distributions computed in {time.perf_counter() - started:.0f} s")


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
