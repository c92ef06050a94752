"""What the picture-making commands share: matplotlib as an optional extra, a figure with no GUI, saving a PNG.

matplotlib is imported here only when a picture is made, so that the rest of seqxduce works without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from seqxduce.api import UserError

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install -e '.[plot]' in the seqxduce checkout"  # not on PyPI: installed from a checkout


def new_figure(width: float, height: float, what: str) -> Figure:
    """A matplotlib Figure of width x height inches with constrained layout, drawn without any GUI backend.

    `what` names the command in the one-line error a missing matplotlib gives."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(f"{what} draws with matplotlib, which is not installed: {INSTALL_HINT}") from None
    # a Figure made without pyplot has no global state and renders PNG with Agg, whatever the display
    return Figure(figsize=(width, height), layout="constrained")


def save_png(figure: Figure, path: Path, dpi: int) -> Path:
    """Write the figure as a PNG of exactly its size in inches times dpi pixels."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise UserError(f"--output {path}: give a file name ending in .png")
    if path.parent and not path.parent.is_dir():
        raise UserError(f"--output {path}: folder {path.parent} does not exist; create it or choose another")
    figure.savefig(path, dpi=dpi, format="png")
    return path


def pixel_size(width: float, height: float, dpi: int) -> tuple[int, int]:
    """The (width, height) in pixels of a width x height inch figure saved at dpi, as Agg rounds it."""
    return int(round(width * dpi)), int(round(height * dpi))
