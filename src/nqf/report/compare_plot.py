"""The figure of ``nqf compare``: every source's loss curve on one log-time axis.

Network per optimizer (solid; a band for the spread over seeds), the quadratic model
(dashed), the M-flow of each optimizer (dotted) and the Lotka-Volterra map (dash-dot),
first seed, with the predicted switch-on steps (GD M-flow, and the momentum / SGD
M-flow when compared) as short ticks along the top edge, a row per flow (up to a few
modes also as thin dotted lines), GD's mode numbers above the axes (thinned where they
would collide). Colour = optimizer, line style = source (``nqf.report.style``). A leaf:
the numerical core never imports this.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nqf.comparison.compare import Comparison
from nqf.core.measure import group_label
from nqf.optimizers import OPTIMIZER_RECORDS, REFERENCE_FLOW, own_record

from .panels import LINED_MODES, decade_before, headroom_top, mode_numbers, on_log_axes, switch_rugs, unique_legend
from .style import PALETTE, axis_label, curve, figure_format, new_figure, plain_text, setup_axes, write_figure


def _record(optimizer: str):
    """The optimizer's record; a user's own optax transformation (``custom``, ``custom2``, ...) its own."""
    return OPTIMIZER_RECORDS[optimizer] if optimizer in OPTIMIZER_RECORDS else own_record(None, optimizer)


def _colour(optimizer: str) -> int:
    """The optimizer's colour index (its record's, fixed so that figures of different runs agree)."""
    return _record(optimizer).colour


def _label(optimizer: str) -> str:
    return _record(optimizer).label


def plot_comparison(comparison: Comparison, path, overlay=None) -> Path:
    """Write the comparison figure to ``path`` (PNG, or PDF when it ends in .pdf); returns the path.

    ``overlay``: an ``nqf.comparison.curves.OverlayComparison``, drawn as a measured curve (solid black) with
    its switch-on steps and the M-flow's by the loss convention as markers.
    """
    figure_format(path)
    fig, ax = new_figure(size=(10.0, 5.0))
    lowest_network, highest = _draw_loss_curves(ax, comparison)

    if overlay is not None:
        from .predict_plot import draw_overlay

        lowest_network = min(lowest_network, draw_overlay(ax, overlay))

    reserved, ticks = _draw_switch_steps(ax, comparison)
    cfg = comparison.config
    title = (
        f"{plain_text(comparison.task_name)} / {plain_text(comparison.arch.name)}: n = {cfg.width}, "
        f"sigma0 = {cfg.sigma0:g}, "
        f"lr = {cfg.lr:g}, seed {cfg.seed}"
    )
    setup_axes(ax, axis_label("training step", "1"), axis_label("loss", "1"), xscale="log", yscale="log")
    ax.set_title(title, fontsize=9, pad=14)
    _set_limits(ax, comparison, lowest_network, highest, overlay, reserved)
    # outside the axes, at the right (constrained layout makes room)
    handles, labels = unique_legend(ax, ticks)
    fig.legend(handles, labels, loc="outside right upper", fontsize=8, framealpha=0.9)
    gd = comparison.predictions.get(REFERENCE_FLOW)
    if gd:
        labels = [group_label(group) for group in comparison.mode_groups]  # per degenerate group where c_k coincide
        # the GD M-flow's steps of the first seed, per group: what the comparison read off gd[0]
        mode_numbers(ax, comparison.predicted["mflow"][0], PALETTE[_colour(REFERENCE_FLOW)], labels=labels)
    return write_figure(fig, path)


def _draw_loss_curves(ax, comparison: Comparison) -> tuple[float, float]:
    """Every source's loss curve (a band for the network's spread over seeds); returns the lowest
    positive network loss (inf if none) and the highest loss drawn."""
    lowest_network, highest = np.inf, 0.0
    for entry in comparison.loss_curves():
        opt = entry["optimizer"]
        detail = _label(opt)
        lr = comparison.config.lr_for(opt) if entry["source"] == "network" else comparison.config.flow_lr(opt)
        if lr != comparison.config.lr:
            detail += f", lr {lr:g}"
        style = curve(entry["source"], _colour(opt), detail)
        if entry["source"] == "M-flow" or entry["source"] == "LV":
            style["zorder"] = 3  # predictions on top of the measured curves they should cover
        steps, loss = on_log_axes(entry["steps"], entry["loss"], positive=False)
        if "band" in entry:
            lo, hi = (np.asarray(b, dtype=np.float64) for b in entry["band"])
            keep = np.asarray(entry["steps"]) > 0
            ax.fill_between(
                np.asarray(entry["steps"], dtype=np.float64)[keep],
                lo[keep],
                hi[keep],
                color=style["color"],
                alpha=0.18,
                linewidth=0,
                label=f"network ({detail}), min-max over {len(comparison.seeds)} seeds",
            )
        ax.plot(steps, loss, **style)
        highest = max(highest, float(loss.max(initial=0.0)))
        positive = loss[loss > 0]
        if entry["source"] == "network" and positive.size:
            lowest_network = min(lowest_network, float(positive.min()))
    return lowest_network, highest


def _draw_switch_steps(ax, comparison: Comparison) -> tuple[float, list]:
    """The predicted switch-on steps as ticks along the top edge, a row per flow (GD's first; up to a few
    modes also as thin lines); returns the fraction of the axes' height the ticks take and their legend
    entries."""
    rows = []
    for flow in sorted(comparison.predictions, key=lambda f: f != REFERENCE_FLOW):
        switch = np.asarray(comparison.predictions[flow][0].group_readings()["mflow"], dtype=np.float64)
        switch = switch[np.isfinite(switch) & (switch > 0)]
        if switch.size:
            label = f"predicted switch-on steps (M-flow, {_label(flow)})"
            rows.append((switch, PALETTE[_colour(flow)], label, f"M-flow, {_label(flow)}"))
    modes = max((len(p[0].groups) for p in comparison.predictions.values()), default=0)
    return switch_rugs(ax, rows, lined=modes <= LINED_MODES)


def _set_limits(
    ax, comparison: Comparison, lowest_network: float, highest: float, overlay, reserved: float = 0.0
) -> None:
    """The axes' ranges: the staircase fills them, from a decade before the first switch-on to the horizon,
    below the top ``reserved`` fraction (the switch-on ticks)."""
    # y: down to a decade below the lowest network loss or the smallest nonzero predicted
    # plateau, so the staircase fills the axes rather than the quadratic model's final decay
    plateaus = np.asarray(comparison.prediction.lv_plateau_losses, dtype=np.float64)
    plateaus = plateaus[np.isfinite(plateaus) & (plateaus > 1e-12)]
    floor = min([lowest_network, *plateaus.tolist()]) if plateaus.size or np.isfinite(lowest_network) else np.nan
    top = 2.0 * highest if highest > 0 else ax.get_ylim()[1]
    if np.isfinite(floor) and floor > 0:
        bottom = max(floor / 10, top * 1e-12)
        ax.set_ylim(bottom, max(top, headroom_top(bottom, highest, reserved)) if highest > 0 else top)
    elif highest > 0:
        ax.set_ylim(top=top)
    # x: from a decade below the first predicted switch-on (the plateau before it is flat)
    predicted = np.concatenate(
        [np.asarray(p[0].mflow_switch_steps, dtype=np.float64) for p in comparison.predictions.values()]
    )
    steps = comparison.config.steps
    ax.set_xlim(decade_before(predicted), steps if overlay is None else max(steps, float(overlay.curve.steps[-1])))
