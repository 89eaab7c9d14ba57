"""Tidy tables of loss curves and switch-on steps: ``--csv DIR`` of ``nqf predict`` and ``nqf compare``.

Two long-format tables (one observation a row), CSV with a header row:

``curves.csv``: source, optimizer, seed, step, loss
    one row per (source, optimizer, seed, recorded step). Sources: ``network`` (compare,
    per optimizer: the trained network), ``quadratic`` (compare, GD), ``mflow`` and ``lv`` (the
    Lotka-Volterra map) per predicted flow, ``mean_field`` (the network's own prediction, the
    mean-field flow of its units, where predict computed it), and ``overlay``, a measured curve given with ``--overlay``
    (optimizer and seed empty).
``modes.csv``: source, optimizer, seed, mode, convention, switch_step, plateau_loss
    one row per (source, optimizer, seed, mode, convention). Sources: as above, and
    ``lv_flow`` (the LV ODE), ``closed_form`` (the logistic closed form), ``singular_limit``.
    Convention of the switch-on step: ``occupation`` (m_k first reaches m_k*/2, the
    theory's threshold), ``own_occupation`` (half of the run's own final occupation; empty where the run
    diverged or the mode never reached m_k*/2) or
    ``loss`` (the loss falls to the midpoint between the predicted plateaus, ``nqf.comparison.curves``:
    the overlay and the M-flow it is compared with). plateau_loss: the loss on the plateau
    after the switch, the source's curve read at the log-midpoint to the next switch
    (``nqf.comparison.compare.measured_plateau_losses``), or the singular limit's equilibrium loss.

Empty cells: not available, or not finite (never switched within the horizon, diverged).
Modes are numbered from 1 in the order of growth (largest first). The rows are made below
the report, so that ``Prediction.to_dataframes`` and ``Comparison.to_dataframes`` return the
same tables: ``nqf.theory.predict.tables`` (the cells, a prediction's rows) and
``nqf.comparison.tables`` (a comparison's), whose ``prediction_tables`` and
``comparison_tables`` are re-exported here. A leaf: the numerical core
never imports this.
"""

from __future__ import annotations

import csv
import io

from nqf.comparison.tables import comparison_tables as comparison_tables
from nqf.theory.predict.tables import prediction_tables as prediction_tables


def table_bytes(columns, rows) -> bytes:
    """CSV text (UTF-8, '\\n' line ends) of a header and rows of cells."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")
