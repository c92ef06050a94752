"""The one entry to a run's training pairs: TrainingCorpus.open chooses the road they take, in one place, and
owns the encoder of the sampled epochs.

The roads (`Road`):
- memory ([train] token_cache = false): the tokenizer files trained (or taken) into the run, then every process
  encodes the split in memory; nothing is written;
- prepared (a new run that trains its tokenizers): the `prepared-KEY` dataset of the recipe, made by corpus.prepare
  once (or by `seqxduce prepare` before), its tokenizer files copied into the run;
- tokens (the tokenizer files come from elsewhere: --resume, --auto-resume's restart, --tokenizers-from,
  --init-from, an ensemble's members): the dataset of the ids those files' bytes give (dataset_for_files), found
  where `prepare` or an earlier run wrote it, else written as `tokens-KEY`.
The processes of a run meet where the corpus says (`Ranks`), in the way the run says (training.run gives the
world's): one process writes, the others wait for it, every process maps the same files. The corpus imports no
other wing: what it needs of the run is the run folder's tokenizer files (TokenizerFiles) and how it started."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from itertools import groupby
from pathlib import Path
from typing import Protocol

import numpy as np

from seqxduce.api import Example, Task, UserError
from seqxduce.components import Tokenizers
from seqxduce.console import console
from seqxduce.corpus import binarized
from seqxduce.corpus.arrays import PairArrays
from seqxduce.corpus.prepare import (
    TOKENIZERS,
    Examples,
    data_fingerprint,
    dataset_for_files,
    nonempty,
    prepare_new,
    prepared_folder,
    train_tokenizers_shown,
    write_dataset,
)
from seqxduce.corpus.sampled_epochs import EpochEncoder
from seqxduce.data import encode_pairs
from seqxduce.recipe import Recipe
from seqxduce.run_start import RunStart
from seqxduce.tokenizer_files import TokenizerFiles


class Road(Enum):
    MEMORY = "memory"
    PREPARED = "prepared"
    TOKENS = "tokens"


class Ranks(Protocol):
    """How the processes of a run meet while its training data are made: `writes` is the one process that trains or
    copies the tokenizer files and writes the dataset; `meet` waits until every process is there (a short wait);
    `mapped` waits, however long the writing takes, until the writer is done with `folder` and returns the folder
    this process maps (own_copy(first on its node) makes the node's own copy when it does not see the writer's)."""

    writes: bool
    rank: int

    def meet(self) -> None: ...

    def mapped(self, folder: Path, own_copy: Callable[[bool], Path]) -> Path: ...


class Alone:
    """One process: it writes, and meets no one."""

    writes = True
    rank = 0

    def meet(self) -> None:
        pass

    def mapped(self, folder: Path, own_copy: Callable[[bool], Path]) -> Path:
        return folder


@dataclass
class TrainingCorpus:
    """A run's training pairs (mapped, or in memory), their key (the dataset's folder name: its data, tokenizer
    files and limits; or a digest of the ids encoded in memory), the tokenizers they were encoded with, and the
    encoder of the epochs a sampling tokenizer encodes anew (epochs)."""

    road: Road
    pairs: PairArrays
    key: str
    tokenizers: Tokenizers
    epochs: EpochEncoder = field(repr=False)

    @classmethod
    def open(cls, recipe: Recipe, task: Task, data_dir: Path, start: RunStart, files: TokenizerFiles,
             sampled_folder: Path | None = None, ranks: Ranks | None = None) -> TrainingCorpus:
        """The training pairs of a run that starts as `start` says (resolved: new or resume; a fine-tuned run as
        one whose tokenizers_from is the run it comes from) with its tokenizer files in `files` (the run folder):
        put there (trained, copied, or kept on a resume) and read from there. sampled_folder: where the epochs of a
        sampling tokenizer are written (None: a temporary folder). A student's training split (issue #60) comes
        with its task (corpus.distilled.DistilledTask), read as any task's."""
        ranks = ranks or Alone()
        s = recipe.train
        examples = Examples(task, data_dir)  # read only when not prepared yet, or sampled
        road = _road(recipe, start)
        match road:
            case Road.MEMORY:
                _tokenizers_in(files, recipe, ranks, examples, start)
                tokenizers = files.load(recipe)
                pairs, skipped = _in_memory(list(nonempty(recipe, examples)), tokenizers, s.max_source_len,
                                            s.max_target_len)
                _report_kept(len(pairs), skipped, ranks.writes)
                key = _digest(pairs)
            case Road.PREPARED | Road.TOKENS:
                pairs, key = _mapped(road, recipe, task, data_dir, start, files, ranks, examples)
                tokenizers = files.load(recipe)
        epochs = EpochEncoder(examples, tokenizers.src, tokenizers.tgt, s.max_source_len, s.max_target_len,
                              s.max_tokens, s.seed, folder=sampled_folder, rank=ranks.rank, show=ranks.writes,
                              key=key)
        return cls(road, pairs, key, tokenizers, epochs)


def _road(recipe: Recipe, start: RunStart) -> Road:
    """The one choice of road, from [train] token_cache and where the run's tokenizer files come from."""
    if not recipe.train.token_cache:
        return Road.MEMORY
    if start.resume or start.tokenizers_from is not None:
        return Road.TOKENS
    return Road.PREPARED


def _tokenizers_in(files: TokenizerFiles, recipe: Recipe, ranks: Ranks, examples: Examples, start: RunStart
                   ) -> None:
    """A resumed run keeps the tokenizers its checkpoints were trained with; a new run trains its own (or copies
    tokenizers_from's), replacing any left in the run directory by an earlier attempt (they may come from other
    settings)."""
    if not start.resume and ranks.writes:
        if start.tokenizers_from is not None:
            files.copy(recipe, start.tokenizers_from)
        else:
            train_tokenizers_shown(files, recipe, nonempty(recipe, examples))  # with its lines for a log file
    ranks.meet()
    if not files.has(recipe):
        raise UserError(f"--resume: {files.folder} holds no tokenizer files; train into a new --out")


def _mapped(road: Road, recipe: Recipe, task: Task, data_dir: Path, start: RunStart, files: TokenizerFiles,
            ranks: Ranks, examples: Examples) -> tuple[PairArrays, str]:
    """The pairs of the prepared-KEY or tokens-KEY dataset, mapped: the writer finds it or writes it (and puts the
    run's tokenizer files in place), the others wait for it (ranks.mapped), then every process maps it."""
    fingerprint = data_fingerprint(task, data_dir, examples)
    reused = False  # the data were prepared before (else preparing them printed what it kept)
    if road is Road.PREPARED:  # tokenizers and ids from the prepared folder
        folder = prepared_folder(recipe, fingerprint)
        if ranks.writes:
            reused = _found(folder)
            if not reused:
                prepare_new(recipe, folder, examples, fingerprint, total=examples.lines_hint())
            files.copy(recipe, folder / TOKENIZERS)
    else:  # the tokenizer files come from elsewhere: the ids are keyed by their bytes
        _tokenizers_in(files, recipe, ranks, examples, start)
        tokenizers = files.load(recipe)
        # a restart, a resumed run, a run given the same tokenizer files: the dataset prepared before, if any
        folder = dataset_for_files(recipe, fingerprint, files.files(recipe), tokenizers)
        if ranks.writes:
            reused = _found(folder)
            if not reused:
                write_dataset(folder, nonempty(recipe, examples), tokenizers, recipe, total=examples.lines_hint())
    mapped = ranks.mapped(folder, lambda first: _own_copy(recipe, files, fingerprint, examples, first, ranks.rank))
    pairs, meta = binarized.open_dataset(mapped, verify=not ranks.writes)  # the writer checked it in _found
    _report_kept(len(pairs), sum(meta.get("dropped", {}).values()), ranks.writes and reused)
    return pairs, folder.name  # the dataset's key: its data, tokenizers and limits


def _found(folder: Path) -> bool:
    """Whether the dataset is there already (a damaged one is refused here, before anything is copied)."""
    if not binarized.exists(folder):
        return False
    binarized.open_dataset(folder)
    console.print(f"train: the training data were prepared already: {folder}")
    return True


def _own_copy(recipe: Recipe, files: TokenizerFiles, fingerprint: str, examples: Examples, first: bool,
              rank: int) -> Path:
    """This node's own dataset of the ids the writer mapped: encoded with the run's tokenizer files (which the
    writer put in the run directory: the same bytes, so the same ids) by the node's first process (first), the
    others waiting for it (ranks.mapped); found instead when the node has it already (a restart)."""
    if not files.has(recipe):
        raise UserError(f"process {rank}: sees neither the training data process 0 prepared nor the run's "
                        f"tokenizer files in {files.folder}: put --out on storage every node shares")
    tokenizers = files.load(recipe)
    own = dataset_for_files(recipe, fingerprint, files.files(recipe), tokenizers)
    if first:
        if not binarized.exists(own):
            write_dataset(own, nonempty(recipe, examples), tokenizers, recipe, show=False)
        console.print(f"process {rank}: this node's cache folder is not process 0's; it maps its own copy "
                      f"of the training data, {own}")
    return own


def _in_memory(examples: list[Example], tokenizers: Tokenizers, max_src: int, max_tgt: int) -> tuple[PairArrays, int]:
    """The examples encoded in memory, pairs over the limits skipped (how many: the second value), with the
    corpora they come from (Example.corpus) as the parts of the arrays, as a prepared dataset has them."""
    listed, skipped, parts = [], 0, []
    for corpus, group in groupby(examples, key=lambda ex: ex.corpus):
        kept, dropped = encode_pairs(list(group), tokenizers.src, tokenizers.tgt, max_src, max_tgt)
        listed.extend(kept)
        skipped += dropped
        parts.append((corpus, len(kept)))
    return PairArrays.from_pairs(listed, parts if any(name for name, _ in parts) else ()), skipped


def _digest(pairs: PairArrays) -> str:
    """A key of pairs encoded in memory (a small corpus): their ids."""
    digest = hashlib.sha256()
    for array in (pairs.src_ids, pairs.src_offsets, pairs.tgt_ids, pairs.tgt_offsets):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:32]


def _report_kept(kept: int, skipped: int, show: bool) -> None:
    if skipped and show:
        console.print(f"train: skipped {skipped} of {kept + skipped} pairs over max_source_len/max_target_len")
    if not kept:
        raise UserError("train: no pairs left after the length limits; raise [train] max_source_len/max_target_len")
