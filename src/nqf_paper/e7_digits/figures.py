"""Figures of E7 (real data: digits): loss curves, the data's spectra, switch-on steps by source.

``plot(result, figure_dir)`` reads ``result.data`` as written by
``nqf_paper.e7_digits.summarise``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import FixedLocator, NullFormatter, StrMethodFormatter

from nqf.report.style import PALETTE, SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes
from nqf_paper.figures import GREY as _GREY
from nqf_paper.figures import deviation_axes, deviation_band, model_losses, steps_from_first_switch, switch_by_source

# source of each switch-on series: (curve source, colour index, legend detail, marker)
_SWITCH_SERIES = {
    "M-flow": ("M-flow", 2, "", "D"),
    "quadratic model": ("quadratic model", 1, "", "s"),
    "LV": ("LV", 3, "discrete map", "v"),
    "singular limit": ("limit", 6, "singular", "x"),
    "network": ("network", 0, "tanh", "o"),
}


def _loss_figure(data, figure_dir: Path) -> SavedFigure:
    steps = np.asarray(data["steps"], dtype=float)
    loss = {k: np.asarray(v, dtype=float) for k, v in data["loss"].items()}
    switch = np.asarray(data["switch"]["M-flow"], dtype=float)
    fig, (ax, gap_ax) = new_figure(1, 2, size=(12.0, 4.6))
    t = steps[1:]  # step 0 has no place on a log axis
    model_losses(ax, t, loss)
    finite = switch[np.isfinite(switch)]
    everything = np.concatenate([v[np.isfinite(v)] for v in loss.values()])
    top, low = float(everything.max()) * 1.25, float(everything.min()) / 1.6
    ax.vlines(finite, low, top, colors="black", linewidth=0.8, linestyles=(0, (4, 3)), label="M-flow switch-on steps")
    # mode numbers at the top, alternating two heights so that neighbouring steps stay readable
    for k, s in enumerate(switch):
        if np.isfinite(s):
            ax.annotate(
                f"{k + 1}",
                (s, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, 2 + 8 * (k % 2)),
                textcoords="offset points",
                fontsize=7,
                ha="center",
                va="bottom",
            )
    setup_axes(ax, axis_label("training step", "steps"), axis_label("loss", "1"), xscale="log", yscale="log")
    ax.set_title(
        f"digits (N = {data['samples']}): loss; mode numbers at the M-flow's switch-on steps", fontsize=10, pad=20
    )
    steps_from_first_switch(ax, finite, t[-1])
    ax.set_ylim(low, top)
    # the loss spans about a decade: plain numbers at 1, 1.5, 2, 3, 5, 7 x 10^k
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(top))) + 1)
    yticks = [m * 10.0**e for e in decades for m in (1, 1.5, 2, 3, 5, 7) if low <= m * 10.0**e <= top]
    ax.yaxis.set_major_locator(FixedLocator(yticks))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:.2g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.legend(loc="lower left", fontsize=8)

    gap = np.asarray(data["loss_gap"], dtype=float)
    shown = np.where(gap > 0, gap, np.nan)  # exact agreement (the first steps) has no place on a log axis
    gap_ax.plot(steps, shown, **curve("quadratic model", 1, "vs M-flow"))
    bound = float(data["loss_agreement"])
    gap_ax.axhline(bound, color="black", linestyle="--", linewidth=1.0, label=f"claim bound {bound:g}")
    setup_axes(
        gap_ax,
        axis_label("training step", "steps"),
        axis_label("|L_quad - L_flow| / L_flow", "1"),
        yscale="log",
        title="quadratic model against the M-flow",
    )
    gap_ax.set_xlim(0, steps[-1])
    finite_gap = shown[np.isfinite(shown)]
    gap_ax.set_ylim(min(finite_gap.min() / 10.0, bound / 1e6) if finite_gap.size else bound / 1e8, bound * 100.0)
    gap_ax.legend(loc="upper right", fontsize=8)
    return save_figure(
        fig,
        figure_dir,
        "E7_loss",
        f"Digits, sigma0 = {data['sigma0']:g}, GD lr {data['lr']:g}. Left: loss versus training step (log-log) of the "
        "tanh network, its quadratic model, the M-flow (exact GD map on M; it lies on the quadratic model) and the LV "
        "discrete map (an approximation here: the data matrices do not share an eigenbasis). Dashed verticals: the "
        "M-flow's switch-on steps (m_k reaches m_k*/2), numbered by mode. Right: relative gap between the quadratic "
        "model's loss and the M-flow's at every step (exact zeros left out), with the claim's bound.",
    )


def _spectrum_figure(data, figure_dir: Path) -> SavedFigure:
    c_all = np.asarray(data["c_spectrum"], dtype=float)
    growth = np.asarray(data["growth"], dtype=float)
    k_diag = np.asarray(data["interactions_diagonal"], dtype=float)
    m_star = np.asarray(data["fixed_point"], dtype=float)
    inputs = np.asarray(data["input_spectrum"], dtype=float)
    fig, axes = new_figure(1, 3, size=(15.0, 4.4))

    ax = axes[0]
    scale = np.abs(c_all).max()
    index = np.arange(1, c_all.size + 1)
    positive = c_all > 1e-8 * scale
    negative = c_all < -1e-8 * scale
    null = ~(positive | negative)
    points = {"linestyle": "none"}
    ax.plot(index[positive], c_all[positive], **{**curve("data", 0, "c_k > 0, growing modes"), **points}, marker="o")
    ax.plot(index[negative], c_all[negative], **{**curve("data", 3, "c_k < 0, decaying"), **points}, marker="v")
    null_label = f"c_k = 0 ({int(null.sum())} of {c_all.size})"
    ax.plot(index[null], c_all[null], **{**curve("data", 6, null_label), **points}, marker=".", markersize=3)
    ax.axhline(0.0, color=_GREY, linewidth=0.6, label="zero")
    setup_axes(
        ax,
        axis_label("eigenvalue index (sorted)", "1"),
        axis_label("eigenvalue of C = E[y A(x)]", "1"),
        title="spectrum of C (d = 74)",
    )
    ax.legend(loc="upper right", fontsize=8)

    ax = axes[1]
    modes = np.arange(1, growth.size + 1)
    width = 0.27
    ax.bar(modes - width, growth, width=width, color=PALETTE[0], label="c_k (growth)")
    ax.bar(modes, k_diag, width=width, color=PALETTE[1], label="K_kk (self-interaction)")
    ax.bar(modes + width, m_star, width=width, color=PALETTE[2], label="m_k* (LV fixed point)")
    setup_axes(ax, axis_label("mode k", "1"), axis_label("value", "1"), title="growing modes: LV coefficients")
    ax.set_xticks(modes)
    ax.legend(loc="upper right", fontsize=8)

    ax = axes[2]
    positive_inputs = inputs > 1e-10 * inputs.max()
    zero_inputs = int((~positive_inputs).sum())
    ax.plot(
        np.arange(1, inputs.size + 1)[positive_inputs],
        inputs[positive_inputs],
        **{**curve("data", 0, "eigenvalues of E[x x^T]"), "linestyle": "none"},
        marker="o",
        markersize=3.5,
    )
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.0, label="whitened inputs (all 1)")
    setup_axes(
        ax,
        axis_label("eigenvalue index (sorted)", "1"),
        axis_label("eigenvalue of E[x x^T]", "1"),
        yscale="log",
        title=f"inputs: ||E[xx^T] - I|| / ||I|| = {float(data['whitening_defect']):.3g}",
    )
    ax.set_xlim(0, inputs.size + 1)
    ax.legend(loc="upper right", fontsize=8)
    return save_figure(
        fig,
        figure_dir,
        "E7_spectrum",
        f"The digits data seen by the theory (N = {data['samples']}). Left: all eigenvalues of C = E[y A(x)] for the "
        "tanh perceptron; the growing modes are its positive eigenvalues c_k. Middle: per growing mode, c_k, the "
        "LV self-interaction K_kk and the LV fixed point m_k*. Right: eigenvalues of the input second moment "
        f"(standardised pixels; {zero_inputs} exact zeros, constant pixels, left out of the log axis): far from "
        "whitened, "
        f"so C and K[.] do not share an eigenbasis (defect {float(data['defect']):.3g}).",
    )


def _switch_figure(data, figure_dir: Path) -> SavedFigure:
    switch = {k: np.asarray(v, dtype=float) for k, v in data["switch"].items()}
    mflow = switch["M-flow"]
    modes = mflow.size
    x = np.arange(1, modes + 1, dtype=float)
    tolerance = float(data["switch_tolerance"])
    fig, axes = new_figure(1, 2, size=(12.0, 5.4))
    ax = axes[0]
    switch_by_source(ax, x, switch, _SWITCH_SERIES, 0.25, hollow=("quadratic model",))

    ax = axes[1]
    deviation_band(ax, tolerance)
    seeds = [str(s) for s in data["seeds"]]
    for j, seed in enumerate(seeds):
        err = 100.0 * np.asarray(data["error"]["network"][seed], dtype=float)
        first = j == 0
        detail = "tanh" if len(seeds) == 1 else f"tanh, init seed {seed}"
        style = curve("network", 0 if first else 4 + j, detail)
        if not first:
            style["linewidth"] = 0.9
        ax.plot(
            x - 0.06 + 0.04 * j,
            err,
            marker="o",
            markersize=6 if first else 4,
            markerfacecolor=style["color"] if first else "white",
            **style,
        )
    lv = 100.0 * np.asarray(data["error"]["LV"], dtype=float)
    quad = 100.0 * np.asarray(data["error"]["quadratic"], dtype=float)
    ax.plot(x + 0.06, lv, **{**curve("LV", 3, "discrete map"), "marker": "v"})
    ax.plot(x, quad, **{**curve("quadratic model", 1), "marker": "s", "markerfacecolor": "white"})
    claimed = int(data["claimed_network_modes"])
    if claimed < modes:
        ax.axvline(claimed + 0.5, color=_GREY, linewidth=0.8, linestyle=":", label=f"network claims: modes 1-{claimed}")
    deviation_axes(ax, x, tolerance)
    ax.legend(loc="lower left", fontsize=7.5)
    return save_figure(
        fig,
        figure_dir,
        "E7_switch_steps",
        "Digits. Left: switch-on step of each mode by source (first step with m_k >= m_k*/2, half the LV fixed "
        "point; the singular limit is the vanishing-init asymptote of LV). Right: deviation from the "
        f"M-flow's step in percent; grey band: the ±{tolerance:.0%} tolerance of the claims (tanh network, modes "
        f"1-{claimed}, first init seed; LV discrete map, every mode).",
    )


def plot(result, figure_dir) -> list[SavedFigure]:
    data = result.data
    figure_dir = Path(figure_dir)
    return [_loss_figure(data, figure_dir), _spectrum_figure(data, figure_dir), _switch_figure(data, figure_dir)]
