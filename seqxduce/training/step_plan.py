"""The step plan: which training pairs each optimizer step takes. The length curriculum, batching by length, the
epochs (encoded anew when a tokenizer samples) and each rank's share of a step's batches, as a function of the
position in training alone, so that a --resume and every rank plan the same steps."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqxduce.api import UserError, VocabInfo
from seqxduce.corpus.arrays import EpochBatches, PairArrays, length_batches, release_freed_memory
from seqxduce.corpus.mixture import mixture_batches
from seqxduce.corpus.sampled_epochs import EpochEncoder
from seqxduce.data import Batch, Pair
from seqxduce.settings import TrainSettings
from seqxduce.training.state import TrainState


def curriculum_cap(step: int, start_len: int, steps: int, longest: int, hold: int = 0) -> int | None:
    """The longest source (tokens) a length curriculum lets train at `step`, or None once it is over.

    The cap stays at start_len for the first `hold` steps, then grows linearly to the longest source over the
    next `steps`, so short pairs, which a model learns first, come alone at the start and long ones join
    gradually. A hold gives a two-stage curriculum: a task whose short cases are learned only after a long
    plateau (the UT's 'a + b') gets them alone until it has learned them, then every length.
    """
    if start_len <= 0 or step >= hold + steps or start_len >= longest:
        return None
    grown = max(step - hold, 0)
    return start_len + (longest - start_len) * grown // steps


def steps_in_epoch(num_batches: int, world_size: int, update_freq: int) -> int:
    """Optimizer steps an epoch holds: each consumes world_size * update_freq batches; the remainder is dropped."""
    return num_batches // (world_size * update_freq)


def batches_for_step(batches: Sequence[list[int]], step_in_epoch: int, rank: int, world_size: int,
                     update_freq: int) -> list[list[int]]:
    """The update_freq batches this rank accumulates for one optimizer step.

    Rank r of a world of W takes the same batches a single process with update_freq * W would take
    in positions r*update_freq .. (r+1)*update_freq - 1, so data-parallel runs match single-process ones.
    """
    start = step_in_epoch * world_size * update_freq + rank * update_freq
    return batches[start:start + update_freq]


class RankEpoch(Sequence[list[int]]):
    """One rank's share of an epoch's batches: the pair indices of the batches this rank takes and no others (a
    rank of a world of W holds 1/W of the epoch's order, so the ranks together hold what one process would), and
    per step the target tokens of every rank's batches (the gradient's normaliser, known without asking them).
    Indexing gives this rank's k-th batch as a list of pair indices."""

    def __init__(self, batches: EpochBatches, tgt_lengths: np.ndarray, rank: int, world_size: int,
                 update_freq: int):
        self.batches_in_epoch = len(batches)
        self.update_freq = update_freq
        steps = steps_in_epoch(len(batches), world_size, update_freq)
        # position k of the epoch's batch order goes to rank (k // update_freq) % world_size (batches_for_step)
        positions = np.arange(steps * world_size * update_freq).reshape(steps, world_size, update_freq)
        sizes = np.diff(batches.bounds)
        # the target tokens of each batch, eos included, as the loss counts them
        # (gathered in the lengths' own type, then widened: not a copy of every pair's length in int64 first)
        tokens = np.add.reduceat(np.asarray(tgt_lengths)[batches.order].astype(np.int64) + 1,
                                 batches.bounds[:-1]) if len(sizes) else np.zeros(0, dtype=np.int64)
        self.step_tokens = tokens[batches.batch_order[positions.reshape(steps, world_size * update_freq)]].sum(axis=1)
        mine = batches.batch_order[positions[:, rank, :].ravel()]
        lengths = sizes[mine]
        self.bounds = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        # this rank's batches end to end: position p of its k-th batch is the epoch order's bounds[b_k] + p
        within = np.arange(self.bounds[-1]) - np.repeat(self.bounds[:-1], lengths)
        self.order = batches.order[np.repeat(batches.bounds[mine], lengths) + within]

    @property
    def steps(self) -> int:
        return len(self.step_tokens)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self.order[self.bounds[k]:self.bounds[k + 1]].tolist()

    def step(self, step_in_epoch: int) -> list[list[int]]:
        """This rank's update_freq batches of one step of the epoch."""
        first = step_in_epoch * self.update_freq
        return [self[k] for k in range(first, first + self.update_freq)]


@dataclass
class PlannedStep:
    """One optimizer step as the plan has it: the data position, this rank's batches (pair indices) and
    the target tokens of all ranks' batches (the gradient's normaliser), and the pairs the batches index (arrays,
    memory-mapped for a prepared dataset: the batches gather their rows from them)."""

    epoch: int
    step_in_epoch: int
    batch_indices: list[list[int]]  # this rank's batches of the step, as indices into pairs
    global_tokens: int
    pairs: PairArrays  # the epoch's training pairs, which group indexes (sampled anew per epoch, or the fixed ones)

    def batches(self, vocab: VocabInfo) -> list[Batch]:
        """This rank's batches of the step, padded (host tensors); the dataset's pages the rows were read from are
        unmapped again (PairArrays.release_pages)."""
        batches = [self.pairs.collate(indices, vocab) for indices in self.batch_indices]
        self.pairs.release_pages()
        return batches


class StepPlan:
    """The batches of every step from a training position on, for one rank of a world."""

    def __init__(self, settings: TrainSettings, train_pairs: PairArrays | Sequence[Pair], sampler: EpochEncoder | None,
                 rank: int = 0, world_size: int = 1, corpus_weights: Mapping[str, float] | None = None):
        self.settings = settings
        # a task with several training corpora (Task.corpus_weights): an epoch's batches are drawn across them
        self.corpus_weights = dict(corpus_weights or {})
        # arrays, whatever the caller holds: the plan works on lengths and indices, a batch gathers its rows
        self.train_pairs = train_pairs if isinstance(train_pairs, PairArrays) else PairArrays.from_pairs(train_pairs)
        self.sampler = sampler
        self.rank, self.world_size = rank, world_size
        # the curriculum's longest source is the deterministic encoding's; a longer sampled one waits for its end
        self.longest_source = int(self.train_pairs.src_lengths.max())
        self._sampled: tuple[int | None, PairArrays | None] = (None, None)
        self._last_batches: tuple[tuple[int, int | None] | None, PairArrays | None, RankEpoch | None] = (
            None, None, None)

    def source_cap(self, step: int) -> int | None:
        """The length curriculum's source cap at `step` (None: every pair trains)."""
        s = self.settings
        return curriculum_cap(step, s.curriculum_start_len, s.curriculum_steps, self.longest_source,
                              s.curriculum_hold_steps)

    def epoch_pairs(self, epoch: int) -> PairArrays:
        """The training pairs of an epoch: encoded anew from ([train] seed, epoch) when a tokenizer samples
        (subword regularization), else the deterministic ones; every rank and a --resume get the same."""
        if self._sampled[0] != epoch:
            sampled = self.sampler.pairs(epoch) if self.sampler is not None else None
            self._sampled = (epoch, self.train_pairs if sampled is None else sampled)
        assert self._sampled[1] is not None
        return self._sampled[1]

    def epoch_batches(self, epoch: int, cap: int | None) -> tuple[PairArrays, RankEpoch]:
        """The epoch's pairs and this rank's share of their batches (lists of indices into those pairs)."""
        # a function of (epoch, cap) only, so --resume rebuilds the same batches; the last one is kept because
        # the run's checks and its plan both start from it
        if self._last_batches[0] != (epoch, cap):
            pairs = self.epoch_pairs(epoch)
            batches = self._batches(pairs, epoch, cap)
            share = RankEpoch(batches, pairs.tgt_lengths, self.rank, self.world_size, self.settings.update_freq)
            if len(batches.order) >= 100_000:  # the batching's transient lists and the epoch's whole order: pages back
                del batches
                release_freed_memory()
            self._last_batches = ((epoch, cap), pairs, share)
        pairs, share = self._last_batches[1], self._last_batches[2]
        assert pairs is not None and share is not None
        return pairs, share

    def _batches(self, pairs: PairArrays, epoch: int, cap: int | None) -> EpochBatches:
        """The epoch's batching by length: of the one corpus, or drawn across several by temperature."""
        s = self.settings
        if len(pairs.parts) > 1:
            return mixture_batches(pairs.parts, self.corpus_weights, s.sampling_temperature, pairs.src_lengths,
                                   pairs.tgt_lengths, s.max_tokens, s.seed, epoch, max_source=cap,
                                   bucket_width=s.bucket_width)
        return length_batches(pairs.src_lengths, pairs.tgt_lengths, s.max_tokens, s.seed, epoch, max_source=cap,
                              bucket_width=s.bucket_width)

    def steps_per_epoch(self, state: TrainState) -> int:
        """Optimizer steps in the current epoch; a plan that holds none is refused in one line."""
        s = self.settings
        cap = self.source_cap(state.step)
        _, share = self.epoch_batches(state.epoch, cap)
        if share.steps == 0 and cap is not None:
            raise UserError(f"[train] curriculum_start_len = {s.curriculum_start_len} leaves no training pair "
                            f"(sources here have at least {int(self.train_pairs.src_lengths.min())} tokens, "
                            "eos included); raise it")
        if share.steps == 0:
            raise UserError(
                f"the training data fill {share.batches_in_epoch} batches, fewer than world_size * update_freq = "
                f"{self.world_size * s.update_freq}; lower [train] max_tokens or update_freq"
            )
        return share.steps

    def nothing_left(self, state: TrainState) -> bool:
        """Whether training from `state` would take no step: max_steps reached, or the last of max_epochs done."""
        s = self.settings
        return state.step >= s.max_steps or bool(
            s.max_epochs and state.epoch >= s.max_epochs and state.step_in_epoch >= self.steps_per_epoch(state))

    def steps(self, state: TrainState) -> Iterator[PlannedStep]:
        """The steps to train from `state` on, in order, with the batches this rank takes: a function of the
        position alone (not of the training), so that it can run ahead of the training in a thread."""
        s = self.settings
        step, epoch, step_in_epoch = state.step, state.epoch, state.step_in_epoch
        cap = self.source_cap(step)
        pairs, share = self.epoch_batches(epoch, cap)
        while step < s.max_steps:
            if self.source_cap(step) != cap:  # the curriculum admits longer sources
                cap = self.source_cap(step)
                pairs, share = self.epoch_batches(epoch, cap)
            if step_in_epoch >= share.steps:
                if s.max_epochs and epoch >= s.max_epochs:
                    return
                epoch, step_in_epoch = epoch + 1, 0
                pairs, share = self.epoch_batches(epoch, cap)
            yield PlannedStep(epoch, step_in_epoch, share.step(step_in_epoch), int(share.step_tokens[step_in_epoch]),
                              pairs)
            step, step_in_epoch = step + 1, step_in_epoch + 1
