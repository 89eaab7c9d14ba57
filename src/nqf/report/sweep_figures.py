"""Figures of ``nqf sweep`` (a leaf: the numerical core never imports it), written into DIR/figures/.

- ``switch_steps.png``: each mode's switch-on step against ln(1/sigma0): the theory as lines
  (M-flow, LV, singular limit; means over the other axes at each sigma0), the measured runs
  as points (network per optimizer, quadratic model), every point of the sweep;
- ``heatmap.png``: mean |relative error| of the network's switch-on steps against its
  M-flow (first optimizer; predict sweeps: the LV map's against the M-flow), over the modes
  and every other axis, on the grid of two axes;
- ``curves.png``: the loss curves of a few chosen points, every source.

Input is the sweep's table rows (``nqf.scans.sweep.table``) and, for the curves, the stored
records of the chosen points.
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import LogNorm
from matplotlib.lines import Line2D

from .style import (
    DISTINCT_COLOURS,
    SEQUENTIAL_MAP,
    axis_label,
    curve,
    new_figure,
    series_colour_bar,
    series_colours,
    setup_axes,
    text_colour_on,
    write_figure,
)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _first_optimizer(rows) -> str | None:
    for row in rows:
        for key in row:
            if key.startswith("switch_network_"):
                return key[len("switch_network_") :]
    return None


# legend entries of the sources, drawn in a neutral grey (colour = mode)
_NEUTRAL = "#505050"


def switch_figure(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Switch-on step against ln(1/sigma0) per mode (None when sigma0 is not an axis).

    Colour = mode: the palette for a few modes (named in the legend), else a sequential map with
    a colour bar; the legend, outside the axes, names the sources by line style and marker.
    """
    rows = [r for r in rows if r.get("mode") is not None and _finite(r.get("sigma0"))]
    if len({r["sigma0"] for r in rows}) < 2:
        return None
    modes = sorted({r["mode"] for r in rows}, key=_order)
    colours = series_colours(len(modes))
    many = len(modes) > DISTINCT_COLOURS
    fig, ax = new_figure(size=(8.0, 5.8))
    opt = _first_optimizer(rows)
    theory = [("M-flow", "switch_mflow"), ("LV", "switch_lv"), ("limit", "switch_singular_limit")]
    measured = [(f"switch_network_{opt}", "o", f"network ({opt})", True)] if opt else []
    measured.append(("switch_quadratic", "s", "quadratic model", False))
    drawn: dict[str, Any] = {}  # source -> its neutral legend entry, in drawing order
    for colour, mode in zip(colours, modes, strict=True):
        mine = [r for r in rows if r["mode"] == mode]
        for source, column in theory:
            by_sigma = defaultdict(list)
            for r in mine:
                if _finite(r.get(column)):
                    by_sigma[r["sigma0"]].append(r[column])
            if not by_sigma:
                continue
            xs = sorted(by_sigma, reverse=True)
            style = {**curve(source, 0, f"mode {mode}"), "color": colour}
            if many:  # thinner, or thirty modes' lines merge
                style["linewidth"] *= 0.6
            ax.plot([math.log(1 / s) for s in xs], [float(np.mean(by_sigma[s])) for s in xs], **style)
            drawn.setdefault(source, Line2D([], [], **{**curve(source), "color": _NEUTRAL}))
        for column, marker, label, filled in measured:
            pts = [(math.log(1 / r["sigma0"]), r[column]) for r in mine if _finite(r.get(column))]
            if pts:
                x, y = zip(*pts, strict=True)
                points: dict[str, Any] = {
                    "linestyle": "none",
                    "marker": marker,
                    "markersize": (4 if filled else 6) if many else (5 if filled else 7),
                    "markerfacecolor": None if filled else "none",
                }
                ax.plot(x, y, color=colour, label=f"{label}, mode {mode}", **points)
                face = _NEUTRAL if filled else "none"
                drawn.setdefault(
                    label, Line2D([], [], color=_NEUTRAL, label=label, **{**points, "markerfacecolor": face})
                )
    setup_axes(
        ax,
        axis_label("ln(1/sigma0)", "1"),
        axis_label("switch-on step", "steps"),
        title="switch-on step against init scale",
    )
    # every curve is labelled (source and mode); the legend, below the axes, lists the sources
    # by style, and the modes by colour: a colour bar for many, one entry each for a few
    handles = list(drawn.values())
    if many:
        series_colour_bar(fig, ax, modes, "mode k", pad=0.01, aspect=40)
        ncols = len(handles)
    else:  # two rows, filled by column: the sources above, the modes below
        swatches = [
            Line2D([], [], color=c, linewidth=6, label=f"mode {m}") for c, m in zip(colours, modes, strict=True)
        ]
        ncols = max(len(handles), len(swatches))
        blank = Line2D([], [], linestyle="none", label=" ")
        handles = [h for pair in zip_longest(handles, swatches, fillvalue=blank) for h in pair]
    fig.legend(handles=handles, loc="outside lower center", ncols=ncols, fontsize=9)
    return write_figure(fig, path)


def heatmap_figure(rows: list[dict[str, Any]], axes: tuple[str, str], path: Path) -> Path | None:
    """Mean |relative error| (network vs its M-flow; predict: LV vs M-flow) over two axes.

    Colour bar with the quantity; each cell's value written in black or white, whichever
    contrasts more with the cell (WCAG); a log colour scale when the values span a decade or more.
    """
    opt = _first_optimizer(rows)
    column = f"relerr_network_{opt}" if opt else "relerr_lv"
    a, b = axes
    values_a = sorted({r.get(a) for r in rows if r.get(a) is not None}, key=_order)
    values_b = sorted({r.get(b) for r in rows if r.get(b) is not None}, key=_order)
    if not values_a or not values_b:
        return None
    grid = np.full((len(values_b), len(values_a)), np.nan)
    cells = defaultdict(list)
    for r in rows:
        if r.get("mode") is not None and _finite(r.get(column)):
            cells[(r.get(a), r.get(b))].append(abs(r[column]))
    for i, vb in enumerate(values_b):
        for j, va in enumerate(values_a):
            if cells.get((va, vb)):
                grid[i, j] = float(np.mean(cells[(va, vb)]))
    fig, ax = new_figure(size=(8.0, max(4.4, min(8.0, 2.4 + 0.5 * len(values_b)))))
    ax.grid(False)
    cmap = colormaps[SEQUENTIAL_MAP].with_extremes(bad="#d9d9d9")  # grey: no data
    finite = grid[np.isfinite(grid)]
    norm = (
        LogNorm(float(finite.min()), float(finite.max()))
        if finite.size and finite.min() > 0 and finite.max() >= 10 * finite.min()
        else None
    )
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap=cmap, norm=norm)
    what = f"network ({opt}) vs M-flow" if opt else "LV vs M-flow"
    quantity = f"mean |relative error|, {what}"
    image.set_label(quantity)
    fig.colorbar(image, ax=ax, label=axis_label("mean |relative error| of switch-on steps", "1"), pad=0.02)
    setup_axes(
        ax,
        axis_label(a, "1"),
        axis_label(b, "1"),
        title=f"mean |relative error| of switch-on steps, {what}\n(over modes and other axes; grey: no data)",
    )
    rotate = 45 if max(len(_tick(v)) for v in values_a) > 6 else 0
    ax.set_xticks(range(len(values_a)), [_tick(v) for v in values_a], rotation=rotate)  # after setup_axes
    ax.set_yticks(range(len(values_b)), [_tick(v) for v in values_b])
    size = 10 if grid.size <= 24 else 8 if grid.size <= 80 else 6
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            if math.isfinite(grid[i, j]):
                cell = image.cmap(image.norm(grid[i, j]))
                ax.text(
                    j,
                    i,
                    f"{grid[i, j]:.2g}",
                    ha="center",
                    va="center",
                    fontsize=size,
                    color=text_colour_on(cell),
                )
    return write_figure(fig, path)


def _order(v):
    return (0, v, "") if _finite(v) else (1, 0, str(v))


def _tick(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


_CURVE_SOURCES = {"network": "network", "quadratic": "quadratic model", "mflow": "M-flow", "lv": "LV"}


def curves_figure(chosen: list[tuple[int, dict[str, Any], dict]], path: Path) -> Path | None:
    """Loss curves of the chosen points: [(index, axis values, record)], one panel each."""
    if not chosen:
        return None
    cols = min(3, len(chosen))
    nrows = math.ceil(len(chosen) / cols)
    fig, axes = new_figure(nrows, cols, size=(4.4 * cols, 3.4 * nrows))
    flat = np.atleast_1d(axes).ravel()
    for ax, (index, values, record) in zip(flat, chosen, strict=False):
        result = record["result"]
        if "curves" in result:
            series = [
                (source, opt, entry["steps"], entry["loss"][0])
                for source, per_opt in result["curves"].items()
                for opt, entry in per_opt.items()
            ]
        else:
            series = [
                ("mflow", result["config"]["optimizer"], result["mflow"]["steps"], result["mflow"]["loss"]),
                ("lv", result["config"]["optimizer"], result["lv"]["steps"], result["lv"]["loss"]),
            ]
        for i, (source, opt, steps, loss) in enumerate(series):
            pts = [(max(int(t), 1), v) for t, v in zip(steps, loss, strict=True) if _finite(v) and v > 0]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.plot(x, y, **curve(_CURVE_SOURCES.get(source, "data"), i, opt))
        label = ", ".join(f"{k}={_tick(v)}" for k, v in values.items())
        setup_axes(
            ax,
            axis_label("step", "1"),
            axis_label("loss", "1"),
            xscale="log",
            yscale="log",
            title=f"point {index}" + (f": {label}" if label else ""),
        )
        ax.title.set_fontsize(7)
        ax.legend(fontsize=6)
    for ax in flat[len(chosen) :]:
        ax.set_visible(False)
    return write_figure(fig, path)


def sweep_figures(rows, figure_dir: Path, heatmap: tuple[str, str] | None, chosen) -> dict[str, Path | None]:
    """Every figure (name -> path, None when the sweep has no data for it)."""
    figure_dir = Path(figure_dir)
    figure_dir.mkdir(parents=True, exist_ok=True)
    out = {"switch_steps": switch_figure(rows, figure_dir / "switch_steps.png")}
    out["heatmap"] = None if heatmap is None else heatmap_figure(rows, heatmap, figure_dir / "heatmap.png")
    out["curves"] = curves_figure(chosen, figure_dir / "curves.png")
    return out
