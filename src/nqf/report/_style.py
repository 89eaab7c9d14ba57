"""One look for every figure: colour-blind-safe colours, a line style per source, checked labels.

Colours are the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), safe
for the common colour-vision deficiencies. A curve's *source* (network trained by an
optimizer, quadratic model, M-flow, Lotka-Volterra, singular limit, data) sets its line
style, so sources stay distinguishable in grey print; the colour distinguishes what a
source is drawn for (mode, optimizer). Every legend label should name the source,
e.g. ``"network (GD)"``, ``"M-flow"``, ``"LV"``; :func:`source_label` builds them.

:func:`save_figure` refuses a figure whose axes lack labels or whose curves lack legend
entries, and writes PNG and PDF atomically (no timestamps, so reruns are byte-identical).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from nqf.core.errors import NqfError
from nqf.store.results import atomic_write_bytes

OKABE_ITO: dict[str, str] = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}

# Cycle order: the strongest contrasts on white first; yellow last (weak on white).
PALETTE: tuple[str, ...] = tuple(
    OKABE_ITO[name]
    for name in ("blue", "orange", "bluish green", "vermillion", "reddish purple", "sky blue", "black", "yellow")
)

# Source of a curve -> (line style, line width). Legend text names the source.
SOURCES: dict[str, tuple[Any, float]] = {
    "network": ("-", 1.8),
    "quadratic model": ("--", 1.8),
    "M-flow": (":", 2.2),
    "LV": ("-.", 1.6),
    "limit": ((0, (6, 2, 1, 2, 1, 2)), 1.4),
    "data": ("-", 1.0),
}


def source_label(source: str, detail: str = "") -> str:
    """Legend text that names the source: ``source_label("network", "Adam") == "network (Adam)"``."""
    if source not in SOURCES:
        raise NqfError(f"unknown curve source {source!r}; choose one of {', '.join(SOURCES)}")
    return f"{source} ({detail})" if detail else source


def curve(source: str, index: int = 0, detail: str = "") -> dict[str, Any]:
    """Keyword arguments for ``ax.plot``: colour ``PALETTE[index]``, the source's line style, its label."""
    label = source_label(source, detail)
    linestyle, linewidth = SOURCES[source]
    return {"color": PALETTE[index % len(PALETTE)], "linestyle": linestyle, "linewidth": linewidth, "label": label}


def axis_label(quantity: str, unit: str) -> str:
    """``"quantity [unit]"``; pass ``unit="1"`` for a dimensionless quantity (shown without brackets)."""
    if not quantity or not unit:
        raise NqfError("an axis label needs a quantity and a unit (unit '1' for dimensionless)")
    return quantity if unit == "1" else f"{quantity} [{unit}]"


def new_figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] | None = None) -> tuple[Figure, Any]:
    """A figure (no pyplot state, so safe in worker processes) and its axes (array if several)."""
    width, height = size if size is not None else (5.2 * ncols, 3.6 * nrows)
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=True)
    for ax in fig.axes:
        ax.set_prop_cycle(color=list(PALETTE))
        ax.grid(True, which="major", alpha=0.3)
    return fig, axes


def setup_axes(
    ax: Axes,
    xlabel: str,
    ylabel: str,
    *,
    xscale: str = "linear",
    yscale: str = "linear",
    title: str | None = None,
) -> Axes:
    """Label the axes (use :func:`axis_label` for units) and set log scales where the theory is logarithmic."""
    if not xlabel or not ylabel:
        raise NqfError("every axis needs a label with its unit")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xscale(xscale)
    ax.set_yscale(yscale)
    if title:
        ax.set_title(title)
    return ax


@dataclass(frozen=True)
class SavedFigure:
    """A figure written as ``png`` and ``pdf`` (same stem), with the caption the report shows."""

    png: Path
    pdf: Path
    caption: str


def _check(fig: Figure, stem: str) -> None:
    """Labelled axes, and a legend entry for every curve when an axes holds more than one."""
    for ax in fig.axes:
        artists = [*ax.get_lines(), *ax.collections]
        if not artists:
            continue
        if not ax.get_xlabel() or not ax.get_ylabel():
            raise NqfError(f"figure {stem!r}: an axes with data lacks an x or y label")
        if len(artists) > 1:
            unnamed = [a for a in artists if not a.get_label() or str(a.get_label()).startswith("_")]
            if unnamed:
                raise NqfError(f"figure {stem!r}: {len(unnamed)} curve(s) without a legend label naming the source")
            if ax.get_legend() is None and not fig.legends:
                raise NqfError(f"figure {stem!r}: an axes with several curves has no legend")


# reproducible bytes: no software or date stamps
_SAVE_OPTIONS: dict[str, dict[str, Any]] = {
    "png": {"dpi": 150, "metadata": {"Software": None}},
    "pdf": {"metadata": {"CreationDate": None, "Creator": None, "Producer": None}},
}


def write_figure(fig: Figure, path: str | Path) -> Path:
    """Check ``fig`` and write it to ``path`` (PNG at 150 dpi, or PDF by the suffix), atomically."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in _SAVE_OPTIONS:
        raise NqfError(f"plot file must end in .png or .pdf, got {path.name!r}")
    _check(fig, path.stem)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, **_SAVE_OPTIONS[fmt])
    atomic_write_bytes(path, buffer.getvalue())
    return path


def save_figure(fig: Figure, figure_dir: str | Path, stem: str, caption: str) -> SavedFigure:
    """Check ``fig`` and write ``figure_dir/stem.png`` (150 dpi) and ``.pdf`` atomically."""
    if not caption:
        raise NqfError(f"figure {stem!r} needs a caption")
    figure_dir = Path(figure_dir)
    png = write_figure(fig, figure_dir / f"{stem}.png")
    pdf = write_figure(fig, figure_dir / f"{stem}.pdf")
    return SavedFigure(png=png, pdf=pdf, caption=caption)


def check_saved(figures: Sequence[Any], stem_prefix: str) -> tuple[SavedFigure, ...]:
    """What a ``plot`` function returned: SavedFigure objects whose PNG exists, named ``<stem_prefix>_*``."""
    out = []
    for item in figures:
        if not isinstance(item, SavedFigure):
            raise NqfError(f"{stem_prefix}: plot() must return SavedFigure objects, got {type(item).__name__}")
        if not Path(item.png).is_file():
            raise NqfError(f"{stem_prefix}: figure {item.png} was not written")
        if not Path(item.png).name.startswith(f"{stem_prefix}_"):
            # experiments share figures/; the prefix keeps one from overwriting another's files
            raise NqfError(f"{stem_prefix}: figure file {Path(item.png).name} must start with '{stem_prefix}_'")
        out.append(item)
    return tuple(out)
