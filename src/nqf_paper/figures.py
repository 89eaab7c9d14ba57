"""Plot pieces several experiments' figures share: colours, log-axis step ticks, the four loss
curves and the switch-on panels of E1 and E7, labelled error bars (E2, E6), built on the
library's figure style (``nqf.report.style``). Figures only: no stored number depends on it."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FixedLocator, NullFormatter, StrMethodFormatter

from nqf.report.style import PALETTE, axis_label, curve, setup_axes
from nqf_paper._common import as_array

GREY = "#808080"
BLACK = PALETTE.index("#000000")  # palette index of black, kept for limits and predictions


def positive(y) -> np.ndarray:
    """y (as floats) where it is positive, NaN elsewhere (no place on a log axis)."""
    y = as_array(y)
    return np.where(y > 0, y, np.nan)


def step_ticks(ax, low: float, high: float) -> None:
    """Integer step labels at 1, 2, 5 x 10^k on a log axis (matplotlib's minor labels collide)."""
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    ticks = [m * 10.0**e for e in decades for m in (1, 2, 5) if low <= m * 10.0**e <= high]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def model_losses(ax, t, loss: dict) -> None:
    """The tanh network, its quadratic model, the M-flow and the LV map at steps t = 1..T (loss at 0..T)."""
    ax.plot(t, loss["network"][1:], **curve("network", 0, "tanh, GD"))
    ax.plot(t, loss["quadratic"][1:], **curve("quadratic model", 1, "GD"))
    ax.plot(t, loss["mflow"][1:], **curve("M-flow", 2))
    ax.plot(t, loss["lv"][1:], **curve("LV", 3, "discrete map"))


def steps_from_first_switch(ax, finite_switch, last: float) -> None:
    """Log step axis from a fifth of the first switch-on step (the initial plateau is flat) to ``last``."""
    left = max(1.0, finite_switch.min() / 5.0) if finite_switch.size else 1.0
    ax.set_xlim(left, last)
    step_ticks(ax, left, last)


def switch_by_source(ax, x, switch: dict, series: dict, spread: float, hollow: tuple[str, ...] = ()) -> None:
    """Switch-on step of each mode (at x) per source, side by side within ±spread.

    series: name -> (curve source, colour index, legend detail, marker); sources in ``hollow`` get open markers.
    """
    offsets = np.linspace(-spread, spread, len(series))
    for offset, (name, (source, colour, detail, marker)) in zip(offsets, series.items(), strict=True):
        style = {**curve(source, colour, detail), "linestyle": "none", "marker": marker, "markersize": 6}
        if source in hollow:
            style["markerfacecolor"] = "white"
        ax.plot(x + offset, switch[name], **style)
    setup_axes(ax, axis_label("mode k", "1"), axis_label("switch-on step", "steps"), title="switch-on step by source")
    ax.set_xticks(x)
    ax.set_ylim(bottom=0.0)
    ax.legend(loc="upper left", fontsize=7.5)


def deviation_band(ax, tolerance: float) -> None:
    """Grey band of ±tolerance (in percent) around the M-flow's zero line."""
    ax.axhspan(-100 * tolerance, 100 * tolerance, color=GREY, alpha=0.18, linewidth=0)
    ax.axhline(0.0, color="black", linewidth=0.8, label="M-flow")


def deviation_axes(ax, x, tolerance: float) -> None:
    """Labels of the deviation-from-the-M-flow panel, modes at x."""
    setup_axes(
        ax,
        axis_label("mode k", "1"),
        axis_label("switch-on step relative to the M-flow's", "%"),
        title=f"deviation from the M-flow (band: ±{tolerance:.0%})",
    )
    ax.set_xticks(x)


def labelled_errorbar(ax, x, y, err, style: dict, marker: str, filled: bool = True, **options):
    """ax.errorbar with every child artist carrying the legend label (the figure check asks for it).

    style: a ``curve`` style (colour and label); options go to ``ax.errorbar``.
    """
    colour = style["color"]
    container = ax.errorbar(
        x,
        y,
        yerr=err,
        color=colour,
        marker=marker,
        markerfacecolor=colour if filled else "white",
        elinewidth=1.0,
        **options,
    )
    label = style["label"]
    container.set_label(label)
    for artist in (container.lines[0], *container.lines[1], *container.lines[2]):
        if artist is not None:
            artist.set_label(label)
    return container
