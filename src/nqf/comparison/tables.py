"""The rows of the tidy tables of a comparison (``nqf compare --csv DIR``, ``Comparison.to_dataframes``).

The tables, their columns and what each row holds: ``nqf.report.curve_tables`` (which
writes them as CSV); the cells and the rows of each prediction: ``nqf.theory.predict.tables``.
"""

from __future__ import annotations

from nqf.theory.predict.tables import (
    CURVE_COLUMNS,
    MODE_COLUMNS,
    curve_rows,
    mode_rows,
    overlay_rows,
    prediction_mode_rows,
)


def comparison_tables(comparison, overlay=None, overlay_flow: str = "gd", overlay_seed=None):
    """{"curves.csv", "modes.csv"}: (columns, rows) of ``nqf compare`` (``nqf.report.curve_tables``);
    the overlay's M-flow rows are labelled with ``overlay_flow`` and ``overlay_seed``."""
    curves: list[tuple] = []
    for entry in comparison.all_loss_curves():
        for seed, loss in zip(entry["seeds"], entry["loss"], strict=True):
            curves += curve_rows(entry["source"], entry["optimizer"], int(seed), entry["steps"], loss)
    modes: list[tuple] = []
    c = comparison
    seeds = [int(s) for s in c.seeds]
    # (source, optimizer, switch, plateau, own switch), each per seed: the networks, then the quadratic model
    trained = [("network", o, c.network_switch[o], c.plateau_network[o], c.network_switch_own[o]) for o in c.network]
    if c.quadratic_switch is not None:
        trained.append(("quadratic", "gd", c.quadratic_switch, c.plateau_quadratic, c.quadratic_switch_own))
    for source, opt, switch, plateau, own in trained:
        for j, seed in enumerate(seeds):
            modes += mode_rows(source, opt, seed, "occupation", switch[j], plateau[j], c.mode_groups)
            modes += mode_rows(source, opt, seed, "own_occupation", own[j], None, c.mode_groups)
    for flow, preds in comparison.predictions.items():
        for seed, p in zip(seeds, preds, strict=True):
            modes += prediction_mode_rows(p, flow, seed)
    if overlay is not None:
        seed = seeds[0] if overlay_seed is None else overlay_seed
        extra_curves, extra_modes = overlay_rows(overlay, overlay_flow, seed)
        curves += extra_curves
        modes += extra_modes
    return {"curves.csv": (CURVE_COLUMNS, curves), "modes.csv": (MODE_COLUMNS, modes)}
