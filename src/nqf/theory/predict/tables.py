"""The rows of the tidy tables of a prediction (``nqf predict --csv DIR``, ``Prediction.to_dataframes``).

The tables, their columns and what each row holds: ``nqf.report.curve_tables`` (which
writes them as CSV). Rows are tuples of CSV cells: a number as the shortest text that reads
back to it exactly, '' for not available or not finite. The comparison's rows
(``nqf.comparison.tables``) are built from these. Made here, below the report and the
comparison, so that :class:`nqf.theory.predict.result.Prediction` can return them.
"""

from __future__ import annotations

import math

import numpy as np

from nqf.core.measure import measured_plateau_losses

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


def curve_rows(source: str, optimizer: str, seed, steps, loss) -> list[tuple]:
    """Rows of one curve: steps (R,), loss (R,)."""
    steps = np.asarray(steps, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    head = (source, optimizer, _cell(seed))
    return [(*head, _cell(t), _loss_cell(v)) for t, v in zip(steps, loss, strict=True)]


def mode_rows(source, optimizer, seed, convention, switch, plateau=None, groups=None) -> list[tuple]:
    """Rows of one source's switch-on steps (g,) and plateau losses (g,) (None: not available).

    With ``groups`` (index tuples, one per entry of ``switch``) an entry is a degenerate group:
    its row names the group's first mode, and a group of two or more modes has the convention
    ``group_`` + ``convention`` (timed on the group's total occupation)."""
    switch = np.asarray(switch, dtype=np.float64)
    plateau = np.full(switch.shape, np.nan) if plateau is None else np.asarray(plateau, dtype=np.float64)
    groups = groups or tuple((k,) for k in range(switch.size))
    return [
        (
            source,
            optimizer,
            _cell(seed),
            str(groups[k][0] + 1),
            convention if len(groups[k]) == 1 else f"group_{convention}",
            _cell(switch[k]),
            _loss_cell(plateau[k]),
        )
        for k in range(switch.size)
    ]


def prediction_mode_rows(prediction, optimizer: str, seed) -> list[tuple]:
    """The switch-on steps (occupation convention) and plateau losses of every source of a Prediction;
    per degenerate group where modes share c_k (``Prediction.group_readings``, whose groups of one
    are the per-mode numbers)."""
    p = prediction
    groups = p.groups if p.degenerate else None
    readings = p.group_readings()
    lv_plateau = measured_plateau_losses(p.lv_steps, np.asarray(p.lv_loss), readings["lv"], float(p.config.steps))
    # the limit's plateau per mode: also of a mode it activates and later suppresses (no switch step)
    limit_plateau = p.lv_plateau_losses if groups is None else readings["plateau_singular_limit"]
    plateaus = {"mflow": readings["plateau_mflow"], "lv": lv_plateau, "singular_limit": limit_plateau}
    rows = []
    for source in ("mflow", "lv", "lv_flow", "closed_form", "singular_limit"):
        rows += mode_rows(source, optimizer, seed, "occupation", readings[source], plateaus.get(source), groups)
    return rows + _network_rows(p, optimizer, seed, groups)


def _network_rows(p, optimizer: str, seed, groups) -> list[tuple]:
    """The network's mean-field flow's rows (source ``mean_field``: ``network`` is the trained network's in
    compare's tables), none when it was not computed."""
    if p.network is None:
        return []
    if groups is None:
        return mode_rows("mean_field", optimizer, seed, "occupation", p.network.switch_steps, p.network.plateau_losses)
    readings = p.network_group_readings()
    assert readings is not None
    steps, plateau = readings
    return mode_rows("mean_field", optimizer, seed, "occupation", steps, plateau, groups)


def overlay_rows(overlay, optimizer: str, seed) -> tuple[list[tuple], list[tuple]]:
    """The curve and mode rows of a measured curve compared with a prediction (``nqf.comparison.curves``)."""
    curves = curve_rows("overlay", "", None, overlay.curve.steps, overlay.curve.loss)
    modes = mode_rows("overlay", "", None, "loss", overlay.switch_steps)
    modes += mode_rows("mflow", optimizer, seed, "loss", overlay.predicted_switch_steps)
    return curves, modes


def prediction_tables(prediction, overlay=None) -> dict[str, tuple[tuple[str, ...], list[tuple]]]:
    """{"curves.csv", "modes.csv"}: (columns, rows) of ``nqf predict`` (``nqf.report.curve_tables``)."""
    opt, seed = prediction.config.optimizer, prediction.config.seed
    curves = curve_rows("mflow", opt, seed, prediction.flow.steps, prediction.flow.loss)
    curves += curve_rows("lv", opt, seed, prediction.lv_steps, prediction.lv_loss)
    if prediction.network is not None:
        curves += curve_rows("mean_field", opt, seed, prediction.network.steps, prediction.network.loss)
    modes = prediction_mode_rows(prediction, opt, seed)
    if overlay is not None:
        extra_curves, extra_modes = overlay_rows(overlay, opt, seed)
        curves += extra_curves
        modes += extra_modes
    return {"curves.csv": (CURVE_COLUMNS, curves), "modes.csv": (MODE_COLUMNS, modes)}
