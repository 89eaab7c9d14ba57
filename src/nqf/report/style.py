"""One look for every figure: colour-blind-safe colours, a line style per source, checked labels.

Colours are the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), safe
for the common colour-vision deficiencies. A curve's *source* (network trained by an
optimizer, quadratic model, M-flow, Lotka-Volterra, singular limit, data) sets its line
style, so sources stay distinguishable in grey print; the colour distinguishes what a
source is drawn for (mode, optimizer). Every legend label should name the source,
e.g. ``"network (GD)"``, ``"M-flow"``, ``"LV"``; :func:`source_label` builds them.
Many series of one kind (modes 1..30) take :func:`series_colours`: the palette while it
lasts, else as many distinct colours of a sequential map (shown with a colour bar), never
a repeating cycle. Text on a coloured cell takes :func:`text_colour_on` (WCAG contrast).

Fonts keep matplotlib's sizes in points in every figure, and a figure is about
:data:`PANEL_WIDTH` inches wide per panel column (plus an outside legend or colour bar):
the report sizes a figure by its width in inches, so equal inches per panel give equal
fonts. A single-panel figure should be no narrower per panel than the multi-panel ones,
or its fonts show larger.

:func:`save_figure` refuses a figure whose axes lack labels or whose curves lack legend
entries, and writes PNG and PDF atomically (no timestamps, so reruns are byte-identical).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.layout_engine import PlaceHolderLayoutEngine

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

# Series of one kind take the palette's first colours up to this many (not black, kept for
# references and limits, nor yellow, weak on white); more take the sequential map below.
DISTINCT_COLOURS = 6

# Series beyond the palette: a sequential, perceptually uniform, colour-blind-safe map; its pale
# yellow end (weak on white) is left out.
SEQUENTIAL_MAP = "viridis"
_SEQUENTIAL_RANGE = (0.0, 0.85)

# Width of a panel column (inches), new_figure's default; the report reads a figure's panel
# columns from its width in inches (nqf_paper.report_page).
PANEL_WIDTH = 5.2

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


def plain_text(text: str) -> str:
    """``text`` (a user's file, unit or task name in a title or legend) drawn as typed: matplotlib
    reads a pair of ``$`` as mathtext, which draws something else or fails to parse (a ValueError
    when the figure is saved); every ``$`` escaped, none is. nqf's own labels use no mathtext."""
    return str(text).replace("$", r"\$")


def series_colours(count: int) -> list[str]:
    """``count`` distinct colours: the palette's first ones up to :data:`DISTINCT_COLOURS`, else evenly spaced
    along :data:`SEQUENTIAL_MAP` (an order, e.g. mode 1..count; pair it with :func:`series_colour_bar`)."""
    if count <= DISTINCT_COLOURS:
        return list(PALETTE[: max(count, 0)])
    low, high = _SEQUENTIAL_RANGE
    cmap = colormaps[SEQUENTIAL_MAP]
    return ["#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in cmap(v)[:3])) for v in np.linspace(low, high, count)]


def series_colour_bar(fig: Figure, ax: Axes | Any, values: Sequence[Any], label: str, **options: Any) -> Any:
    """A colour bar of :func:`series_colours` for the series ``values`` (one band each, ticks thinned)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm, ListedColormap

    count = len(values)
    cmap = ListedColormap(series_colours(count))
    norm = BoundaryNorm(np.arange(count + 1) - 0.5, count)
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=label, **options)
    step = max(1, int(np.ceil(count / 12)))
    ticks = sorted({*range(0, count, step), count - 1})
    if len(ticks) > 1 and ticks[-1] - ticks[-2] < step:
        ticks.pop(-2)  # the last value's tick would crowd the one before
    bar.set_ticks(ticks, labels=[str(values[i]) for i in ticks])
    bar.minorticks_off()
    return bar


def relative_luminance(colour: Any) -> float:
    """WCAG 2 relative luminance of a matplotlib colour (0 black .. 1 white)."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(first: Any, second: Any) -> float:
    """WCAG 2 contrast ratio of two colours, 1 (same) .. 21 (black on white); text wants >= 4.5."""
    a, b = sorted((relative_luminance(first), relative_luminance(second)))
    return (b + 0.05) / (a + 0.05)


def text_colour_on(background: Any) -> str:
    """Black or white, whichever contrasts more with ``background`` (always a ratio >= 4.5)."""
    return "black" if contrast_ratio("black", background) >= contrast_ratio("white", background) else "white"


def new_figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] | None = None) -> tuple[Figure, Any]:
    """A figure (no pyplot state, so safe in worker processes) and its axes (array if several);
    by default :data:`PANEL_WIDTH` inches per panel column."""
    width, height = size if size is not None else (PANEL_WIDTH * ncols, 3.6 * nrows)
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
    """Labelled axes, and a legend entry for every curve when an axes holds more than one; labelled colour bars."""
    for ax in fig.axes:
        bar = getattr(ax, "_colorbar", None)  # matplotlib marks a colour bar's axes so
        if bar is not None:
            long_axis = ax.yaxis if bar.orientation == "vertical" else ax.xaxis
            if not long_axis.get_label_text():
                raise NqfError(f"figure {stem!r}: a colour bar lacks a label")
            continue
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


def figure_format(path: str | Path) -> str:
    """``"png"`` or ``"pdf"``, by ``path``'s suffix; NqfError for any other."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in _SAVE_OPTIONS:
        raise NqfError(f"plot file must end in .png or .pdf, got {Path(path).name!r}")
    return fmt


def write_figure(fig: Figure, path: str | Path) -> Path:
    """Check ``fig`` and write it to ``path`` (PNG at 150 dpi, or PDF by the suffix), atomically."""
    path = Path(path)
    fmt = figure_format(path)
    _check(fig, path.stem)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, **_SAVE_OPTIONS[fmt])
    _keep_layout(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _keep_layout(fig: Figure) -> None:
    """Keep the layout the first save computed for every later save of ``fig`` (its PDF, a rewrite).

    Constrained layout starts from the axes' current positions; run again after a save at another
    dpi it can move an axes by a rounding error, and at some figure sizes that moves a pixel, so a
    rewritten PNG would differ from the first.
    """
    engine = fig.get_layout_engine()
    if engine is not None and not isinstance(engine, PlaceHolderLayoutEngine):
        fig.set_layout_engine("none")


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
