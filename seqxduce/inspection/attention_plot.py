"""Draw attention maps as a PNG grid: one row per chosen kind and layer (or depth step), one panel per head,
tokens on the axes (as in Vaswani et al. 2017, figures 3-5), and per-position figures such as a Universal
Transformer's ponder counts as bars beside the rows they belong to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from seqxduce.api import UserError
from seqxduce.inspection.attention_maps import KIND_TITLES, KINDS, AttentionView, select
from seqxduce.inspection.plotting import new_figure, pixel_size, save_png

CELL = 0.3  # inches per token on an axis
CHAR = 0.075  # inches per character of a tick label at LABEL_SIZE points
LABEL_SIZE = 8
LABEL_CHARS = 14  # longer tokens are cut, so that one long subword does not squeeze every panel
BAR_WIDTH = 1.8  # inches of the per-position figures column
SHORT = {"encoder": "enc self", "decoder": "dec self", "cross": "enc-dec"}
MAX_PIXELS = 16000  # per side: Agg draws up to 2^16, but a bigger picture is no longer readable on a screen


@dataclass
class Panel:
    """One grid row: a kind and a layer (0-based; a depth step for a Universal Transformer)."""

    kind: str
    layer: int


def label(token: str) -> str:
    """A token as a tick label: cut to LABEL_CHARS characters."""
    return token if len(token) <= LABEL_CHARS else token[: LABEL_CHARS - 1] + "…"


def plan_rows(view: AttentionView, kinds: Sequence[str], layers: Sequence[int] | None) -> list[Panel]:
    """The grid rows for the chosen kinds and 1-based layers (or depth steps); a kind that ran fewer depth
    steps than another (ACT halts the encoder and decoder apart) shows those it has."""
    for kind in kinds:
        if kind not in KINDS:
            raise UserError(f"--kind {kind}: choose from {', '.join(KINDS)}")
    deepest = max(len(view.maps[kind]) for kind in kinds)
    if deepest == 0:
        raise UserError("the model returned no attention weights for the kinds asked")
    what = "depth steps" if view.unit == "depth step" else "layers"
    chosen = select(deepest, layers, what)
    return [Panel(kind, i) for kind in kinds for i in chosen if i < len(view.maps[kind])]


def grid_size(view: AttentionView, rows: Sequence[Panel], heads: int) -> tuple[float, float, bool]:
    """(width, height) in inches of the grid for `heads` panels per row, and whether a figures column is added."""
    longest_row = max(len(label(t)) for p in rows for t in view.rows(p.kind))
    longest_column = max(len(label(t)) for p in rows for t in view.columns(p.kind))
    keys = max(len(view.columns(p.kind)) for p in rows)
    panel_width = max(keys * CELL, 1.2) + 0.3
    bars = any(view.row_figures(p.kind) for p in rows)
    width = longest_row * CHAR + 0.4 + heads * panel_width + (BAR_WIDTH if bars else 0.0) + 0.9  # colorbar
    height = sum(max(len(view.rows(p.kind)) * CELL, 1.0) + longest_column * CHAR + 0.45 for p in rows) + 0.6
    return width, height, bars


def plot_attention(view: AttentionView, output: Path, kinds: Sequence[str] = KINDS,
                   layers: Sequence[int] | None = None, heads: Sequence[int] | None = None,
                   mean_heads: bool = False, dpi: int = 100) -> tuple[Path, tuple[float, float]]:
    """Draw the chosen kinds, 1-based layers and heads of view into a PNG; returns it and its size in inches."""
    rows = plan_rows(view, kinds, layers)
    count = view.maps[rows[0].kind][rows[0].layer].size(0)
    head_index = [None] if mean_heads else select(count, heads, "heads")
    width, height, bars = grid_size(view, rows, len(head_index))
    pixels = pixel_size(width, height, dpi)
    if max(pixels) > MAX_PIXELS:
        raise UserError(f"the picture would be {pixels[0]}x{pixels[1]} pixels ({len(rows)} rows of "
                        f"{len(head_index)} panels); choose fewer with --kind, --layers and --heads (or --mean-heads), "
                        "or lower --dpi")
    figure = new_figure(width, height, "seqxduce attention")
    ratios = [max(len(view.rows(p.kind)), 3) + 2 for p in rows]
    columns = len(head_index) + int(bars)
    grid = figure.add_gridspec(len(rows), columns, height_ratios=ratios,
                               width_ratios=[1.0] * len(head_index) + ([0.45] if bars else []))
    image = None
    heatmaps, others = [], []
    for r, panel in enumerate(rows):
        weights = view.maps[panel.kind][panel.layer]  # (H, Lq, Lk)
        for c, head in enumerate(head_index):
            ax = figure.add_subplot(grid[r, c])
            values = weights.mean(dim=0) if head is None else weights[head]
            image = ax.imshow(values.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
                              interpolation="nearest")
            _ticks(ax, view, panel.kind, first_column=c == 0)
            which = "mean of heads" if head is None else f"head {head + 1}"
            ax.set_title(f"{SHORT[panel.kind]} · {view.unit} {panel.layer + 1} · {which}", fontsize=9)
            heatmaps.append(ax)
        if bars:
            ax = figure.add_subplot(grid[r, -1])
            _figures_panel(ax, view.row_figures(panel.kind), len(view.rows(panel.kind)))
            others.append(ax)
    # beside the whole grid, not between the heat maps and the bars
    figure.colorbar(image, ax=heatmaps + others, shrink=min(1.0, 4.0 / height), label="attention weight", pad=0.01)
    figure.suptitle(_caption(view, kinds), fontsize=10)
    return save_png(figure, output, dpi), (width, height)


def _ticks(ax, view: AttentionView, kind: str, first_column: bool) -> None:
    rows, columns = view.rows(kind), view.columns(kind)
    ax.set_xticks(range(len(columns)), [label(t) for t in columns], rotation=90, fontsize=LABEL_SIZE)
    ax.set_yticks(range(len(rows)), [label(t) for t in rows] if first_column else [], fontsize=LABEL_SIZE)
    if first_column:
        ax.set_ylabel({"encoder": "source", "decoder": "decoder input", "cross": "output"}[kind], fontsize=8)
    ax.set_xlabel("decoder input" if kind == "decoder" else "source", fontsize=8)


def _figures_panel(ax, figures: dict[str, list[float]], length: int) -> None:
    """Horizontal bars of per-position figures, one bar per grid row position, the value written beside it."""
    if not figures:
        ax.axis("off")
        return
    names = sorted(figures)
    height = 0.8 / len(names)
    for k, name in enumerate(names):
        values = figures[name][:length]
        positions = [i - 0.4 + height * (k + 0.5) for i in range(len(values))]
        bars = ax.barh(positions, values, height=height, label=name)
        ax.bar_label(bars, fmt="%g", fontsize=7, padding=2)
    ax.set_ylim(length - 0.5, -0.5)  # row 0 on top, as in the heat maps
    ax.set_yticks([])
    ax.margins(x=0.25)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(" / ".join(names), fontsize=9)


def _caption(view: AttentionView, kinds: Sequence[str]) -> str:
    source = " ".join(view.source_tokens[:-1])
    shown = ", ".join(KIND_TITLES[k] for k in kinds)
    return f"{shown}\nsource: {_cut(source)}\noutput: {_cut(view.output_text)}"


def _cut(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
