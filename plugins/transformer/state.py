"""What flows between encode, init_cache, step and reorder: the encoder memory and the decoding cache.

Two things keep incremental decoding cheap (bench/decode_speed.py measures it):

- The encoder memory and the cross-attention keys/values stay one row per source. Search rows read them in
  groups: with `group` g, search row r belongs to memory row r // g (beam search's rows are source-major,
  `beam` rows per source), so cross-attention runs the g queries of a source against its one set of keys, and
  a beam reorder inside the groups copies nothing. Only when rows leave that pattern (a source leaves the
  search, or an arbitrary index) are the memory rows selected, once (`RowPlan`).
- The self-attention keys/values live in buffers; step() writes the new position in place. Rows grouped per
  source (beam search) never move them: each row reads its ancestors' keys through back-pointers
  (beam_cache.py), and a beam reorder gathers only those integer tables. Any other reorder (rows of several
  sources mixed, or a restricted window) copies the decoded positions by index_select(out=...) into a spare
  buffer (B, H, capacity, d) with room for exactly the next position (LayerState), which torch's CPU attention
  reads about twice as fast as a view of a larger one. A search without reorders (greedy) grows its buffer by
  doubling and attends over a view. Buffers are reused in turn, so steady decoding allocates nothing.

A cache is therefore consumed by step() and reorder(): keep using the one they return, not an older one
(step() writes into the buffers an older cache shares; the searches never go back).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .attention import padding_bias
from .beam_cache import Ancestry, BeamLayerState


def _select(tensor: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    return None if tensor is None else tensor.index_select(0, index)


@dataclass
class RowPlan:
    """How a reorder maps onto memory rows: memory rows to keep (None: all, in order) and the new group size."""

    memory_rows: torch.Tensor | None
    group: int


def _is_grouped(source_rows: torch.Tensor, sources: torch.Tensor | int, group: int) -> bool:
    """Whether source_rows (N,) is each of `sources` (a count: 0..count-1) repeated `group` times, in order."""
    if isinstance(sources, int):
        sources = torch.arange(sources, device=source_rows.device)
    return source_rows.numel() == sources.numel() * group and torch.equal(
        source_rows, sources.repeat_interleave(group))


def plan_rows(index: torch.Tensor, group: int, memory_rows: int) -> RowPlan:
    """The RowPlan of selecting search rows `index` (N',) from rows grouped `group` per memory row.

    One small comparison on the host per call (N' integers); it lets a beam reorder, and the expansion of a
    batch to its beams, leave memory and cross-attention keys/values untouched."""
    source_rows = torch.div(index, group, rounding_mode="floor")  # (N',) memory row of each new search row
    count = index.numel()
    if memory_rows and count % memory_rows == 0 and _is_grouped(source_rows, memory_rows, count // memory_rows):
        return RowPlan(None, count // memory_rows)  # same sources in order, g' rows each: nothing moves
    if group > 1 and count % group == 0:
        kept = source_rows[::group]
        if _is_grouped(source_rows, kept, group):
            return RowPlan(kept, group)  # some sources left: select their rows once
    return RowPlan(source_rows, 1)  # any other index: one memory row per search row


@dataclass
class Memory:
    """The encoder's output for a batch, with what cross-attention needs to ignore padding.

    One row per source; `group` search rows read each row (see the module docstring)."""

    states: torch.Tensor  # (M, S, C) final encoder representation
    pad: torch.Tensor  # (M, S) True at source padding
    mask: torch.Tensor | None  # (M, 1, 1, S) SDPA mask, True at real keys; None when nothing is padded
    ponder: torch.Tensor | None = None  # (M, S) ACT steps N per source position (0 at padding); UT + ACT only
    group: int = 1  # search rows per memory row: search row r reads memory row r // group
    # (M, 1, 1, S) the mask as the additive bias decoding steps add to their cross-attention scores (0 / -inf):
    # made on the first step_bias() call (training forwards never need it), then kept for every layer and step
    bias: torch.Tensor | None = None

    def step_bias(self) -> torch.Tensor | None:
        """The padding bias a decoding step adds to its cross-attention scores (attention.padding_bias of mask),
        made once per batch; None when nothing is padded."""
        if self.bias is None and self.mask is not None:
            self.bias = padding_bias(self.mask)
        return self.bias

    @property
    def rows(self) -> int:
        """The number of search rows this memory serves."""
        return self.states.size(0) * self.group

    def plan(self, index: torch.Tensor) -> RowPlan:
        """The RowPlan of keeping search rows `index`."""
        return plan_rows(index, self.group, self.states.size(0))

    def take(self, plan: RowPlan) -> Memory:
        """This memory after the reorder `plan` describes."""
        rows = plan.memory_rows
        if rows is None:
            return Memory(self.states, self.pad, self.mask, self.ponder, plan.group, self.bias)
        return Memory(self.states.index_select(0, rows), self.pad.index_select(0, rows), _select(self.mask, rows),
                      _select(self.ponder, rows), plan.group, _select(self.bias, rows))

    def select(self, index: torch.Tensor) -> Memory:
        """The search rows `index` (B',) of this batch, in that order."""
        return self.take(self.plan(index))


@dataclass
class LayerState:
    """One decoder layer's (or one UT depth step's) incremental state.

    key/value (B, H, n, d_k / d_v) are contiguous buffers whose first `length` positions hold the self-attention
    keys/values the next step can see. A reorder leaves n = `length` + 1, room for exactly the next position, so
    that beam search attends over a whole contiguous buffer: torch's CPU attention kernel runs about twice as fast
    on it as on a view of a larger one, for the same numbers. Without reorders (greedy) the buffer has room for
    as many positions again, and its view is read. The views live in `stores`, flat buffers of a
    ping-pong pair with `spare`: whatever has to copy the cache (a reorder, or a step that finds no room) writes
    into the spare and the old stores become the next spare, so steady decoding allocates nothing."""

    key: torch.Tensor | None
    value: torch.Tensor | None
    conv: torch.Tensor | None = None  # (B, k-1, C) last transition inputs of a causal sepconv; else None
    length: int = 0
    stores: tuple[torch.Tensor, torch.Tensor] | None = None
    spare: tuple[torch.Tensor, torch.Tensor] | None = None

    def append(self, key: torch.Tensor, value: torch.Tensor, window: int = 0) -> LayerState:
        """The state with one more position: key (B, H, 1, d_k) and value (B, H, 1, d_v).

        Written in place where there is room (a reorder leaves room for one); otherwise the positions still
        visible (all, or the last `window` with a restricted window, so that cache stays bounded) are copied, with
        the new one after them, into a buffer with room for as many again.
        """
        if self.key is not None and self.length < self.key.size(2):
            # select().copy_(): under torch.compile the position stays symbolic (beam_cache.BeamLayerState.append)
            self.key.select(2, self.length).copy_(key[:, :, 0])
            self.value.select(2, self.length).copy_(value[:, :, 0])
            return LayerState(self.key, self.value, self.conv, self.length + 1, self.stores, self.spare)
        kept = min(self.length, window) if window else self.length
        # room to grow: a search that never reorders (greedy) copies only now and then, and reads a view
        new_key, new_value, stores = self._targets(key.size(0), max(16, 2 * (kept + 1)), key, value)
        if kept:
            new_key[:, :, :kept] = self.key[:, :, self.length - kept:self.length]
            new_value[:, :, :kept] = self.value[:, :, self.length - kept:self.length]
        new_key.select(2, kept).copy_(key[:, :, 0])
        new_value.select(2, kept).copy_(value[:, :, 0])
        return LayerState(new_key, new_value, self.conv, kept + 1, stores, self.stores)

    def keys(self, window: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Views (B, H, t, d) of the cached keys and values: all, or the last `window` + 1 with a window."""
        start = max(0, self.length - window - 1) if window else 0
        return self.key[:, :, start:self.length], self.value[:, :, start:self.length]

    def select(self, index: torch.Tensor, window: int = 0) -> LayerState:
        """Rows `index` (B',) of this state, with room for the next position (only the positions a window can
        still see are copied)."""
        conv = _select(self.conv, index)
        if self.key is None:
            return LayerState(None, None, conv, self.length)
        kept = min(self.length, window) if window else self.length
        new_key, new_value, stores = self._targets(index.numel(), kept + 1, self.key, self.value)
        start = self.length - kept
        for old, new in ((self.key, new_key), (self.value, new_value)):
            if old.requires_grad:  # out= is not differentiable; searches run without grad and take the other way
                new[:, :, :kept] = old[:, :, start:self.length].index_select(0, index)
            else:
                torch.index_select(old[:, :, start:self.length], 0, index, out=new[:, :, :kept])
        return LayerState(new_key, new_value, conv, kept, stores, self.stores)

    def _targets(self, rows: int, positions: int, key: torch.Tensor,
                 value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Contiguous (rows, H, positions, d) views for a copy of the cache, in the spare stores where they fit."""
        heads = key.size(1)
        spare = self.spare or (None, None)
        key_store = _room(spare[0], rows * heads * positions * key.size(3), key)
        value_store = _room(spare[1], rows * heads * positions * value.size(3), value)
        return (key_store[: rows * heads * positions * key.size(3)].view(rows, heads, positions, key.size(3)),
                value_store[: rows * heads * positions * value.size(3)].view(rows, heads, positions, value.size(3)),
                (key_store, value_store))


def _room(store: torch.Tensor | None, size: int, like: torch.Tensor) -> torch.Tensor:
    """A flat buffer of at least `size` elements in like's dtype and device: `store` if it fits, else a new one
    with room to grow (twice the size: a growing cache reallocates only now and then)."""
    if store is not None and store.numel() >= size and store.dtype == like.dtype and store.device == like.device:
        return store
    return like.new_empty(2 * size)


@dataclass
class DecoderCache:
    """Per-layer (per-depth-step for the UT) self-attention state, cross-attention keys/values, position."""

    layers: list[LayerState | BeamLayerState]
    # (M, H, S, d_k / d_v) encoder keys and values, projected once, one row per memory row (Memory.group search
    # rows read each): one pair per Transformer layer; one pair for the Universal Transformer, whose depth steps
    # share the layer and so the projection
    cross: list[tuple[torch.Tensor, torch.Tensor]]
    position: int  # index of the next target position (0 = the one after feeding bos)
    window: int = 0  # restricted self-attention: positions older than the last window + 1 are never read

    def select(self, index: torch.Tensor, plan: RowPlan) -> DecoderCache:
        """The search rows `index` (B',) of this cache, in that order; memory rows as `plan` says. Rows grouped
        more than one per source (beam search) keep their self-attention keys in place and read them through
        back-pointers (beam_cache.py); any other order gets one copy per row."""
        rows = plan.memory_rows
        cross = self.cross if rows is None else [(k.index_select(0, rows), v.index_select(0, rows))
                                                 for k, v in self.cross]
        layers = self._select_grouped(index, plan) if plan.group > 1 and not self.window else None
        if layers is None:
            layers = [_as_rows(layer).select(index, self.window) for layer in self.layers]
        return DecoderCache(layers, cross, self.position, self.window)

    def _select_grouped(self, index: torch.Tensor, plan: RowPlan) -> list[BeamLayerState] | None:
        """The layers after a reorder inside sources (plan.group rows each) as BeamLayerStates; None when there
        is nothing cached yet (an empty LayerState is selected as rows)."""
        first = self.layers[0]
        length = first.length  # 0 while nothing is cached (a LayerState without keys yet)
        if not length:
            return None
        group = plan.group
        if isinstance(first, BeamLayerState) and first.ancestry.group == group:
            local = (index % group).view(-1, group)  # new row a of each kept source continues its row local[., a]
            ancestry = first.ancestry.select(plan.memory_rows, local, length)
            return [layer.select(plan.memory_rows, index, ancestry) for layer in self.layers]
        ancestry = Ancestry.own(index.numel() // group, group, index.device)
        layers = [_as_rows(layer) for layer in self.layers]
        return [BeamLayerState.gather(layer.key, layer.value, layer.length, index, ancestry, _select(layer.conv, index))
                for layer in layers]


def _as_rows(layer: LayerState | BeamLayerState) -> LayerState:
    """The layer's cache with one copy per search row (a BeamLayerState flattened; a LayerState as it is)."""
    if isinstance(layer, LayerState):
        return layer
    key, value = layer.flatten()
    return LayerState(key, value, layer.conv, layer.length)
