"""Figures of E5 (architectures): structure matrices, loss curves, attention's parameter blocks,
the experts' slowdown and convolution's frequency order.

``plot(result, figure_dir)`` reads ``result.data`` as written by
``nqf_paper.e5_architectures.summarise``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D

from nqf.report.style import PALETTE, SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes

_SOURCE_STYLE = {"network": ("network", 0), "quadratic": ("quadratic model", 1), "mflow": ("M-flow", 6)}
_BLOCK_COLOUR = {"W_Q": 0, "W_K": 5, "W_V": 1, "W_O": 3}
_SWITCH_COLOUR = PALETTE[4]


def _floats(value) -> np.ndarray:
    def clean(v):
        if v is None:
            return math.nan
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return np.array(clean(value), dtype=np.float64)


def _ordered(cases: dict) -> list[str]:
    """Cases in the table's order, the mixtures of experts by E."""
    order = ("perceptron", "fixed-readout", "attention", "linear-attention", "conv", "moe")
    names = list(cases)
    return sorted(names, key=lambda n: (order.index(cases[n]["case"]), cases[n]["width"]))


def _structure_figure(cases: dict, figure_dir: Path) -> SavedFigure:
    names: list[str] = []
    for name in _ordered(cases):
        if cases[name]["case"] == "moe" and any(cases[n]["case"] == "moe" for n in names):
            continue  # one mixture of experts is enough: A differs across E only by the factor 1/E
        names.append(name)
    ncols = 3
    nrows = int(math.ceil(len(names) / ncols))
    fig, axes = new_figure(nrows, ncols, size=(5.0 * ncols, 4.6 * nrows))
    axes = np.atleast_1d(axes).ravel()
    # strict=False: the grid can have more panels than names; the spare ones stay empty
    for ax, name in zip(axes, names, strict=False):
        case = cases[name]
        A = _floats(case["structure_abs"])
        d = A.shape[0]
        # no colorbar (its axes would need labels of its own): white is 0, black the panel's maximum, in the title
        ax.imshow(A, cmap="Greys", vmin=0.0, interpolation="nearest", extent=(-0.5, d - 0.5, d - 0.5, -0.5))
        blocks = case["blocks"]
        centres = [0.5 * (start + stop) - 0.5 for _, start, stop in blocks]
        labels = [block for block, _, _ in blocks]
        bounds = [start - 0.5 for _, start, _ in blocks[1:]]
        setup_axes(
            ax,
            axis_label("parameter of one unit, by block", "1"),
            axis_label("parameter of one unit, by block", "1"),
            title=f"{case['label']}\n{case['arch']}, d = {d}"
            + (f", output 1 of {case['outputs']}" if case["outputs"] > 1 else "")
            + f", max |A| = {A.max():.2g}",
        )
        ax.set_xticks(centres, labels, rotation=0)
        ax.set_yticks(centres, labels, rotation=90, va="center")
        ax.set_xticks(bounds, minor=True)
        ax.set_yticks(bounds, minor=True)
        ax.tick_params(which="minor", length=0)
        ax.grid(False, which="major")
        ax.grid(True, which="minor", color=PALETTE[1], linewidth=1.2, alpha=0.9)
        ax.set_xlim(-0.5, d - 0.5)
        ax.set_ylim(d - 0.5, -0.5)
    for ax in axes[len(names) :]:
        ax.axis("off")
    return save_figure(
        fig,
        figure_dir,
        "E5_structure",
        "Structure matrix |A_1(x)| (first output) of each architecture for the first sample x of its task, "
        "by autodiff at w = 0, white 0 and black the panel's maximum (in its title); orange lines separate the unit's "
        "parameter blocks. Perceptron: a-v coupling "
        "(sigma'(0)/2) x; fixed readout: x x^T/2; softmax attention: only W_V x W_O (the mean token; the W_Q and W_K "
        "blocks are exactly zero); linear attention: w_OV x W_KQ; mixture of experts: a-v as the perceptron divided "
        "by E, gate block u zero; convolution: readout a x kernel k, the circular Hankel patch matrix.",
    )


def _positive(steps, loss):
    steps, loss = _floats(steps), _floats(loss)
    keep = (steps > 0) & np.isfinite(loss) & (loss > 0)
    return steps[keep], loss[keep]


def _loss_figure(cases: dict, figure_dir: Path) -> SavedFigure:
    names = _ordered(cases)
    ncols = 4
    nrows = int(math.ceil(len(names) / ncols))
    fig, axes = new_figure(nrows, ncols, size=(4.4 * ncols, 3.6 * nrows + 0.6))
    axes = np.atleast_1d(axes).ravel()
    # strict=False: the grid can have more panels than names; the spare ones stay empty
    for ax, name in zip(axes, names, strict=False):
        case = cases[name]
        initial = float(_floats(case["loss"]["network"])[0])
        floor = initial
        for source in ("network", "quadratic", "mflow"):
            label, colour = _SOURCE_STYLE[source]
            steps, loss = _positive(case["steps"][source], case["loss"][source])
            style = curve(label, colour)
            if source == "mflow":
                style["zorder"] = 3
            ax.plot(steps, loss, **style)
            if loss.size:
                floor = min(floor, float(loss.min()))
        bottom = max(floor, 1e-6 * initial) / 1.5
        predicted = _floats(case["switch"]["mflow"])
        predicted = predicted[np.isfinite(predicted)]
        ax.vlines(
            predicted,
            0,
            1,
            transform=ax.get_xaxis_transform(),
            colors=_SWITCH_COLOUR,
            linestyles=(0, (2, 2)),
            linewidth=1.0,
            label="predicted switch-on (M-flow)",
        )
        measured = _floats(case["switch"]["network"])
        steps, loss = _floats(case["steps"]["network"]), _floats(case["loss"]["network"])
        ok = np.isfinite(measured)
        ax.plot(
            measured[ok],
            np.interp(measured[ok], steps, loss),
            linestyle="none",
            marker="v",
            markersize=6,
            color=PALETTE[0],
            label="network switch-on",
        )
        setup_axes(ax, axis_label("training step", "steps"), axis_label("loss", "1"), yscale="log", title=case["label"])
        ax.set_ylim(bottom=bottom, top=initial * 1.6)
        ax.set_xlim(0, float(steps[-1]))
    for ax in axes[len(names) :]:
        ax.axis("off")
    handles = [
        Line2D([], [], **curve("network", 0)),
        Line2D([], [], **curve("quadratic model", 1)),
        Line2D([], [], **curve("M-flow", 6)),
        Line2D(
            [], [], color=_SWITCH_COLOUR, linestyle=(0, (2, 2)), linewidth=1.0, label="predicted switch-on (M-flow)"
        ),
        Line2D([], [], color=PALETTE[0], linestyle="none", marker="v", label="network switch-on"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return save_figure(
        fig,
        figure_dir,
        "E5_loss",
        "Loss curves (GD) of the network (solid), its quadratic model (dashed) and the M-flow (dotted) for each "
        "architecture, with the M-flow's switch-on step of every mode group (vertical dashes) and the network's "
        "(triangles). Curves below 1e-6 of the initial loss are cut off.",
    )


def _attention_figure(case: dict, info: dict, figure_dir: Path) -> SavedFigure:
    fig, ax = new_figure(size=(7.5, 4.4))
    steps = _floats(case["steps"]["network"])
    norms = _floats(case["block_norms"])
    for j, name in enumerate(case["block_names"]):
        ratio = norms[:, j] / norms[0, j]
        ax.plot(steps, ratio, **curve("network", _BLOCK_COLOUR.get(name, j), f"||{name}||"))
    t1, t_last = float(info["t1"]), float(info["t_last"])
    if math.isfinite(t1):
        ax.axvline(t1, color="black", linestyle="--", linewidth=1.0, label=f"end of first plateau (t_1 = {t1:.0f})")
    if math.isfinite(t_last) and t_last != t1:
        ax.axvline(t_last, color="black", linestyle=":", linewidth=1.2, label=f"last switch-on ({t_last:.0f})")
    ax.axhline(2.0, color=PALETTE[3], linestyle="-.", linewidth=1.0, label="factor 2 (claim bound for W_Q, W_K)")
    setup_axes(
        ax,
        axis_label("training step", "steps"),
        axis_label("||W(t)|| / ||W(0)||, per block", "1"),
        yscale="log",
        title="softmax attention: parameter blocks of the heads",
    )
    ax.legend(fontsize=8, loc="center right")
    return save_figure(
        fig,
        figure_dir,
        "E5_attention_blocks",
        "Softmax attention on the tokens task (GD): Frobenius norm of each parameter block over all heads, relative "
        "to its init. W_V and W_O grow by orders of magnitude at the switch-ons while W_Q and W_K stay near their "
        "init through the first plateau (their gradient needs V and O to be of order one).",
    )


def _moe_figure(info: dict, figure_dir: Path) -> SavedFigure:
    fig, ax = new_figure(size=(6.4, 4.4))
    experts = _floats(info["experts"])
    t_net, t_flow = _floats(info["t_network"]), _floats(info["t_mflow"])
    ax.plot(experts, t_flow, marker="s", markerfacecolor="white", **curve("M-flow", 6))
    ax.plot(experts, t_net, marker="o", **curve("network", 0))
    if np.isfinite(t_flow[0]):
        es = np.linspace(experts.min(), experts.max(), 50)
        ax.plot(es, t_flow[0] * es / experts[0], **curve("limit", 3, "∝ E, continuous time"))
    setup_axes(
        ax,
        axis_label("number of experts E (= width)", "1"),
        axis_label("switch-on step of mode 1", "steps"),
        title="mixture of experts: c_1 = s_1/(2E)",
    )
    ax.set_xticks(experts, [f"{e:g}" for e in experts])
    ax.legend(fontsize=8)
    return save_figure(
        fig,
        figure_dir,
        "E5_moe",
        "Mixture of experts on the staircase: switch-on step of mode 1 versus the number of experts (width = E), "
        "M-flow and network, with the line proportional to E through the M-flow at the smallest E (the "
        "continuous-time limit of A = (1/E) x the expert's A; the discrete GD map escapes by ln(1 + 2 lr c_1) per "
        "step and the final approach to the threshold depends less on E, so the steps grow more slowly than E).",
    )


def _conv_figure(case: dict, info: dict, figure_dir: Path) -> SavedFigure:
    fig, ax = new_figure(size=(6.8, 4.4))
    freq = np.asarray(info["frequencies"], dtype=float)
    power = _floats(info["power"])
    for source, marker in (("mflow", "s"), ("network", "o")):
        label, colour = _SOURCE_STYLE[source]
        switch = _floats(case["switch"][source])
        order = np.argsort(freq)
        style = curve(label, colour)
        face = "white" if source == "mflow" else style["color"]
        ax.plot(freq[order], switch[order], marker=marker, markerfacecolor=face, **style)
    setup_axes(
        ax,
        axis_label("frequency |f| (input power P(|f|) below)", "1"),
        axis_label("switch-on step", "steps"),
        title="circular convolution: Fourier modes switch on by power",
    )
    ticks = np.sort(freq)
    ax.set_xticks(ticks, [f"{int(f)}\n{power[list(freq).index(f)]:.2g}" for f in ticks])
    ax.legend(fontsize=8)
    return save_figure(
        fig,
        figure_dir,
        "E5_conv",
        "Circular convolution (kernel spanning the signal, per-position readout) on stationary inputs with power "
        "P(|f|) = (1 + |f|)^-alpha, target x_0: switch-on step of each frequency group (cos/sin pair) for the "
        "M-flow and the network; the order follows the power.",
    )


def plot(result, figure_dir: Path) -> list[SavedFigure]:
    data = result.data
    cases = data["cases"]
    specifics = data.get("specifics", {})
    figures = [_structure_figure(cases, figure_dir), _loss_figure(cases, figure_dir)]
    for case in cases.values():
        if case["case"] == "attention" and "attention" in specifics:
            figures.append(_attention_figure(case, specifics["attention"], figure_dir))
        if case["case"] == "conv" and "conv" in specifics:
            figures.append(_conv_figure(case, specifics["conv"], figure_dir))
    if "moe" in specifics:
        figures.append(_moe_figure(specifics["moe"], figure_dir))
    return figures
