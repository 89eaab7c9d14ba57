"""Figures of E3 (plateaus as a singular limit): loss against t / ln(1/m0), convergence, competition.

``plot(result, figure_dir)`` reads ``result.data`` as written by
``nqf_paper.e3_singular_limit.summarise``. Colour = init scale (or mode), line
style = source (``nqf.report.style``); legends use proxy entries, one per colour and
one per source, so that eleven curves do not need eleven legend rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D

from nqf.report.style import PALETTE, SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes
from nqf_paper._common import as_array as _arr
from nqf_paper.figures import BLACK as _BLACK
from nqf_paper.figures import positive as _positive

_S_LABEL = axis_label("rescaled time t / ln(1/m₀)", "steps")
_LOSS_FLOOR = 2e-2  # the last plateau is 0: the log axis stops here


def _sigma_text(sigma0: float) -> str:
    exponent = int(np.round(np.log10(sigma0)))
    return f"σ₀ = 1e{exponent}" if np.isclose(sigma0, 10.0**exponent) else f"σ₀ = {sigma0:.2g}"


def _colour(i: int) -> int:
    # skip black (kept for the limit) in the cycle of init scales
    order = [k for k in range(len(PALETTE)) if k != _BLACK]
    return order[i % len(order)]


def _staircase_figure(data, figure_dir: Path) -> SavedFigure:
    sigma0s = _arr(data["sigma0s"])
    floor = float(data["rounding_floor"])
    fig, (ax_flow, ax_gd) = new_figure(1, 2, size=(11.0, 4.4))
    s_flow, s_gd = _arr(data["s_flow"]), _arr(data["s_gd"])
    loss0, plateaus = float(data["loss0"]), _arr(data["limit_plateaus"])
    levels = np.concatenate([[loss0], plateaus])
    for i, sigma0 in enumerate(sigma0s):
        name = _sigma_text(sigma0)
        ax_flow.plot(s_flow, _positive(_arr(data["flow_loss"])[i]), **curve("LV", _colour(i), f"flow, {name}"))
        ax_gd.plot(s_gd, _positive(_arr(data["gd_loss"])[i]), **curve("LV", _colour(i), f"GD map, {name}"))
        below = " (below float64 floor)" if sigma0 < floor else ""
        trained = curve("quadratic model", _colour(i), f"GD, {name}{below}")
        ax_gd.plot(s_gd, _positive(_arr(data["trained_loss"])[i]), **trained)
    for ax, steps, s_grid, title in (
        (ax_flow, _arr(data["flow_steps"]), s_flow, "LV flow (solve_lv)"),
        (ax_gd, _arr(data["gd_steps"]), s_gd, "GD: exact LV map and trained quadratic model"),
    ):
        x = np.concatenate([[0.0], np.repeat(steps, 2), [s_grid[-1]]])
        # a last plateau of 0 is drawn just below the axis, so that its step is visible
        y = np.repeat(np.where(levels > 0, levels, 0.5 * _LOSS_FLOOR), 2)
        ax.plot(x, _positive(y), **{**curve("limit", _BLACK, "vanishing init"), "linewidth": 2.2, "zorder": 5})
        setup_axes(ax, _S_LABEL, axis_label("loss", "1"), yscale="log", title=title)
        ax.set_ylim(_LOSS_FLOOR, 1.5 * loss0)
        ax.set_xlim(0.0, s_grid[-1])
    scale_handles = [
        Line2D([], [], color=PALETTE[_colour(i)], linewidth=2.5, label=_sigma_text(s)) for i, s in enumerate(sigma0s)
    ]
    ax_flow.legend(
        handles=scale_handles
        + [Line2D([], [], **curve("LV", _BLACK, "flow")), Line2D([], [], **curve("limit", _BLACK, "vanishing init"))],
        fontsize=7.5,
        loc="upper right",
    )
    ax_gd.legend(
        handles=scale_handles
        + [
            Line2D([], [], **curve("LV", _BLACK, "exact GD map")),
            Line2D([], [], **curve("quadratic model", _BLACK, "trained, GD, float64")),
            Line2D([], [], **curve("limit", _BLACK, "GD map, vanishing init")),
        ],
        fontsize=7.5,
        loc="upper right",
    )
    caption = (
        "Staircase loss against rescaled time s = t / ln(1/m0), m0 = n σ0², for shrinking σ0. Left: the LV flow "
        "approaches the step function of the vanishing-init limit (steps at s_k = 1/(4 lr c_k), plateaus "
        "(1/2) Σ_{j>k} s_j²). Right: the exact GD map of the LV system (dash-dot) and the quadratic model trained "
        "by GD (dashed) approach the GD map's own limit s_k = 1/(2 ln(1 + 2 lr c_k)); below the float64 floor the "
        "trained late modes come early (rounding seeds them). Log loss axis cut at "
        f"{_LOSS_FLOOR:g} (the last plateau is 0)."
    )
    return save_figure(fig, figure_dir, "E3_staircase", caption)


def _convergence_figure(data, figure_dir: Path) -> SavedFigure:
    fig, ax = new_figure(1, 1, size=(6.6, 4.6))
    eps = _arr(data["eps"])
    mask = np.asarray(data["fit_mask"], dtype=bool)
    slopes = data["slopes"]
    series = (
        ("flow", eps, _arr(data["errors"]["flow"]), np.ones(eps.size, bool), curve("LV", 0, "flow, staircase"), "o"),
        ("gd", eps, _arr(data["errors"]["gd"]), np.ones(eps.size, bool), curve("LV", 1, "GD map, staircase"), "s"),
        ("trained", eps, _arr(data["errors"]["trained"]), mask, curve("quadratic model", 2, "trained, GD"), "D"),
        (
            "competition",
            _arr(data["comp_eps"]),
            _arr(data["comp_err"]),
            np.ones(len(data["comp_eps"]), bool),
            curve("LV", 3, "competition, on/off events"),
            "^",
        ),
    )
    for key, x, y, fitted, style, marker in series:
        slope, intercept = (float(v) for v in slopes[key])
        label = style["label"]
        ax.plot(x[fitted], y[fitted], marker=marker, markersize=6, **{**style, "linestyle": "none"})
        if (~fitted).any():
            ax.plot(
                x[~fitted],
                y[~fitted],
                marker=marker,
                markersize=7,
                markerfacecolor="white",
                color=style["color"],
                linestyle="none",
                label=f"{label}: below float64 floor (not fitted)",
            )
        if np.isfinite(slope):
            xs = np.geomspace(x[fitted].min(), x[fitted].max(), 20)
            ax.plot(xs, np.exp(intercept) * xs**slope, **{**style, "label": f"fit to {label}: slope {slope:.3f}"})
    x_ref = np.geomspace(eps.min(), max(eps.max(), _arr(data["comp_eps"]).max()), 10)
    y_ref = 0.5 * np.nanmax(_arr(data["errors"]["flow"])) * (x_ref / x_ref[0]) ** -1.0
    ax.plot(x_ref, y_ref, **{**curve("limit", _BLACK, "predicted ∝ 1/eps"), "linewidth": 1.0})
    setup_axes(
        ax,
        axis_label("eps = ln(1/m₀)", "1"),
        axis_label("worst relative step-time error max_k |t_k/eps − s_k| / s_k", "1"),
        xscale="log",
        yscale="log",
    )
    ax.legend(fontsize=7, loc="lower left")
    caption = (
        "Convergence to the singular limit: the worst mode's relative error of the step time / eps against "
        "eps = ln(1/m0), log-log, with least-squares fits (predicted slope -1). Open markers: trained runs below "
        "the float64 rounding floor, left out of the fit."
    )
    return save_figure(fig, figure_dir, "E3_convergence", caption)


def _competition_figure(data, figure_dir: Path) -> SavedFigure:
    fig, (ax_u, ax_loss) = new_figure(1, 2, size=(11.0, 4.4))
    s = _arr(data["s_comp"])
    eps = _arr(data["comp_eps"])
    u = _arr(data["comp_u"])  # (E, S, m)
    limit_u = _arr(data["comp_limit_u"])
    modes = limit_u.shape[1]
    shown = (0, eps.size - 1)
    for k in range(modes):
        for n, e in enumerate(shown):
            style = curve("LV", k, f"mode {k + 1}, eps = {eps[e]:g}")
            if n == 0:
                style = {**style, "linewidth": 1.0, "alpha": 0.6}
            ax_u.plot(s, u[e, :, k], **style)
        # thin black on top: at the largest eps the LV curve lies on the limit
        ax_u.plot(s, limit_u[:, k], **{**curve("limit", _BLACK, f"mode {k + 1}"), "linewidth": 1.1, "zorder": 5})
    setup_axes(ax_u, _S_LABEL, axis_label("u_k = ln(m_k) / eps", "1"), title="occupations, log scale / eps")
    ax_u.set_ylim(-1.25, 0.15)
    ax_u.set_xlim(0.0, s[-1])
    mode_handles = [Line2D([], [], color=PALETTE[k], linewidth=2.5, label=f"mode {k + 1}") for k in range(modes)]
    ax_u.legend(
        handles=mode_handles
        + [
            Line2D([], [], **{**curve("LV", _BLACK, f"eps = {eps[shown[0]]:g}"), "linewidth": 1.0, "alpha": 0.6}),
            Line2D([], [], **curve("LV", _BLACK, f"eps = {eps[shown[1]]:g}")),
            Line2D([], [], **curve("limit", _BLACK, "vanishing init")),
        ],
        fontsize=7.5,
        loc="lower right",
        ncol=2,
    )
    loss = _arr(data["comp_loss"])
    for e in range(eps.size):
        ax_loss.plot(s, loss[e], **curve("LV", _colour(e), f"eps = {eps[e]:g}"))
    ax_loss.plot(
        s, _arr(data["comp_limit_loss"]), **{**curve("limit", _BLACK, "vanishing init"), "linewidth": 2.2, "zorder": 5}
    )
    for s_event, j, kind in data["comp_events"]:
        if kind == "off":
            ax_loss.annotate(
                f"mode {j + 1} pushed out",
                xy=(s_event, float(np.interp(s_event, s, _arr(data["comp_limit_loss"])))),
                xytext=(8, 18),
                textcoords="offset points",
                fontsize=8,
                arrowprops={"arrowstyle": "->", "linewidth": 0.8},
            )
    setup_axes(ax_loss, _S_LABEL, axis_label("loss", "1"), title="loss")
    ax_loss.set_xlim(0.0, s[-1])
    ax_loss.legend(fontsize=7.5, loc="upper right")
    caption = (
        "Competition in the singular limit (constructed LV, five modes): left, u_k = ln(m_k)/eps against s for the "
        "smallest and largest eps, approaching the piecewise-linear limit (mode 5 climbs, then falls once mode 1 is "
        "on, never switching on; mode 2 switches on and is pushed out when mode 3 arrives). Right: the loss for "
        "every eps approaches the limit's step function."
    )
    return save_figure(fig, figure_dir, "E3_competition", caption)


def plot(result, figure_dir) -> list[SavedFigure]:
    figure_dir = Path(figure_dir)
    data = result.data
    return [
        _staircase_figure(data, figure_dir),
        _convergence_figure(data, figure_dir),
        _competition_figure(data, figure_dir),
    ]
