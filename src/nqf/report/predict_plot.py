"""The figure of ``nqf predict --plot``: the predicted loss curves on one log-log axis.

The M-flow loss (dotted), the Lotka-Volterra map's loss (dash-dot), the vanishing-init
limit's staircase (its plateau losses, stepping down at its step times) and, where predict
computed it, the network's own predicted loss (solid, ``Prediction.network``), with the
switch-on steps of each source as short ticks in the source's colour along the top edge
(one row a source: M-flow, LV map, singular limit, the network's own prediction; up to a few
modes the M-flow's also as thin dotted lines), the M-flow's mode numbers above the axes (thinned where they would
collide), the plateau losses as thin horizontal lines, and, when given, a measured loss
curve (solid black) with its switch-on steps and the M-flow's by the loss convention
(``nqf.comparison.curves``) as markers on the curves. Colours and line styles:
``nqf.report.style``. A leaf: the numerical core never imports this.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nqf.comparison.curves import OverlayComparison
from nqf.core.measure import group_label
from nqf.theory.predict.pipeline import Prediction

from .panels import LINED_MODES, decade_before, headroom_top, mode_numbers, on_log_axes, switch_rugs, unique_legend
from .style import PALETTE, SOURCES, axis_label, curve, figure_format, new_figure, plain_text, setup_axes, write_figure

_MFLOW, _LV, _LIMIT, _NETWORK, _MEASURED = 0, 1, 2, 3, 6  # PALETTE indices: blue, orange, green, vermillion, black


def _limit_staircase(prediction: Prediction, horizon: float):
    """(x, y) of the singular limit's loss: L(0), then each plateau from its step time on."""
    limit = prediction.singular
    times = np.asarray(limit.steps(), dtype=np.float64)
    plateaus = np.asarray(limit.plateau_losses, dtype=np.float64)
    keep = np.isfinite(times) & (times > 0) & (times < horizon)
    x = np.concatenate([[1.0], times[keep], [horizon]])
    y = np.concatenate(
        [[float(limit.initial_loss)], plateaus[keep], plateaus[keep][-1:] if keep.any() else [limit.initial_loss]]
    )
    return x, y


def draw_overlay(ax, overlay: OverlayComparison) -> float:
    """Draw a measured curve (solid black) and the switch-on steps of it and of the M-flow by the
    loss convention (filled circles, open squares, at the mode's loss level); returns its lowest
    positive loss (inf if none)."""
    x, y = on_log_axes(overlay.curve.steps, overlay.curve.loss)
    ax.plot(
        x,
        y,
        color=PALETTE[_MEASURED],
        linestyle=SOURCES["data"][0],
        linewidth=1.4,
        label=f"measured ({plain_text(Path(overlay.curve.path).name)})",
        zorder=4,
    )
    levels = np.asarray(overlay.levels, dtype=np.float64)
    for steps, marker, colour, name, fill in (
        (overlay.switch_steps, "o", _MEASURED, "measured", PALETTE[_MEASURED]),
        (overlay.predicted_switch_steps, "s", _MFLOW, "M-flow", "none"),
    ):
        t = np.asarray(steps, dtype=np.float64)
        keep = np.isfinite(t) & (t > 0) & np.isfinite(levels) & (levels > 0)
        if keep.any():
            ax.scatter(
                t[keep],
                levels[keep],
                marker=marker,
                s=30,
                facecolors=fill,
                edgecolors=PALETTE[colour],
                zorder=5,
                label=f"switch-on by the loss midpoint ({name})",
            )
    return float(y.min()) if y.size else np.inf


def plot_prediction(prediction: Prediction, path, overlay: OverlayComparison | None = None) -> Path:
    """Write the prediction's figure to ``path`` (PNG, or PDF when it ends in .pdf), atomically; returns it."""
    figure_format(path)
    cfg = prediction.config
    horizon = float(cfg.steps)
    if overlay is not None:
        horizon = max(horizon, float(overlay.curve.steps[-1]))
    fig, ax = new_figure(size=(10.0, 5.4))
    highest, lowest = _draw_loss_curves(ax, prediction, horizon)
    plateaus = _draw_plateaus(ax, prediction)
    reserved, ticks = _draw_switch_steps(ax, prediction, horizon)

    if overlay is not None:
        lowest = min(lowest, draw_overlay(ax, overlay))
        highest = max(highest, float(np.max(overlay.curve.loss, initial=0.0)))

    title = (
        f"{plain_text(prediction.arch_name)}: n = {cfg.width}, {cfg.optimizer}, lr = {cfg.lr:g}, {cfg.steps} steps, "
        f"seed {cfg.seed}"
    )
    setup_axes(ax, axis_label("training step", "1"), axis_label("loss", "1"), xscale="log", yscale="log")
    ax.set_title(title, fontsize=9, pad=14)
    _set_limits(ax, prediction, plateaus, lowest, highest, horizon, reserved)
    handles, labels = unique_legend(ax, ticks)
    if prediction.departure is not None:
        handles, labels = _draw_departure(ax, prediction, handles, labels, reserved)
    # outside the axes, at the right (constrained layout makes room), clear of the right-hand axis's labels
    fig.legend(handles, labels, loc="outside right upper", fontsize=8, framealpha=0.9)
    shown = _shown_steps(prediction)
    mode_numbers(ax, shown["mflow"], PALETTE[_MFLOW], labels=shown["labels"])
    return write_figure(fig, path)


def _draw_loss_curves(ax, prediction: Prediction, horizon: float) -> tuple[float, float]:
    """The M-flow's and the LV map's losses, the network's own predicted loss where computed and the
    singular limit's staircase; returns the highest and the lowest loss of the curves (0 and inf if none)."""
    cfg = prediction.config
    lv_detail = "map" if prediction.lv_applies else "map, approximate"
    curves = [
        ("M-flow", _MFLOW, cfg.optimizer, prediction.flow.steps, prediction.flow.loss),
        ("LV", _LV, lv_detail, prediction.lv_steps, prediction.lv_loss),
    ]
    if prediction.network is not None:
        found = prediction.network
        curves.append(("network", _NETWORK, f"predicted: {found.label}", found.steps, found.loss))
    highest, lowest = 0.0, np.inf
    for source, colour, detail, steps, loss in curves:
        x, y = on_log_axes(steps, loss)
        style = curve(source, colour, detail)
        style["zorder"] = 3
        ax.plot(x, y, **style)
        if y.size:
            highest, lowest = max(highest, float(y.max())), min(lowest, float(y.min()))
    if np.isfinite(float(prediction.singular.eps)):  # NaN: an init that is not small has no limit (its note)
        x, y = _limit_staircase(prediction, horizon)
        ax.plot(x, y, drawstyle="steps-post", **curve("limit", _LIMIT, "vanishing init"))
    return highest, lowest


def _draw_plateaus(ax, prediction: Prediction) -> np.ndarray:
    """The positive plateau losses as thin horizontal lines; returns them."""
    plateaus = np.asarray(prediction.lv_plateau_losses, dtype=np.float64)
    plateaus = plateaus[np.isfinite(plateaus) & (plateaus > 0)]
    if plateaus.size:
        ax.hlines(
            plateaus,
            0,
            1,
            transform=ax.get_yaxis_transform(),
            colors="0.55",
            linestyles="-",
            linewidth=0.6,
            alpha=0.7,
            label="plateau losses (vanishing-init limit)",
            zorder=1,
        )
    return plateaus


def _shown_steps(prediction: Prediction) -> dict:
    """The switch-on steps drawn, per mode, or per degenerate group where modes share c_k
    (``Prediction.group_readings``: a member's own step depends on the draw of W0), with the
    labels that name them ("3", "1-2")."""
    if prediction.degenerate:
        readings = prediction.group_readings()
        return {**readings, "labels": [group_label(group) for group in prediction.groups]}
    return {
        "mflow": prediction.mflow_switch_steps,
        "lv": prediction.lv_switch_steps,
        "singular_limit": prediction.singular_switch_steps,
        "labels": None,
    }


def _draw_switch_steps(ax, prediction: Prediction, horizon: float) -> tuple[float, list]:
    """Switch-on steps (the occupation convention: m_k reaches m_k*/2) as ticks along the top edge, a
    row per source (M-flow, LV map, singular limit); up to a few modes the M-flow's also as thin lines.
    Returns the fraction of the axes' height the ticks take and their legend entries."""
    shown = _shown_steps(prediction)
    sources = [
        (PALETTE[_MFLOW], "M-flow", "M-flow", shown["mflow"]),
        (PALETTE[_LV], "LV map", "LV", shown["lv"]),
        (PALETTE[_LIMIT], "vanishing-init limit", "limit", shown["singular_limit"]),
    ]
    if prediction.network is not None:
        found = prediction.network
        readings = prediction.network_group_readings() if prediction.degenerate else None
        steps = found.switch_steps if readings is None else readings[0]
        sources.append((PALETTE[_NETWORK], f"network, predicted: {found.label}", "network", steps))
    rows = []
    for colour, name, short, switch in sources:
        t = np.asarray(switch, dtype=np.float64)
        t = t[np.isfinite(t) & (t > 0) & (t <= horizon)]
        if t.size:
            rows.append((t, colour, f"switch-on steps ({name})", short))
    modes = np.asarray(shown["mflow"]).size
    return switch_rugs(ax, rows, lined=modes <= LINED_MODES and bool(rows) and rows[0][3] == "M-flow")


def _set_limits(
    ax, prediction: Prediction, plateaus, lowest: float, highest: float, horizon: float, reserved: float = 0.0
) -> None:
    """The axes' ranges: the staircase fills them, from a decade before the first switch-on to the horizon,
    below the top ``reserved`` fraction (the switch-on ticks)."""
    # y: down to a decade below the smallest nonzero plateau, so the staircase fills the axes
    # rather than the final decay towards a zero loss (of the prediction or the measured curve)
    resolved = plateaus[plateaus > 1e-12]
    if resolved.size:
        lowest = float(resolved.min())
    if highest > 0 and np.isfinite(lowest):
        bottom = max(lowest / 10, 2.0 * highest * 1e-12)
        ax.set_ylim(bottom, max(2.0 * highest, headroom_top(bottom, highest, reserved)))
    ax.set_xlim(decade_before(prediction.mflow_switch_steps), horizon)


def _draw_departure(ax, prediction: Prediction, handles: list, labels: list, reserved: float = 0.0):
    """The network-vs-quadratic-model gap on a right-hand axis (percent), below the top ``reserved``
    fraction (the switch-on ticks)."""
    found = prediction.departure
    steps = np.asarray(found.steps, dtype=np.float64)
    gap = 100.0 * np.asarray(found.relative_gap, dtype=np.float64)
    keep = (steps > 0) & np.isfinite(gap)
    right = ax.twinx()
    (line,) = right.plot(
        steps[keep],
        gap[keep],
        color="0.35",
        linewidth=1.0,
        linestyle="--",
        label="network vs quadratic model, output gap (%, right axis)",
    )
    right.set_ylabel("network vs quadratic model (%)", fontsize=8)
    right.set_xlabel(ax.get_xlabel())  # twinx hides this x axis; the label keeps the figure check honest
    right.set_ylim(0.0, max(5.0, 1.15 * float(gap[keep].max(initial=0.0))) / (1.0 - reserved))
    right.tick_params(labelsize=7)
    handles, labels = [*handles, line], [*labels, line.get_label()]
    return handles, labels
