"""Figures of E4 (power laws): many-mode LV loss and local exponent, and the trained network.

``plot(result, figure_dir)`` reads ``result.data`` as written by
``nqf_paper.e4_power_law.summarise``. Log-log axes throughout (the laws are power
laws in time); each fit is drawn over exactly its window, with the window's ends marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.lines import Line2D

from nqf.report.style import PALETTE, SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes
from nqf_paper._common import as_array as _arr
from nqf_paper.figures import BLACK as _BLACK
from nqf_paper.figures import positive as _positive

_FIT_STYLE: dict[str, Any] = {"linestyle": (0, (1, 1.2)), "linewidth": 3.0, "alpha": 0.55}


def _fit_line(ax, fit, colour, label: str, scale: float = 1.0) -> None:
    """The fitted A t^-beta over its window (t in the curve's units, x = t / scale)."""
    t = np.geomspace(fit["window"][0], fit["window"][1], 30)
    ax.plot(t / scale, fit["prefactor"] * t ** -fit["exponent"], color=colour, label=label, **_FIT_STYLE)


def _window_marks(ax, fit, colour, label: str, scale: float = 1.0) -> None:
    for t in fit["window"]:
        ax.axvline(t / scale, color=colour, linewidth=0.9, linestyle=(0, (4, 3)), alpha=0.7, label=label)


def _legend(ax, **options) -> None:
    """A legend with one entry per distinct label (both window ends share one)."""
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(list(unique.values()), list(unique.keys()), **options)


def _lv_curves(ax_loss, ax_local, i: int, d, k_lo: int, k_hi: int) -> None:
    """One system's excess loss, fit and window (left), local exponent and its predictions (right)."""
    alpha, fit = d["alpha"], d["fit"]
    s = _arr(d["s"])
    eps = float(d["eps"])
    colour = PALETTE[i]
    ax_loss.plot(s, _positive(d["excess"]), **curve("LV", i, f"α = {alpha:g}"))
    _fit_line(ax_loss, fit, colour, f"fit α = {alpha:g}: β = {fit['exponent']:.3f}", scale=eps)
    _window_marks(ax_loss, fit, colour, f"window α = {alpha:g}: modes {k_lo}-{k_hi}", scale=eps)
    # the local exponent oscillates while the first modes still switch one by one: start at the window
    merged = _arr(d["k_star"]) >= k_lo
    ax_local.plot(s[merged], _arr(d["local"])[merged], **curve("LV", i, f"α = {alpha:g}, local exponent"))
    ax_local.plot(
        s[merged],
        _arr(d["corrected_curve"])[merged],
        color=colour,
        linewidth=1.2,
        linestyle=(0, (5, 2)),
        label=f"finite-init formula, α = {alpha:g}",
    )
    ax_local.axhline(d["asymptotic"], **{**curve("limit", i, f"(2α−1)/α, α = {alpha:g}"), "linewidth": 1.2})
    lo, hi = fit["window"]
    ax_local.plot([lo / eps, hi / eps], [fit["exponent"]] * 2, color=colour, label=f"fit α = {alpha:g}", **_FIT_STYLE)


def _lv_loss_axes(ax_loss, alpha_handles, modes: int, k_lo: int, k_hi: int) -> None:
    """Axes and legend of the excess-loss panel."""
    setup_axes(
        ax_loss,
        axis_label("rescaled time t / ln(1/m₀)", "steps"),
        axis_label("excess loss L − L∞", "1"),
        xscale="log",
        yscale="log",
        title=f"{modes} LV modes, c_k = k^−α, K = I",
    )
    ax_loss.set_ylim(1e-14, 3.0)
    ax_loss.legend(
        handles=alpha_handles
        + [
            Line2D([], [], **curve("LV", _BLACK, "exact")),
            Line2D([], [], color="black", label="power-law fit over the window", **_FIT_STYLE),
            Line2D(
                [],
                [],
                color="black",
                linewidth=0.9,
                linestyle=(0, (4, 3)),
                label=f"window: switch of mode {k_lo} to mode {k_hi}",
            ),
        ],
        fontsize=7.5,
        loc="lower left",
    )


def _lv_local_axes(ax_local, alpha_handles) -> None:
    """Axes and legend of the local-exponent panel."""
    setup_axes(
        ax_local,
        axis_label("rescaled time t / ln(1/m₀)", "steps"),
        axis_label("local exponent −d ln(L − L∞) / d ln t", "1"),
        xscale="log",
        title="local exponent against the prediction",
    )
    ax_local.set_ylim(0.35, 2.0)  # room below the curves for the legend
    ax_local.legend(
        handles=alpha_handles
        + [
            Line2D([], [], **curve("LV", _BLACK, "local exponent")),
            Line2D(
                [],
                [],
                color="black",
                linewidth=1.2,
                linestyle=(0, (5, 2)),
                label="finite-init formula β/(1 − 1/(eps − α ln k*))",
            ),
            Line2D([], [], **{**curve("limit", _BLACK, "eps → ∞: (2α − 1)/α"), "linewidth": 1.2}),
            Line2D([], [], color="black", label="fitted exponent over the window", **_FIT_STYLE),
        ],
        fontsize=7.5,
        loc="lower right",
        ncol=2,
    )


def _lv_figure(data, figure_dir: Path) -> SavedFigure:
    """E4_lv: excess loss of the many-mode LV systems (left) and their local exponent (right)."""
    fig, (ax_loss, ax_local) = new_figure(1, 2, size=(11.5, 4.8))
    k_lo, k_hi = data["lv_window_modes"]
    for i, d in enumerate(data["lv"]):
        _lv_curves(ax_loss, ax_local, i, d, k_lo, k_hi)
    modes = data["lv_modes"]
    alpha_handles = [
        Line2D([], [], color=PALETTE[i], linewidth=2.5, label=f"α = {d['alpha']:g}") for i, d in enumerate(data["lv"])
    ]
    _lv_loss_axes(ax_loss, alpha_handles, modes, k_lo, k_hi)
    _lv_local_axes(ax_local, alpha_handles)
    caption = (
        f"Many-mode Lotka-Volterra systems (c_k = k^-α, K = I, m0 = 1e-12, {modes} modes). Left: excess loss against "
        f"t / ln(1/m0), log-log, with the power-law fit over the window from the switch of mode {k_lo} to that of "
        f"mode {k_hi} (dashed verticals). Right: the local exponent (from the switch of mode {k_lo} on; before it "
        "the first steps are still apart and it oscillates), the finite-init formula β/(1 − 1/(eps − α ln k*)) "
        "with k* the mode switching at that time, the asymptotic (2α − 1)/α, and the fitted exponent over its "
        "window. Past the window the finite number of modes cuts the law off."
    )
    return save_figure(fig, figure_dir, "E4_lv", caption)


def _trained_figure(data, figure_dir: Path) -> SavedFigure:
    fig, (ax_loss, ax_switch) = new_figure(1, 2, size=(11.5, 4.6))
    own_loss = _arr(data["own_loss"])
    steps = np.arange(own_loss.size, dtype=np.float64)
    own_fit = data["own_fit"]
    k_lo, k_hi = data["train_window_modes"]
    ax_loss.plot(steps[1:], _positive(own_loss[1:]), **curve("LV", 0, "own spectrum, exact GD map"))
    ax_loss.plot(steps[1:], _positive(_arr(data["own_flow_loss"])[1:]), **curve("LV", 5, "flow, own spectrum"))
    _fit_line(ax_loss, own_fit, PALETTE[0], f"fit to LV: β = {own_fit['exponent']:.3f}")
    ax_switch.plot(
        np.arange(1, _arr(data["own_switch"]).size + 1),
        _arr(data["own_switch"]),
        marker="o",
        markersize=3,
        **curve("LV", 0, "own spectrum, exact GD map"),
    )
    for i, d in enumerate(data["trained"].values(), start=1):
        colour = PALETTE[i]
        loss = _arr(d["loss"])
        source = d["source"]
        ax_loss.plot(steps[1 : loss.size], _positive(loss[1:]), **curve(source, i, "GD, tanh"))
        if d["fit"] is not None:
            _fit_line(ax_loss, d["fit"], colour, f"fit to {source}: β = {d['fit']['exponent']:.3f}")
        switch = _arr(d["switch"])
        ax_switch.plot(np.arange(1, switch.size + 1), switch, marker="s", markersize=3, **curve(source, i, "GD, tanh"))
    ax_loss.axvspan(own_fit["window"][0], own_fit["window"][1], color=PALETTE[0], alpha=0.08, linewidth=0)
    setup_axes(
        ax_loss,
        axis_label("training step", "steps"),
        axis_label("loss", "1"),
        xscale="log",
        yscale="log",
        title=f"powerlaw task, α = {data['train_alpha']:g}: loss (window shaded)",
    )
    ax_loss.legend(fontsize=7.5, loc="lower left")
    ax_switch.axvspan(k_lo, k_hi, color=PALETTE[0], alpha=0.08, linewidth=0)
    setup_axes(
        ax_switch,
        axis_label("mode k", "1"),
        axis_label("switch-on step", "steps"),
        xscale="log",
        yscale="log",
        title="switch-on step of each mode",
    )
    ax_switch.legend(fontsize=7.5, loc="upper left")
    caption = (
        f"A trained model whose steps merge: the powerlaw task (s_k = k^-{data['train_alpha']:g}), GD, float64. Left: "
        "loss against training step, log-log, with the exact GD map of the LV system of the task's own spectrum (the "
        f"prediction) and the LV flow; both fits use the window (shaded) from the predicted switch of mode {k_lo} to "
        f"that of mode {k_hi}. Right: switch-on step (first step with m_k ≥ m_k*/2) of each mode, trained against "
        "predicted; modes in the window are shaded."
    )
    return save_figure(fig, figure_dir, "E4_trained", caption)


def plot(result, figure_dir) -> list[SavedFigure]:
    figure_dir = Path(figure_dir)
    return [_lv_figure(result.data, figure_dir), _trained_figure(result.data, figure_dir)]
