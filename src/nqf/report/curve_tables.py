"""Tidy tables of loss curves and switch-on steps: ``--csv DIR`` of ``nqf predict`` and ``nqf compare``.

Two long-format tables (one observation a row), CSV with a header row:

``curves.csv``: source, optimizer, seed, step, loss
    one row per (source, optimizer, seed, recorded step). Sources: ``network`` (compare,
    per optimizer), ``quadratic`` (compare, GD), ``mflow`` and ``lv`` (the Lotka-Volterra
    map) per predicted flow, and ``overlay``, a measured curve given with ``--overlay``
    (optimizer and seed empty).
``modes.csv``: source, optimizer, seed, mode, convention, switch_step, plateau_loss
    one row per (source, optimizer, seed, mode, convention). Sources: as above, and
    ``lv_flow`` (the LV ODE), ``closed_form`` (the logistic closed form), ``singular_limit``.
    Convention of the switch-on step: ``occupation`` (m_k first reaches m_k*/2, the
    theory's threshold), ``own_occupation`` (half of the run's own final occupation) or
    ``loss`` (the loss falls to the midpoint between the predicted plateaus, ``nqf.comparison.curves``:
    the overlay and the M-flow it is compared with). plateau_loss: the loss on the plateau
    after the switch, the source's curve read at the log-midpoint to the next switch
    (``nqf.comparison.compare.measured_plateau_losses``), or the singular limit's equilibrium loss.

Empty cells: not available, or not finite (never switched within the horizon, diverged).
Modes are numbered from 1 in the order of growth (largest first). A leaf: the numerical
core never imports this.
"""

from __future__ import annotations

import csv
import io
import math

import numpy as np

CURVE_COLUMNS = ("source", "optimizer", "seed", "step", "loss")
MODE_COLUMNS = ("source", "optimizer", "seed", "mode", "convention", "switch_step", "plateau_loss")


def _cell(value) -> str:
    """A number as the shortest text that reads back to it; '' for None or non-finite."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    v = float(value)
    if not math.isfinite(v):
        return ""
    return str(int(v)) if v == round(v) and abs(v) < 2**53 else repr(v)


def _loss_cell(value) -> str:
    v = float(value)
    return repr(v) if math.isfinite(v) else ""


def table_bytes(columns, rows) -> bytes:
    """CSV text (UTF-8, '\\n' line ends) of a header and rows of cells."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def curve_rows(source: str, optimizer: str, seed, steps, loss) -> list[tuple]:
    """Rows of one curve: steps (R,), loss (R,)."""
    steps = np.asarray(steps, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    head = (source, optimizer, _cell(seed))
    return [(*head, _cell(t), _loss_cell(v)) for t, v in zip(steps, loss, strict=True)]


def _mode_rows(source, optimizer, seed, convention, switch, plateau=None) -> list[tuple]:
    switch = np.asarray(switch, dtype=np.float64)
    plateau = np.full(switch.shape, np.nan) if plateau is None else np.asarray(plateau, dtype=np.float64)
    return [
        (source, optimizer, _cell(seed), str(k + 1), convention, _cell(switch[k]), _loss_cell(plateau[k]))
        for k in range(switch.size)
    ]


def prediction_mode_rows(prediction, optimizer: str, seed) -> list[tuple]:
    """The switch-on steps (occupation convention) and plateau losses of every source of a Prediction."""
    from nqf.comparison.compare import measured_plateau_losses

    p = prediction
    horizon = float(p.config.steps)
    steps, loss = np.asarray(p.flow.steps), np.asarray(p.flow.loss)
    rows = _mode_rows(
        "mflow",
        optimizer,
        seed,
        "occupation",
        p.mflow_switch_steps,
        measured_plateau_losses(steps, loss, p.mflow_switch_steps, horizon),
    )
    rows += _mode_rows(
        "lv",
        optimizer,
        seed,
        "occupation",
        p.lv_switch_steps,
        measured_plateau_losses(p.lv_steps, np.asarray(p.lv_loss), p.lv_switch_steps, horizon),
    )
    rows += _mode_rows("lv_flow", optimizer, seed, "occupation", p.lv_continuous_switch_steps)
    rows += _mode_rows("closed_form", optimizer, seed, "occupation", p.closed_form_switch_steps)
    rows += _mode_rows("singular_limit", optimizer, seed, "occupation", p.singular_switch_steps, p.lv_plateau_losses)
    return rows


def _overlay_rows(overlay, optimizer: str, seed) -> tuple[list[tuple], list[tuple]]:
    curves = curve_rows("overlay", "", None, overlay.curve.steps, overlay.curve.loss)
    modes = _mode_rows("overlay", "", None, "loss", overlay.switch_steps)
    modes += _mode_rows("mflow", optimizer, seed, "loss", overlay.predicted_switch_steps)
    return curves, modes


def prediction_tables(prediction, overlay=None) -> dict[str, tuple[tuple[str, ...], list[tuple]]]:
    """{"curves.csv", "modes.csv"}: (columns, rows) of ``nqf predict`` (module docstring)."""
    opt, seed = prediction.config.optimizer, prediction.config.seed
    curves = curve_rows("mflow", opt, seed, prediction.flow.steps, prediction.flow.loss)
    curves += curve_rows("lv", opt, seed, prediction.lv_steps, prediction.lv_loss)
    modes = prediction_mode_rows(prediction, opt, seed)
    if overlay is not None:
        extra_curves, extra_modes = _overlay_rows(overlay, opt, seed)
        curves += extra_curves
        modes += extra_modes
    return {"curves.csv": (CURVE_COLUMNS, curves), "modes.csv": (MODE_COLUMNS, modes)}


def comparison_tables(comparison, overlay=None, overlay_flow: str = "gd", overlay_seed=None):
    """{"curves.csv", "modes.csv"}: (columns, rows) of ``nqf compare`` (module docstring);
    the overlay's M-flow rows are labelled with ``overlay_flow`` and ``overlay_seed``."""
    curves: list[tuple] = []
    for entry in comparison.all_loss_curves():
        for seed, loss in zip(entry["seeds"], entry["loss"], strict=True):
            curves += curve_rows(entry["source"], entry["optimizer"], int(seed), entry["steps"], loss)
    modes: list[tuple] = []
    seeds = [int(s) for s in comparison.seeds]
    for opt in comparison.network:
        for j, seed in enumerate(seeds):
            modes += _mode_rows(
                "network",
                opt,
                seed,
                "occupation",
                comparison.network_switch[opt][j],
                comparison.plateau_network[opt][j],
            )
            modes += _mode_rows("network", opt, seed, "own_occupation", comparison.network_switch_own[opt][j])
    if comparison.quadratic_switch is not None:
        for j, seed in enumerate(seeds):
            modes += _mode_rows(
                "quadratic", "gd", seed, "occupation", comparison.quadratic_switch[j], comparison.plateau_quadratic[j]
            )
            modes += _mode_rows("quadratic", "gd", seed, "own_occupation", comparison.quadratic_switch_own[j])
    for flow, preds in comparison.predictions.items():
        for seed, p in zip(seeds, preds, strict=True):
            modes += prediction_mode_rows(p, flow, seed)
    if overlay is not None:
        seed = seeds[0] if overlay_seed is None else overlay_seed
        extra_curves, extra_modes = _overlay_rows(overlay, overlay_flow, seed)
        curves += extra_curves
        modes += extra_modes
    return {"curves.csv": (CURVE_COLUMNS, curves), "modes.csv": (MODE_COLUMNS, modes)}
