"""Figures of E2 (init sweep): switch-on step versus ln(1/sigma0), fitted slopes, fit residuals.

``plot(result, figure_dir)`` reads ``result.data`` as written by
``nqf_paper.e2_init_sweep.summarise``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D

from nqf.optimizers import closed_optimizer
from nqf.report.style import PALETTE, SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes
from nqf.theory.lotka_volterra.system import switch_slope_continuous
from nqf_paper.figures import BLACK as _BLACK
from nqf_paper.figures import GREY as _GREY
from nqf_paper.figures import labelled_errorbar

_MODELS = (
    ("network", "network", "tanh network", "o", True),
    ("quadratic", "quadratic model", "quadratic model", "s", False),
)
# the slope formulas, drawn in the style of predicted (limit) curves; the label names the formula
_GD_FORMULA = {**curve("limit", _BLACK), "label": "prediction: GD, 1/ln(1 + 2 lr c)"}
_FLOW_FORMULA = {**curve("limit", 5), "linewidth": 1.1, "label": "gradient flow, 1/(2 lr c)"}
_SLOPE_LABEL = axis_label("slope of the switch-on step", "steps per unit ln(1/σ₀)")
_X_LABEL = axis_label("ln(1/σ₀)", "1")


def _labelled_errorbar(ax, x, y, err, style: dict, marker: str, filled: bool):
    """Markers with error bars, no line (the fitted slopes of one source)."""
    return labelled_errorbar(ax, x, y, err, style, marker, filled, linestyle="none", markersize=6, capsize=2)


def _seed_mean(values) -> np.ndarray:
    """(S, seeds, m) -> (S, m): mean over the seeds that have a value (NaN where none has)."""
    values = np.asarray(values, dtype=float)
    count = np.sum(np.isfinite(values), axis=1)
    total = np.nansum(values, axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _switch_figure(data, figure_dir: Path) -> SavedFigure:
    x = np.asarray(data["log_inv_sigma0"], dtype=float)
    order = np.argsort(x)
    x = x[order]
    c = np.asarray(data["c"], dtype=float)
    mflow = _seed_mean(data["predicted"]["mflow"])[order]  # (S, m)
    fig, axes = new_figure(1, 2, size=(13.0, 4.4))
    top = 0.0
    for ax, (model, source, title, marker, filled) in zip(axes, _MODELS, strict=True):
        steps = _seed_mean(data["measured"][model])[order]
        for k in range(c.size):
            style = curve(source, k, f"mode {k + 1}")
            ax.plot(
                x,
                steps[:, k],
                marker=marker,
                markersize=5,
                markerfacecolor=style["color"] if filled else "white",
                **style,
            )
            ok = np.isfinite(mflow[:, k])
            ax.plot(x[ok], mflow[ok, k], **{**curve("M-flow", k, f"mode {k + 1}"), "linewidth": 1.6})
        setup_axes(ax, _X_LABEL, axis_label("switch-on step", "steps"), title=f"{title} (markers) and M-flow (dotted)")
        ax.set_xlim(0.0, x.max() * 1.04)
        top = max(top, ax.get_ylim()[1])
    for ax in axes:  # one step scale for both panels
        ax.set_ylim(0.0, top)
    handles = [
        Line2D([], [], color=PALETTE[k], linewidth=2.5, label=f"mode {k + 1} (c = {c[k]:.3g})") for k in range(c.size)
    ]
    handles += [
        Line2D([], [], marker="o", markersize=5, **curve("network", _BLACK, "tanh, GD")),
        Line2D([], [], marker="s", markersize=5, markerfacecolor="white", **curve("quadratic model", _BLACK, "GD")),
        Line2D([], [], **curve("M-flow", _BLACK, "predict")),
    ]
    failed = list(data.get("predict_failed") or [])
    if failed:
        handles.append(
            Line2D(
                [], [], color="none", label=f"M-flow diverged (float64) at σ₀ = {', '.join(f'{v:g}' for v in failed)}"
            )
        )
    fig.legend(handles=handles, loc="outside right center", frameon=False, fontsize=9)
    return save_figure(
        fig,
        figure_dir,
        "E2_switch_steps",
        "Switch-on step of each mode (first step with m_k >= m_k*/2) versus ln(1/sigma0), GD on the staircase. "
        "Left: tanh network; middle: quadratic model; dotted: the M-flow from predict (where its float64 run stays "
        "finite). The theory predicts straight lines of slope 1/ln(1 + 2 lr c_k).",
    )


def _slope_figure(data, figure_dir: Path) -> SavedFigure:
    c = np.asarray(data["c"], dtype=float)
    lr = float(data["lr"])
    fits = {k: np.asarray(v, dtype=float) for k, v in data["fits"].items()}  # (m, 3): slope, stderr, intercept
    discrete = np.asarray(data["slope_discrete"], dtype=float)
    tolerance = float(data["slope_tolerance"])
    fig, axes = new_figure(1, 2, size=(11.5, 4.6))
    ax = axes[0]
    series = [
        ("network", curve("network", 0, "tanh, GD"), "o", True),
        ("quadratic", curve("quadratic model", 1, "GD"), "s", False),
        ("mflow", curve("M-flow", 2), "D", False),
        ("lv", curve("LV", 3, "discrete map"), "v", False),
    ]
    handles = []
    for name, style, marker, filled in series:
        fit = fits[name]
        err = np.where(np.isfinite(fit[:, 1]), fit[:, 1], 0.0)
        handles.append(_labelled_errorbar(ax, c, fit[:, 0], err, style, marker, filled))
    cs = np.geomspace(c.min() / 1.3, c.max() * 1.3, 64)
    (line,) = ax.plot(cs, closed_optimizer("gd").switch_slope(cs, lr), **_GD_FORMULA)
    handles.append(line)
    (line,) = ax.plot(cs, switch_slope_continuous(cs, lr), **_FLOW_FORMULA)
    handles.append(line)
    setup_axes(
        ax,
        axis_label("growth coefficient c_k", "1"),
        _SLOPE_LABEL,
        xscale="log",
        yscale="log",
        title="fitted slopes and the escape rates",
    )
    ax.set_xticks(c, [f"{v:g}" for v in c])
    ax.set_xticks([], minor=True)
    low, high = ax.get_ylim()
    ticks = [m * 10.0**e for e in range(-1, 5) for m in (1, 2, 5) if low <= m * 10.0**e <= high]
    ax.set_yticks(ticks, [f"{v:g}" for v in ticks])
    ax.set_yticks([], minor=True)
    ax.legend(handles=handles, fontsize=8, loc="upper right")

    ax = axes[1]
    modes = np.arange(1, c.size + 1, dtype=float)
    ax.axhspan(1.0 - tolerance, 1.0 + tolerance, color=_GREY, alpha=0.2, linewidth=0)
    handles = [ax.axhline(1.0, **{**_GD_FORMULA, "label": f"{_GD_FORMULA['label']}, band ±{tolerance:.0%}"})]
    ratio_continuous = np.asarray(switch_slope_continuous(c, lr), dtype=float) / discrete
    (line,) = ax.plot(modes, ratio_continuous, **{**_FLOW_FORMULA, "marker": "x"})
    handles.append(line)
    for offset, (name, style, marker, filled) in zip((-0.12, -0.04, 0.04, 0.12), series, strict=True):
        fit = fits[name]
        err = np.where(np.isfinite(fit[:, 1]), fit[:, 1], 0.0) / discrete
        handles.append(_labelled_errorbar(ax, modes + offset, fit[:, 0] / discrete, err, style, marker, filled))
    setup_axes(
        ax,
        axis_label("mode k", "1"),
        axis_label("slope / (1/ln(1 + 2 lr c_k))", "1"),
        title="slope relative to the GD prediction",
    )
    ax.set_xticks(modes)
    ax.legend(handles=handles, fontsize=8, loc="lower left")
    return save_figure(
        fig,
        figure_dir,
        "E2_slopes",
        "Fitted slope of the switch-on step versus ln(1/sigma0), with standard errors. Left: against the growth "
        "coefficient c_k, with GD's escape rate 1/ln(1 + 2 lr c) and gradient flow's 1/(2 lr c). Right: relative "
        f"to GD's prediction; grey band: the ±{tolerance:.0%} tolerance of the claims.",
    )


def _residual_figure(data, figure_dir: Path) -> SavedFigure:
    x = np.asarray(data["log_inv_sigma0"], dtype=float)
    order = np.argsort(x)
    bound = float(data["linearity_steps"])
    fig, axes = new_figure(1, 2, size=(11.0, 4.0))
    for ax, (model, source, title, marker, filled) in zip(axes, _MODELS, strict=True):
        residuals = [np.asarray(r, dtype=float) for r in data["residuals"][model]]  # per mode (S, seeds)
        ax.axhspan(-bound, bound, color=_GREY, alpha=0.2, linewidth=0)
        for k, r in enumerate(residuals):
            style = curve(source, k, f"mode {k + 1}")
            mean = _seed_mean(r[:, :, None])[order, 0]
            ax.plot(
                x[order],
                mean,
                marker=marker,
                markersize=5,
                markerfacecolor=style["color"] if filled else "white",
                **style,
            )
        setup_axes(
            ax, _X_LABEL, axis_label("residual of the linear fit", "steps"), title=f"{title} (band: ±{bound:g} step)"
        )
        low, high = ax.get_ylim()
        span = max(high, bound * 1.2) - min(low, -bound * 1.2)
        ax.set_ylim(min(low, -bound * 1.2), max(high, bound * 1.2) + 0.35 * span)  # room for the legend
        ax.legend(fontsize=8, ncols=2, loc="upper center")
    return save_figure(
        fig,
        figure_dir,
        "E2_residuals",
        "Residuals of the linear fit t_k = a_k + b_k ln(1/sigma0) per mode (mean over seeds). Grey band: the "
        f"±{bound:g}-step linearity bound of the claims (integer switch-on steps round by up to a step).",
    )


def plot(result, figure_dir) -> list[SavedFigure]:
    data = result.data
    figure_dir = Path(figure_dir)
    return [_switch_figure(data, figure_dir), _slope_figure(data, figure_dir), _residual_figure(data, figure_dir)]
