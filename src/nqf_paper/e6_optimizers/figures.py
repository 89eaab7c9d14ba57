"""Figures of E6 (training methods): switch-on steps versus ln(1/sigma0), fitted slopes, closure defects.

``plot(result, figure_dir)`` reads ``result.data`` as written by
``nqf_paper.e6_optimizers.summarise``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D

from nqf.optimizers import closed_optimizer, optimizer_record
from nqf.report.style import PALETTE, SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes
from nqf_paper.figures import BLACK as _BLACK
from nqf_paper.figures import labelled_errorbar

from .config import escape_of

_MARKERS = {"network": "o", "quadratic model": "s"}


def _colour(optimizer: str) -> int:
    """The optimizer's colour index (its record's: the same in every figure)."""
    return optimizer_record(optimizer).colour


def _labelled_errorbar(ax, x, y, err, style: dict, marker: str, filled: bool = True):
    """Markers with error bars joined in the curve's line style (the fitted slopes of one source)."""
    return labelled_errorbar(
        ax,
        x,
        y,
        err,
        style,
        marker,
        filled,
        linestyle=style["linestyle"],
        linewidth=style["linewidth"],
        markersize=5,
        capsize=0,
    )


def _predicted_line(x: np.ndarray, y: np.ndarray, slope: float) -> tuple[float, float]:
    """Intercept of the line with the predicted slope through the measured points (least squares)."""
    keep = np.isfinite(y)
    return float(np.mean(y[keep] - slope * x[keep])) if keep.any() else math.nan, slope


def _switch_legend(fig, legend_ax, c: np.ndarray, optimizers: list) -> None:
    """One legend for all panels of E6_switch_steps: a figure legend drawn where the spare panel is."""
    legend_ax.axis("off")
    handles = [
        Line2D([], [], color=PALETTE[k], linewidth=2.5, label=f"mode {k + 1} (c = {c[k]:.3g})") for k in range(c.size)
    ]
    handles += [
        Line2D([], [], marker="o", markersize=5, **curve("network", _BLACK, "tanh")),
        Line2D([], [], marker="s", markersize=5, markerfacecolor="white", **curve("quadratic model", _BLACK)),
        Line2D([], [], **curve("limit", _BLACK, "predicted slope")),
    ]
    if "momentum" in optimizers:
        handles[-1] = Line2D([], [], **curve("limit", _BLACK, "predicted slope, coloured by mode"))
        handles.append(Line2D([], [], **curve("limit", _BLACK, "lr/(1-β) rule, mode 1")))
    # one legend for all panels (a figure legend, drawn where the spare panel is)
    fig.legend(
        handles=handles,
        loc="center",
        bbox_to_anchor=(0.5, 0.5),
        bbox_transform=legend_ax.transAxes,
        frameon=False,
        fontsize=9,
    )


def _switch_figure(data, figure_dir: Path) -> SavedFigure:
    optimizers = list(data["optimizers"])
    names = data["names"]
    x = np.asarray(data["log_inv_sigma0"], dtype=float)
    c = np.asarray(data["c"], dtype=float)
    modes = c.size
    predicted = {k: np.asarray(v, dtype=float) for k, v in data["predicted"].items()}
    panels = len(optimizers) + 1  # the last panel holds the shared legend
    ncols = min(3, panels)
    nrows = int(math.ceil(panels / ncols))
    fig, axes = new_figure(nrows, ncols, size=(4.6 * ncols, 3.5 * nrows))
    axes = np.atleast_1d(axes).ravel()
    xs = np.linspace(0.0, x.max() * 1.04, 2)
    # strict=False: the grid can have more panels than optimizers; the spare ones stay empty
    for ax, optimizer in zip(axes, optimizers, strict=False):
        name = names[optimizer]
        reference = escape_of(optimizer)  # whose escape-rate formula predicts it (None: none)
        for k in range(modes):
            for model, source, filled in (("network", "network", True), ("quadratic", "quadratic model", False)):
                steps = np.asarray(data["switch"][optimizer][model], dtype=float)[:, :, k]  # (S, seeds)
                mean = np.nanmean(steps, axis=1) if np.isfinite(steps).any() else np.full(x.size, np.nan)
                style = curve(source, k, f"{name}, mode {k + 1}")
                ax.plot(
                    x,
                    mean,
                    marker=_MARKERS[source],
                    markersize=5,
                    markerfacecolor=style["color"] if filled else "white",
                    **style,
                )
            if reference is not None:
                quad = np.nanmean(np.asarray(data["switch"][optimizer]["quadratic"], dtype=float)[:, :, k], axis=1)
                intercept, slope = _predicted_line(x, quad, float(predicted[reference][k]))
                what = "predicted slope" if reference == optimizer else "GD's predicted slope"
                # wide and pale under the data, so that a line lying on the points stays visible
                halo = {**curve("limit", k, f"{what}, mode {k + 1}"), "linewidth": 3.2, "alpha": 0.45, "zorder": 1}
                ax.plot(xs, intercept + slope * xs, **halo)
        if optimizer == "momentum":
            quad = np.nanmean(np.asarray(data["switch"]["momentum"]["quadratic"], dtype=float)[:, :, 0], axis=1)
            intercept, slope = _predicted_line(x, quad, float(predicted["momentum_naive"][0]))
            ax.plot(xs, intercept + slope * xs, **curve("limit", _BLACK, "lr/(1-β) rule, mode 1"))
        setup_axes(
            ax,
            axis_label("ln(1/σ₀)", "1"),
            axis_label("switch-on step", "steps"),
            title=f"{name}" + (" (prediction: GD's formula)" if reference not in (None, optimizer) else ""),
        )
        ax.set_xlim(0.0, xs[-1])
        ax.set_ylim(bottom=0.0)
    _switch_legend(fig, axes[len(optimizers)], c, optimizers)
    for ax in axes[len(optimizers) + 1 :]:
        ax.axis("off")
    return save_figure(
        fig,
        figure_dir,
        "E6_switch_steps",
        "Switch-on step of each mode (first step with m_k >= m_k*/2) versus ln(1/sigma0), per optimizer; mean over "
        "seeds. Filled circles: tanh network; open squares: quadratic model; dash-dot: the predicted slope drawn "
        "through the quadratic model's points (GD and momentum; for SGD, GD's formula; none for Adam and Muon).",
    )


def _slope_figure(data, figure_dir: Path) -> SavedFigure:
    optimizers = list(data["optimizers"])
    names = data["names"]
    c = np.asarray(data["c"], dtype=float)
    fits = data["fits"]
    # with an escape-rate prediction (geometric growth), and without one (normalised updates)
    geometric = [o for o in optimizers if escape_of(o) is not None]
    normalised = [o for o in optimizers if escape_of(o) is None]
    ncols = int(bool(geometric)) + int(bool(normalised))
    fig, axes = new_figure(1, ncols, size=(5.6 * ncols, 5.0))
    axes = list(np.atleast_1d(axes))
    if geometric:
        ax = axes.pop(0)
        handles = []
        for optimizer in geometric:
            colour = _colour(optimizer)
            for model, source, filled in (("network", "network", True), ("quadratic", "quadratic model", False)):
                fit = np.asarray(fits[optimizer][model], dtype=float)  # (m, 3): slope, stderr, intercept
                err = np.where(np.isfinite(fit[:, 1]), fit[:, 1], 0.0)
                style = curve(source, colour, names[optimizer])
                handles.append(_labelled_errorbar(ax, c, fit[:, 0], err, style, _MARKERS[source], filled))
        cs = np.geomspace(c.min() / 1.25, c.max() * 1.25, 64)
        lr, beta = float(data["lr"]), float(data["beta"])
        for key, colour, what in (
            ("gd", _colour("gd"), "GD: 1/ln(1 + 2 lr c)"),
            ("momentum", _colour("momentum"), "momentum: 1/ln z"),
            ("momentum_naive", _BLACK, "lr/(1-β) rule"),
        ):
            if key.startswith("momentum") and "momentum" not in geometric:
                continue
            if key == "gd":
                values = closed_optimizer("gd").switch_slope(cs, lr)
            elif key == "momentum":
                values = closed_optimizer("momentum").switch_slope(cs, lr, beta)
            else:
                values = closed_optimizer("gd").switch_slope(cs, lr / (1.0 - beta))
            (line,) = ax.plot(cs, values, **curve("limit", colour, what))
            handles.append(line)
        setup_axes(
            ax,
            axis_label("growth coefficient c_k", "1"),
            axis_label("slope of switch-on step", "steps per unit ln(1/σ₀)"),
            xscale="log",
            yscale="log",
            title="GD, SGD, momentum: slope versus prediction",
        )
        ax.set_xticks(c, [f"{v:g}" for v in c])
        ax.set_xticks([], minor=True)
        ax.legend(handles=handles, fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    if normalised:
        ax = axes.pop(0)
        handles = []
        modes = np.arange(1, c.size + 1)
        for i, optimizer in enumerate(normalised):
            colour = _colour(optimizer)
            for j, (model, source, filled) in enumerate(
                (("network", "network", True), ("quadratic", "quadratic model", False))
            ):
                fit = np.asarray(fits[optimizer][model], dtype=float)
                err = np.where(np.isfinite(fit[:, 1]), fit[:, 1], 0.0)
                offset = (2 * i + j - 1.5) * 0.08
                style = curve(source, colour, names[optimizer])
                handles.append(_labelled_errorbar(ax, modes + offset, fit[:, 0], err, style, _MARKERS[source], filled))
        setup_axes(
            ax,
            axis_label("mode k", "1"),
            axis_label("slope of switch-on step", "steps per unit ln(1/σ₀)"),
            title="Adam and Muon: measured (no prediction)",
        )
        ax.set_xticks(modes)
        ax.legend(handles=handles, fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    return save_figure(
        fig,
        figure_dir,
        "E6_slopes",
        "Fitted slope of the switch-on step versus ln(1/sigma0) with standard errors. Left: GD, SGD and heavy-ball "
        "momentum against the escape rates of the discrete updates (dash-dot) and the effective-lr rule lr/(1-beta) "
        "(black). Right: Adam and Muon, for which the theory makes no prediction.",
    )


def _closure_figure(data, figure_dir: Path) -> SavedFigure:
    closure = data["closure"]
    names = data["names"]
    bounds = data["bounds"]
    optimizers = [o for o in data["optimizers"] if o in closure]
    fig, (bars, steps_ax) = new_figure(1, 2, size=(11.0, 4.0))
    positions = np.arange(len(optimizers))
    tiny = 1e-17  # an exact zero has no place on a log axis; floor it there (stated in the caption)
    for i, optimizer in enumerate(optimizers):
        info = closure[optimizer]
        colour = PALETTE[_colour(optimizer)]
        bars.bar(
            positions[i] - 0.2,
            max(float(info["max_m_window"]), tiny),
            width=0.38,
            color=colour,
            label="M defect over the plateaus" if i == 0 else "_m",
        )
        bars.bar(
            positions[i] + 0.2,
            max(float(info["max_update_all"]), tiny),
            width=0.38,
            color=colour,
            alpha=0.45,
            hatch="//",
            edgecolor="black",
            label="update defect, all steps" if i == 0 else "_u",
        )
    equivariant, adam = bounds["equivariant"], bounds["adam"]
    bars.axhline(
        equivariant, color="black", linestyle="--", linewidth=1.0, label=f"claim bound {equivariant:g} (equivariant)"
    )
    bars.axhline(adam, color="black", linestyle=":", linewidth=1.2, label=f"claim bound {adam:g} (Adam, at least)")
    setup_axes(
        bars,
        axis_label("optimizer (quadratic model)", "1"),
        axis_label("max relative defect", "1"),
        yscale="log",
        title="closure on M: W0 versus W0 O",
    )
    bars.set_xticks(positions, [names[o] for o in optimizers])  # after setup_axes, which resets the ticks
    bars.set_ylim(1e-17, 10.0)
    bars.legend(fontsize=8, loc="upper left")
    for optimizer in optimizers:
        defect = np.asarray(closure[optimizer]["m_defect"], dtype=float)
        shown = np.where(defect > 0, defect, np.nan)
        style = curve("quadratic model", _colour(optimizer), names[optimizer])
        steps_ax.plot(np.arange(defect.size), shown, **style)
    network = data.get("network_closure")
    if network is not None:
        defect = np.asarray(network["m_defect"], dtype=float)
        shown = np.where(defect > 0, defect, np.nan)
        steps_ax.plot(np.arange(defect.size), shown, **curve("network", _BLACK, "tanh, GD"))
    if "muon" in optimizers:
        steps_ax.axvline(
            closure["muon"]["window"],
            color=PALETTE[_colour("muon")],
            linestyle=(0, (1, 3)),
            linewidth=1.2,
            label="end of Muon's plateau window",
        )
    setup_axes(
        steps_ax,
        axis_label("training step", "steps"),
        axis_label("relative M defect ||M - M'|| / ||M||", "1"),
        yscale="log",
        title="M defect along training",
    )
    steps_ax.legend(fontsize=8, loc="center right")
    return save_figure(
        fig,
        figure_dir,
        "E6_closure",
        "Closure on M of the quadratic model: runs from W0 and W0 O (O random orthogonal). Left: maximum relative "
        "M defect through the last switch-on (solid bars) and maximum per-step update defect over the whole run "
        "(hatched), with the claims' bounds; exact zeros are drawn at 1e-17. Right: the M defect at every step, "
        "with the tanh network under GD for contrast.",
    )


def plot(result, figure_dir: Path) -> list[SavedFigure]:
    data = result.data
    figures = [_switch_figure(data, figure_dir), _slope_figure(data, figure_dir)]
    if data.get("closure"):
        figures.append(_closure_figure(data, figure_dir))
    return figures
