"""Figures of E1 (staircase): loss curves, mode occupations and switch-on steps by source.

``plot(result, figure_dir)`` reads ``result.data`` as written by
``nqf_paper.e1_staircase.summarise``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nqf.report.style import SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes
from nqf_paper.figures import GREY as _GREY
from nqf_paper.figures import deviation_axes, deviation_band, model_losses, steps_from_first_switch, switch_by_source

# source of each switch-on series: (curve source, colour index, legend detail, marker)
_SWITCH_SERIES = {
    "M-flow": ("M-flow", 2, "", "D"),
    "LV": ("LV", 3, "discrete map", "v"),
    "LV (gradient flow)": ("LV", 5, "gradient flow", "^"),
    "singular limit": ("limit", 6, "singular", "x"),
    "quadratic model": ("quadratic model", 1, "", "s"),
    "network": ("network", 0, "tanh, m*/2", "o"),
    "network (own threshold)": ("network", 4, "tanh, own final/2", "P"),
}


# E1_loss's y axis: from this many decades below the smallest plateau's decade up to 2 L(0)
LOSS_DECADES = 2
_RESOLVED = 1e-10  # plateaus below this fraction of L(0) are rounding (the last one is zero)


def _loss_floor(plateaus: np.ndarray, start: float) -> tuple[float, np.ndarray]:
    """The loss axis's lower end, :data:`LOSS_DECADES` decades below the decade of the smallest resolved
    plateau, and those plateaus (positive, above ``start * 1e-10``: the last plateau is zero, its stored
    value float64 rounding of either sign, and the curves' own final decay ends at rounding too)."""
    resolved = plateaus[np.isfinite(plateaus) & (plateaus > start * _RESOLVED)]
    smallest = float(resolved.min()) if resolved.size else start
    return 10.0 ** (np.floor(np.log10(smallest)) - LOSS_DECADES), resolved


def _loss_figure(data, figure_dir: Path) -> SavedFigure:
    steps = np.asarray(data["steps"], dtype=float)
    loss = {k: np.asarray(v, dtype=float) for k, v in data["loss"].items()}
    switch = np.asarray(data["switch"]["M-flow"], dtype=float)
    plateaus = np.asarray(data["lv_plateaus"], dtype=float)
    fig, ax = new_figure(size=(7.5, 5.4))  # one panel column (the report sizes figures by inches)
    t = steps[1:]  # step 0 has no place on a log axis
    model_losses(ax, t, loss)
    start = float(loss["mflow"][0])
    floor, levels = _loss_floor(plateaus, start)
    ax.hlines(
        np.concatenate([[start], levels]),
        t[0],
        t[-1],
        colors=_GREY,
        linewidth=0.8,
        linestyles=(0, (1, 3)),
        label="LV plateau losses",
        zorder=0,
    )
    finite = switch[np.isfinite(switch)]
    ax.vlines(
        finite,
        floor,
        start * 2.0,
        colors="black",
        linewidth=0.9,
        linestyles=(0, (4, 3)),
        label="M-flow switch-on steps",
    )
    for k, s in enumerate(switch):
        if np.isfinite(s):
            ax.annotate(
                f"mode {k + 1}",
                (s, floor * 1.3),
                xytext=(-2, 0),
                textcoords="offset points",
                rotation=90,
                fontsize=8,
                ha="right",
                va="bottom",
            )
    setup_axes(ax, axis_label("training step", "steps"), axis_label("loss", "1"), xscale="log", yscale="log")
    steps_from_first_switch(ax, finite, t[-1])
    ax.set_ylim(floor, start * 2.0)
    # below the axes: inside, every corner holds a curve (the initial plateau, the final decay)
    fig.legend(loc="outside lower center", ncols=3, fontsize=9)
    return save_figure(
        fig,
        figure_dir,
        "E1_loss",
        f"Loss versus training step (log-log) on the staircase, sigma0 = {data['sigma0']:g}, GD lr {data['lr']:g}: "
        "tanh "
        "network, its quadratic model, the M-flow (exact GD map on M; it lies on the quadratic model) and the LV "
        "discrete map. Dashed verticals: the M-flow's switch-on steps (m_k reaches m_k*/2); dotted horizontals: the "
        "LV plateau losses.",
    )


def _occupation_figure(data, figure_dir: Path) -> SavedFigure:
    steps = np.asarray(data["steps"], dtype=float)
    m_star = np.asarray(data["fixed_point"], dtype=float)
    occ = {k: np.asarray(v, dtype=float) / m_star for k, v in data["occupations"].items()}
    fig, axes = new_figure(1, 2, size=(11.0, 4.2))
    for ax, (model, source, detail, title) in zip(
        axes,
        (
            ("network", "network", "tanh", "tanh network (solid)"),
            ("quadratic", "quadratic model", "", "quadratic model (dashed)"),
        ),
        strict=True,
    ):
        for k in range(m_star.size):
            ax.plot(steps, occ[model][:, k], **curve(source, k, f"{detail + ', ' if detail else ''}mode {k + 1}"))
            ax.plot(steps, occ["mflow"][:, k], **{**curve("M-flow", k, f"mode {k + 1}"), "linewidth": 1.4})
        ax.axhline(0.5, color="black", linewidth=0.8, linestyle=(0, (4, 3)), label="threshold m*/2")
        setup_axes(
            ax,
            axis_label("training step", "steps"),
            axis_label("occupation m_k / m_k*", "1"),
            yscale="log",
            title=f"{title} and M-flow (dotted)",
        )
        ax.set_xlim(0, steps[-1])
        ax.set_ylim(bottom=max(np.nanmin(occ["mflow"]) / 3.0, 1e-16), top=3.0)
        ax.legend(loc="lower right", fontsize=7, ncol=2)
    return save_figure(
        fig,
        figure_dir,
        "E1_occupations",
        "Occupation of each mode, m_k = q_k^T W W^T q_k, relative to the LV fixed point m_k*, versus step (log "
        "scale: near M = 0 the growth is geometric, a straight line). Left: tanh network; right: quadratic model; "
        "dotted: the M-flow. A mode switches on when it crosses 1/2; the tanh network settles above 1.",
    )


def _switch_figure(data, figure_dir: Path) -> SavedFigure:
    switch = {k: np.asarray(v, dtype=float) for k, v in data["switch"].items()}
    mflow = switch["M-flow"]
    modes = mflow.size
    x = np.arange(1, modes + 1, dtype=float)
    tolerance = float(data["switch_tolerance"])
    fig, axes = new_figure(1, 2, size=(11.0, 5.4))
    ax = axes[0]
    switch_by_source(ax, x, switch, _SWITCH_SERIES, 0.27)

    ax = axes[1]
    deviation_band(ax, tolerance)
    seeds = list(data["data_seeds"])
    handles = [ax.get_lines()[-1]]
    others = f"data seeds {', '.join(str(v) for v in seeds[1:])}"
    for j, seed in enumerate(seeds):
        dev = 100.0 * np.asarray(data["deviation"][str(seed)], dtype=float)
        dev_own = 100.0 * np.asarray(data["deviation_own"][str(seed)], dtype=float)
        shift = 0.06 * (j - (len(seeds) - 1) / 2)
        first = j == 0
        which = "" if len(seeds) == 1 else (f", data seed {seed}" if first else f", {others}")
        style = curve("network", 0, f"tanh, m*/2{which}")
        style_own = curve("network", 4, f"tanh, own final/2{which}")
        if not first:  # later seeds: thin lines, small open markers, one legend entry for all of them
            style["linewidth"] = style_own["linewidth"] = 0.8
        (line,) = ax.plot(
            x - 0.08 + shift,
            dev,
            marker="o",
            markersize=6 if first else 4,
            markerfacecolor=style["color"] if first else "white",
            **style,
        )
        (line_own,) = ax.plot(
            x + 0.08 + shift,
            dev_own,
            marker="P",
            markersize=6 if first else 4,
            markerfacecolor=style_own["color"] if first else "white",
            **style_own,
        )
        if j <= 1:
            handles += [line, line_own]
    lv = 100.0 * (switch["LV"] - mflow) / mflow
    quad = 100.0 * (switch["quadratic model"] - mflow) / mflow
    handles += ax.plot(x, lv, **{**curve("LV", 3, "discrete map"), "marker": "v"})
    handles += ax.plot(x, quad, **{**curve("quadratic model", 1), "marker": "s", "markerfacecolor": "white"})
    claimed = int(data["claimed_network_modes"])
    if claimed < modes:
        handles.append(
            ax.axvline(claimed + 0.5, color=_GREY, linewidth=0.8, linestyle=":", label=f"claims: modes 1-{claimed}")
        )
    deviation_axes(ax, x, tolerance)
    # below both panels: the per-seed entries would cover the curves inside the axes
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=7.5)
    return save_figure(
        fig,
        figure_dir,
        "E1_switch_steps",
        "Left: switch-on step of each mode by source (threshold m_k*/2 unless noted; 'own final/2': the tanh "
        "network timed at half of its own final occupation). Right: deviation from the M-flow's step in percent; "
        f"grey band: the ±{tolerance:.0%} tolerance of the claims (tanh network, modes 1-{claimed}, first data seed).",
    )


def plot(result, figure_dir) -> list[SavedFigure]:
    data = result.data
    figure_dir = Path(figure_dir)
    return [_loss_figure(data, figure_dir), _occupation_figure(data, figure_dir), _switch_figure(data, figure_dir)]
