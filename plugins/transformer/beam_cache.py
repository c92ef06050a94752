"""Beam search's self-attention keys and values, read through back-pointers instead of being reordered.

A beam reorder gives each search row a parent row of the same source. Copying every row's cached keys and values
to its new place (LayerState.select) moves the whole cache every step: a fifth of an int8 beam-4 search, and the
one-query attention then reads it again (bench/log/2026-11-27-decode-int8.md). Here nothing moves. A source's
`g` rows write their keys and values side by side, position by position, into one buffer per layer,

    key (M, H, capacity, g, d_k): key[m, h, j, b] = what row b of source m wrote at position j,

and an Ancestry (one per cache, shared by its layers) records for each row a and position j which of its source's
rows wrote the key its hypothesis reads there: parents[m, a, j]. A reorder only gathers those small integer
tables. The attention (attention.MultiHeadAttention.attend_beams) lets each of a source's g queries score all
its rows' keys, one (g, d) x (d, t * g) product per source and head with no copy (the buffer's first t
positions are one contiguous (t * g, d) matrix), and a bias of -inf leaves only the ancestors' keys in the
softmax, so the weights of every other key are exactly 0. That does g times the multiply-adds of attending to
the ancestors alone, in a few products with g rows each instead of many with one, and reads each key once a
step instead of three times (copied out, written, read): about 1.6-1.9x faster per layer at 256 rows, 4 heads,
15-30 positions (1 thread; the 2026-11-27 log).

Only the rows' order inside their source changes in a beam reorder; when sources leave, their memory rows are
dropped (one copy of the sources kept); any other index (rows of several sources mixed) turns the cache back
into one copy per row (flatten()) for LayerState.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Ancestry:
    """Which row of its source wrote each position a search row reads: parents (M, g, t) local row indices for
    the positions before the last reorder; every later position is the row's own."""

    parents: torch.Tensor  # (M, g, t) long
    _bias: tuple[int, torch.Tensor] | None = field(default=None, repr=False)  # the last bias() built, by length

    @classmethod
    def own(cls, sources: int, group: int, device: torch.device) -> Ancestry:
        """Every row reads only the keys it wrote itself (no parents: lineage() gives each its own index)."""
        return cls(torch.empty(sources, group, 0, dtype=torch.long, device=device))

    @property
    def group(self) -> int:
        """Search rows per source."""
        return self.parents.size(1)

    def lineage(self, length: int) -> torch.Tensor:
        """(M, g, length): parents, then each row's own index for the positions written after the reorder."""
        sources, group, before = self.parents.shape
        if length <= before:
            return self.parents[:, :, :length]
        own = torch.arange(group, device=self.parents.device).view(1, group, 1).expand(sources, group, length - before)
        return torch.cat([self.parents, own], dim=2)

    def bias(self, length: int, dtype: torch.dtype) -> torch.Tensor:
        """(M, 1, g, length * g): 0 where query row a may read key (j, b), that is b = parents[a, j]; -inf elsewhere.
        Built once per step: every layer (and depth step) of the cache asks for the same length."""
        if self._bias is not None and self._bias[0] == length and self._bias[1].dtype == dtype:
            return self._bias[1]
        lineage = self.lineage(length)  # (M, g, t)
        group = self.group
        rows = torch.arange(group, device=lineage.device)
        allowed = lineage.unsqueeze(-1) == rows  # (M, g_a, t, g_b)
        bias = torch.zeros(allowed.shape, dtype=dtype, device=lineage.device).masked_fill_(~allowed, float("-inf"))
        bias = bias.view(lineage.size(0), 1, group, length * group)
        self._bias = (length, bias)
        return bias

    def select(self, sources: torch.Tensor | None, local: torch.Tensor, length: int) -> Ancestry:
        """The ancestry after a reorder in which new row a of (kept) source m continues row local[m, a] of it:
        sources (M',) the memory rows kept (None: all, in order), local (M', g) long."""
        lineage = self.lineage(length)
        if sources is not None:
            lineage = lineage.index_select(0, sources)
        return Ancestry(lineage.gather(1, local.unsqueeze(-1).expand(-1, -1, length)))


@dataclass
class BeamLayerState:
    """One layer's self-attention cache for rows grouped g per source, read through `ancestry` (module docstring).

    key/value (M, H, capacity, g, d_k / d_v); the first `length` positions are written. conv: a causal sepconv's
    last inputs per search row (B, k-1, C), or None."""

    key: torch.Tensor
    value: torch.Tensor
    ancestry: Ancestry
    conv: torch.Tensor | None
    length: int

    @classmethod
    def gather(cls, key: torch.Tensor, value: torch.Tensor, length: int, index: torch.Tensor, ancestry: Ancestry,
               conv: torch.Tensor | None) -> BeamLayerState:
        """The search rows `index` (M * g,) of a cache held one copy per row: key/value (B, H, n, d), of which
        positions up to `length` are written; each new row owns its copy (the one copy made here), as
        `ancestry` (Ancestry.own) says; conv already selected."""
        group = ancestry.group
        sources = index.numel() // group
        buffers = []
        for old in (key, value):
            heads, width = old.size(1), old.size(3)
            new = old.new_empty(sources, heads, max(16, 2 * (length + 1)), group, width)
            rows = old[:, :, :length].index_select(0, index).view(sources, group, heads, length, width)
            new[:, :, :length] = rows.permute(0, 2, 3, 1, 4)
            buffers.append(new)
        return cls(buffers[0], buffers[1], ancestry, conv, length)

    def append(self, key: torch.Tensor, value: torch.Tensor) -> BeamLayerState:
        """The state with one more position: key (M * g, H, 1, d_k) and value (M * g, H, 1, d_v) of the rows."""
        buffers = []
        for store, new in ((self.key, key), (self.value, value)):
            if self.length == store.size(2):  # full: room for as many again (only now and then)
                grown = store.new_empty(store.size(0), store.size(1), 2 * self.length, *store.shape[3:])
                grown[:, :, :self.length] = store
                store = grown
            sources, heads, _, group, width = store.shape
            # select().copy_(), not store[:, :, length] = ...: the same write, and under torch.compile the
            # position stays symbolic (an index assignment fixes it, recompiling the step at every length)
            store.select(2, self.length).copy_(new.view(sources, group, heads, width).transpose(1, 2))
            buffers.append(store)
        return BeamLayerState(buffers[0], buffers[1], self.ancestry, self.conv, self.length + 1)

    def keys(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views (M, H, t, g, d) of the written keys and values, and the ancestry's bias (M, 1, g, t * g)."""
        return (self.key[:, :, :self.length], self.value[:, :, :self.length],
                self.ancestry.bias(self.length, self.key.dtype))

    def select(self, sources: torch.Tensor | None, index: torch.Tensor, ancestry: Ancestry) -> BeamLayerState:
        """After a reorder inside the sources (`ancestry` already selected): sources (M',) the memory rows kept (None:
        all, and nothing is copied), index (M' * g,) the search rows kept, for conv."""
        conv = None if self.conv is None else self.conv.index_select(0, index)
        if sources is None:
            return BeamLayerState(self.key, self.value, ancestry, conv, self.length)
        return BeamLayerState(self.key.index_select(0, sources), self.value.index_select(0, sources), ancestry, conv,
                              self.length)

    def flatten(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each search row's own copy of what it reads: key (M * g, H, t, d_k) and value (M * g, H, t, d_v)."""
        lineage = self.ancestry.lineage(self.length)  # (M, g_a, t)
        copies = []
        for store in (self.key, self.value):
            sources, heads, _, group, width = store.shape
            # written[m, h, j, a] = store[m, h, j, lineage[m, a, j]]
            at = lineage.transpose(1, 2)[:, None, :, :, None].expand(sources, heads, self.length, group, width)
            written = store[:, :, :self.length].gather(3, at)  # (M, H, t, g, d)
            copies.append(written.permute(0, 3, 1, 2, 4).reshape(sources * group, heads, self.length, width))
        return copies[0], copies[1]
