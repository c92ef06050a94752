"""What flows between encode, init_cache, step and reorder: the encoder memory and the decoding cache.

Two things keep incremental decoding cheap (bench/decode_speed.py measures it):

- The encoder memory and the cross-attention keys/values stay one row per source. Search rows read them in
  groups: with `group` g, search row r belongs to memory row r // g (beam search's rows are source-major,
  `beam` rows per source), so cross-attention runs the g queries of a source against its one set of keys, and
  a beam reorder inside the groups copies nothing. Only when rows leave that pattern (a source leaves the
  search, or an arbitrary index) are the memory rows selected, once (`RowPlan`).
- The self-attention keys/values live in a preallocated buffer (B, H, capacity, d) that grows by doubling;
  step() writes the new position in place and attends over a view, and reorder() copies the decoded positions
  into a spare buffer by index_select(out=...), so neither allocates per step.

A cache is therefore consumed by step() and reorder(): keep using the one they return, not an older one
(step() writes into the buffers an older cache shares; the searches never go back).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
            return Memory(self.states, self.pad, self.mask, self.ponder, plan.group)
        return Memory(self.states.index_select(0, rows), self.pad.index_select(0, rows), _select(self.mask, rows),
                      _select(self.ponder, rows), plan.group)

    def select(self, index: torch.Tensor) -> Memory:
        """The search rows `index` (B',) of this batch, in that order."""
        return self.take(self.plan(index))


@dataclass
class LayerState:
    """One decoder layer's (or one UT depth step's) incremental state.

    key/value are buffers (B, H, capacity, d_k / d_v) whose first `length` positions hold the self-attention
    keys/values decoded so far; spare is a buffer pair of the same shape that reorder() copies into."""

    key: torch.Tensor | None
    value: torch.Tensor | None
    conv: torch.Tensor | None = None  # (B, k-1, C) last transition inputs of a causal sepconv; else None
    length: int = 0
    spare: tuple[torch.Tensor, torch.Tensor] | None = None

    def append(self, key: torch.Tensor, value: torch.Tensor, window: int = 0) -> LayerState:
        """The state with one more position: key (B, H, 1, d_k) and value (B, H, 1, d_v) written in place.

        A full buffer doubles; with a restricted window it is never larger than needed: the last `window`
        positions move to its front instead, so a windowed cache stays bounded however long the output."""
        buf_key, buf_value, spare, length = self.key, self.value, self.spare, self.length
        if buf_key is not None and length == buf_key.size(2) and window and 2 * window < length:
            # the positions before the last `window` are never read again
            buf_key[:, :, :window] = buf_key[:, :, length - window:length].clone()
            buf_value[:, :, :window] = buf_value[:, :, length - window:length].clone()
            length = window
        elif buf_key is None or length == buf_key.size(2):
            capacity = max(16, 2 * length, 2 * (window + 1))
            buf_key = _grown(self.key, key, length, capacity)
            buf_value = _grown(self.value, value, length, capacity)
            spare = None
        buf_key[:, :, length] = key[:, :, 0]
        buf_value[:, :, length] = value[:, :, 0]
        return LayerState(buf_key, buf_value, self.conv, length + 1, spare)

    def keys(self, window: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Views (B, H, t, d) of the cached keys and values: all, or the last `window` + 1 with a window."""
        start = max(0, self.length - window - 1) if window else 0
        return self.key[:, :, start:self.length], self.value[:, :, start:self.length]

    def select(self, index: torch.Tensor, window: int = 0) -> LayerState:
        """Rows `index` (B',) of this state (only the positions a window can still see are copied)."""
        conv = _select(self.conv, index)
        if self.key is None:
            return LayerState(None, None, conv, self.length)
        rows = index.numel()
        shape = (rows, *self.key.shape[1:])
        if self.spare is not None and self.spare[0].shape == shape:
            new_key, new_value = self.spare
        else:
            new_key = self.key.new_empty(shape)
            new_value = self.value.new_empty((rows, *self.value.shape[1:]))
        start = max(0, self.length - window - 1) if window else 0
        end = self.length
        for old, new in ((self.key, new_key), (self.value, new_value)):
            if old.requires_grad:  # out= is not differentiable; searches run without grad and take the other way
                new[:, :, start:end] = old[:, :, start:end].index_select(0, index)
            else:
                torch.index_select(old[:, :, start:end], 0, index, out=new[:, :, start:end])
        spare = (self.key, self.value) if self.key.shape == shape else None
        return LayerState(new_key, new_value, conv, self.length, spare)


def _grown(buffer: torch.Tensor | None, like: torch.Tensor, length: int, capacity: int) -> torch.Tensor:
    """A (B, H, capacity, d) buffer holding the first `length` positions of `buffer`, in like's dtype."""
    batch, heads, _, width = like.shape
    grown = like.new_empty((batch, heads, capacity, width))
    if buffer is not None and length:
        grown[:, :, :length] = buffer[:, :, :length]
    return grown


@dataclass
class DecoderCache:
    """Per-layer (per-depth-step for the UT) self-attention state, cross-attention keys/values, position."""

    layers: list[LayerState]
    # (M, H, S, d_k / d_v) encoder keys and values, projected once, one row per memory row (Memory.group search
    # rows read each): one pair per Transformer layer; one pair for the Universal Transformer, whose depth steps
    # share the layer and so the projection
    cross: list[tuple[torch.Tensor, torch.Tensor]]
    position: int  # index of the next target position (0 = the one after feeding bos)
    window: int = 0  # restricted self-attention: positions older than the last window + 1 are never read

    def select(self, index: torch.Tensor, plan: RowPlan) -> DecoderCache:
        """The search rows `index` (B',) of this cache, in that order; memory rows as `plan` says."""
        rows = plan.memory_rows
        cross = self.cross if rows is None else [(k.index_select(0, rows), v.index_select(0, rows))
                                                 for k, v in self.cross]
        return DecoderCache([layer.select(index, self.window) for layer in self.layers], cross, self.position,
                            self.window)
