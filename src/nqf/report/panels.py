"""Plot pieces the library's figures share (``predict_plot``, ``compare_plot``): switch-on steps
as rugs along the top of a loss axes, mode numbers at the steps, headroom above the curves, and a
legend without repeated entries."""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

# Switch-on steps as short ticks ("rug") in rows along the top edge of a loss axes, instead of
# full-height lines that crowd the plot at a dozen modes or more.
RUG_HEIGHT = 0.035  # one row of ticks, as a fraction of the axes' height
RUG_GAP = 0.01
LINED_MODES = 6  # up to this many modes the first row's steps also get a thin full-height line


def switch_rugs(ax, rows, *, lined: bool = False) -> tuple[float, list]:
    """Ticks at each switch-on step, one row per source from the top edge down; returns the
    fraction of the axes' height they take (keep the curves below it: :func:`headroom_top`) and a
    legend entry per row drawn as a tick (pass them to :func:`unique_legend`; a line collection's own
    entry is a horizontal line, like a curve's).

    rows: [(steps, colour, label, name)], steps already finite and on the axis; ``name`` is written
    at the row's left end (the initial plateau leaves room there). ``lined``: the first row's steps
    also as thin dotted full-height lines (for a few modes: one line per mode).
    """
    transform = ax.get_xaxis_transform()
    proxies = []
    for r, (steps, colour, label, name) in enumerate(rows):
        proxies.append(
            Line2D([], [], linestyle="none", marker="|", markersize=11, markeredgewidth=1.6, color=colour, label=label)
        )
        top = 1.0 - r * (RUG_HEIGHT + RUG_GAP)
        ax.vlines(
            steps, top - RUG_HEIGHT, top, transform=transform, colors=colour, linewidth=1.6, label=label, zorder=6
        )
        ax.text(
            0.006,
            top - RUG_HEIGHT / 2,
            name,
            transform=ax.transAxes,
            ha="left",
            va="center",
            fontsize=7,
            color="0.25",  # the row's colour can be too pale for text (orange, WCAG 2:1 on white)
        )
        if lined and r == 0:
            ax.vlines(
                steps,
                0,
                top - RUG_HEIGHT,
                transform=transform,
                colors=colour,
                linestyles=(0, (1, 3)),
                linewidth=0.9,
                alpha=0.7,
                label=label,  # one legend entry with the ticks' (merge labels: unique_legend)
                zorder=1,
            )
    return len(rows) * (RUG_HEIGHT + RUG_GAP), proxies


def on_log_axes(steps, loss, positive: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, loss)`` as float arrays without step 0 (not on a log axis) and non-finite losses;
    with ``positive`` also without losses <= 0."""
    steps = np.asarray(steps, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    keep = (steps > 0) & np.isfinite(loss)
    if positive:
        keep &= loss > 0
    return steps[keep], loss[keep]


def decade_before(steps) -> float:
    """The left end of a log step axis: the decade below 0.3 times the first finite step (1 when
    that step is at most 3, or there is none), so that the plateau before it shows, flat."""
    steps = np.asarray(steps, dtype=np.float64)
    steps = steps[np.isfinite(steps)]
    first = float(steps.min()) if steps.size else 0.0
    return float(10.0 ** np.floor(np.log10(0.3 * first))) if first > 3 else 1.0


def headroom_top(bottom: float, highest: float, reserved: float) -> float:
    """Top of a log y axis from ``bottom`` that keeps ``highest`` below the axes' top ``reserved``
    fraction (where :func:`switch_rugs` draws), with a small margin."""
    low, high = np.log10(bottom), np.log10(highest)
    return float(10.0 ** (low + (high - low) / (1.0 - reserved - 0.03)))


def mode_numbers(ax, steps, colour: str, fontsize: float = 8.0, labels=None) -> list[int]:
    """Mode k's number just above the axes at its step (log x axis, limits already set), thinned so
    that neighbours keep apart: the first and the last always, others only with room; returns the
    modes (1-based) numbered. ``labels`` (one text per step, e.g. a degenerate group's "1-2")
    replaces the numbers."""
    names = [str(k + 1) for k in range(np.asarray(steps).size)] if labels is None else [str(v) for v in labels]
    ax.figure.draw_without_rendering()  # lay the figure out, so that the axes has its final width
    low, high = ax.get_xlim()
    steps = np.asarray(steps, dtype=np.float64)
    order = [int(k) for k in np.argsort(steps) if np.isfinite(steps[k]) and low <= steps[k] <= high]
    points = 72.0 / ax.figure.dpi
    at = {k: float(ax.transData.transform((steps[k], 1.0))[0]) * points for k in order}
    room = {k: 0.65 * fontsize * (len(names[k]) + 0.8) for k in order}  # a label's width in points
    kept: list[int] = []
    for k in order:
        if not kept or at[k] - at[kept[-1]] >= (room[k] + room[kept[-1]]) / 2:
            kept.append(k)
    if order and kept[-1] != order[-1]:  # the last mode is always named: it may displace the one before
        last = order[-1]
        while len(kept) > 1 and at[last] - at[kept[-1]] < (room[last] + room[kept[-1]]) / 2:
            kept.pop()
        kept.append(last)
    for k in kept:
        ax.text(
            steps[k],
            1.0,
            names[k],
            transform=ax.get_xaxis_transform(),
            va="bottom",
            ha="center",
            fontsize=fontsize,
            color=colour,
        )
    return [k + 1 for k in kept]


def unique_legend(ax, proxies=()) -> tuple[list, list]:
    """The legend handles and labels of ``ax`` with each label once (its first handle, or the proxy
    of that label)."""
    handles, labels = ax.get_legend_handles_labels()
    first: dict[str, object] = {str(proxy.get_label()): proxy for proxy in proxies}
    for handle, label in zip(handles, labels, strict=True):
        first.setdefault(label, handle)
    order = list(dict.fromkeys(labels))
    return [first[label] for label in order], order
