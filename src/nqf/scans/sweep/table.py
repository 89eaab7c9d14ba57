"""The sweep's table: one row per point and mode, written as DIR/points.parquet (pyarrow) or
DIR/points.csv (without pyarrow), atomically.

Columns, in order:

- ``point``: the point's index (product order); then one column per axis, named as the axis
  (``sigma0``, ``seed``, ``arch.activation``, ...); ``mode`` (1, 2, ... by growth rate,
  largest first; empty for a failed point, which gets one row);
- ``compare`` points: ``growth`` (c_k), ``threshold`` (m_k*/2); switch-on steps
  ``switch_<source>`` for sources ``singular_limit``, ``lv``, ``mflow``, ``closed_form``
  (GD predictions), ``mflow_<opt>`` (the optimizer's own M-flow, GD's for adam/muon),
  ``quadratic``, ``network_<opt>``, ``mean_field_<opt>`` (the network's own prediction, the
  mean-field flow of its units, where computed), and ``switch_own_...`` at half the run's own
  final occupation; relative errors against the M-flow ``relerr_<source>``; plateau losses
  ``plateau_<source>`` (predicted: singular_limit, lv, mflow, mean_field_<opt>; measured:
  quadratic, network_<opt>); ``closure_defect_<opt>``, ``closure_update_defect_<opt>``,
  ``diverged_<opt>``; ``lv_applies``, ``defect``;
- ``predict`` points: ``growth``, ``growth_rate``, ``fixed_point``, ``switch_mflow``,
  ``switch_lv``, ``switch_lv_continuous``, ``switch_closed_form``, ``switch_singular_limit``,
  ``relerr_lv``, ``relerr_singular_limit`` (against the M-flow), ``plateau_lv``,
  ``plateau_singular_limit``, ``switch_mean_field``, ``plateau_mean_field`` (the network's own
  prediction, where computed; left out when no point has it), ``exponent`` (of the power-law
  fit of the point's M-flow loss curve, null where it has none; the column is left out when no
  point has one, and :func:`table_notes` says why), ``stable_lr``, ``lv_applies``, ``defect``, ``route``;
- ``seconds`` (compute time of the point; a batch's shared training split evenly),
  ``error`` (one line, empty when the point has a record).

Missing numbers (never switched, not applicable) are null / empty.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from nqf.store.results import atomic_write_bytes


def _relative(a, b):
    if a is None or b is None or b == 0:
        return None
    return (a - b) / b


def compare_rows(result: dict) -> list[dict[str, Any]]:
    opts = list(result["config"]["optimizers"])
    rows = []
    for m in result["modes"]:
        row: dict[str, Any] = {"mode": m["mode"], "growth": m["growth"], "threshold": m["threshold"]}
        for source in ("singular_limit", "lv", "mflow", "closed_form"):
            row[f"switch_{source}"] = m["predicted"][source]
        for opt in opts:
            row[f"switch_mflow_{opt}"] = m["predicted_by_optimizer"][opt]["mflow"]
        for opt in opts:  # the network's own prediction, the mean-field flow (null where not computed)
            row[f"switch_mean_field_{opt}"] = m["predicted_by_optimizer"][opt].get("mean_field")
        row["switch_quadratic"] = m["measured"]["quadratic"]
        for opt in opts:
            row[f"switch_network_{opt}"] = m["measured"]["network"][opt]
        row["switch_own_quadratic"] = m["measured_own_threshold"]["quadratic"]
        for opt in opts:
            row[f"switch_own_network_{opt}"] = m["measured_own_threshold"]["network"][opt]
        rel = m["relative_error"]
        for source in ("lv", "singular_limit", "quadratic"):
            row[f"relerr_{source}"] = rel[source]
        for opt in opts:
            row[f"relerr_network_{opt}"] = rel["network"][opt]
        plateau = m["plateau_loss"]
        for source in ("singular_limit", "lv", "mflow"):
            row[f"plateau_{source}"] = plateau["predicted"].get(source)
        row["plateau_quadratic"] = plateau["measured"]["quadratic"]
        for opt in opts:
            row[f"plateau_network_{opt}"] = plateau["measured"]["network"][opt]
        for opt in opts:
            row[f"plateau_mean_field_{opt}"] = m["predicted_by_optimizer"][opt].get("mean_field_plateau_loss")
        for opt in opts:
            row[f"closure_defect_{opt}"] = result["closure_defect"].get(opt)
            row[f"closure_update_defect_{opt}"] = result["closure_update_defect"].get(opt)
            row[f"diverged_{opt}"] = bool(result["diverged"].get(opt))
        row["lv_applies"] = bool(result["lv_applies"])
        row["defect"] = result["defect"]
        rows.append(row)
    return rows


def predict_rows(result: dict) -> list[dict[str, Any]]:
    lv, sl = result["lv"], result["singular_limit"]
    exponent = None if result.get("power_law") is None else result["power_law"]["exponent"]
    network = result.get("network") or {"switch_steps": [], "plateau_losses": []}
    rows = []
    for k in range(len(lv["growth"])):

        def at(seq, k=k):
            return seq[k] if k < len(seq) else None

        mflow = at(result["mflow"]["switch_steps"])
        row = {
            "mode": k + 1,
            "growth": at(lv["growth"]),
            "growth_rate": at(lv["growth_rates"]),
            "fixed_point": at(lv["fixed_point"]),
            "switch_mflow": mflow,
            "switch_lv": at(lv["switch_steps"]),
            "switch_lv_continuous": at(lv["continuous_switch_steps"]),
            "switch_closed_form": at(lv["closed_form_switch_steps"]),
            "switch_singular_limit": at(sl["switch_steps"]),
            "relerr_lv": _relative(at(lv["switch_steps"]), mflow),
            "relerr_singular_limit": _relative(at(sl["switch_steps"]), mflow),
            "plateau_lv": at(lv["plateau_losses"]),
            "plateau_singular_limit": at(sl["plateau_losses"]),
            "switch_mean_field": at(network["switch_steps"]),
            "plateau_mean_field": at(network["plateau_losses"]),
            "exponent": exponent,
            "stable_lr": result["stable_lr"],
            "lv_applies": bool(lv["applies"]),
            "defect": lv["defect"],
            "route": result["route"],
        }
        rows.append(row)
    return rows


def point_rows(point, record: dict | None, error: str, axes: list[str]) -> list[dict[str, Any]]:
    """The rows of one point: its record's modes, or one row with its error."""
    base = {"point": point.index, **{name: point.values.get(name) for name in axes}}
    if record is None:
        return [{**base, "mode": None, "seconds": None, "error": error or "not computed"}]
    result = record["result"]
    rows = compare_rows(result) if "modes" in result else predict_rows(result)
    if not rows:
        return [{**base, "mode": None, "seconds": record.get("seconds"), "error": "no growing mode"}]
    return [{**base, **row, "seconds": record.get("seconds"), "error": ""} for row in rows]


# columns left out of the table when no row has a value in them (each would be all null: an
# object column of None in pandas); table_notes says why for the exponent; the mean field's
# columns (a name starting with one of MEAN_FIELD_COLUMNS) are left out likewise, the points'
# notes say why it was not computed
OPTIONAL_COLUMNS = ("exponent",)
MEAN_FIELD_COLUMNS = ("switch_mean_field", "plateau_mean_field")


def columns_of(rows: list[dict[str, Any]]) -> list[str]:
    """Every key, in first-seen order, with ``seconds`` and ``error`` last; an optional column
    (``OPTIONAL_COLUMNS``) only where some row has a value in it."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    optional = [name for name in seen if name in OPTIONAL_COLUMNS or name.startswith(MEAN_FIELD_COLUMNS)]
    for name in optional:
        if all(_cell(row.get(name)) is None for row in rows):
            del seen[name]
    tail = [c for c in ("seconds", "error") if c in seen]
    return [c for c in seen if c not in tail] + tail


def table_notes(rows: list[dict[str, Any]], mode: str) -> list[str]:
    """One line per thing the table of a ``mode`` ("predict" or "compare") sweep leaves out,
    saying why: the ``exponent`` column of a predict sweep where no point has a power-law
    fit. ``rows``: as written (:func:`point_rows`) or read back (:func:`read_table`, CSV
    cells as text)."""
    from nqf.theory.predict.stages import MIN_MODES_FOR_POWER_LAW as least

    if mode != "predict" or any(_cell(row.get("exponent")) not in (None, "") for row in rows):
        return []
    modes: dict[Any, int] = {}  # per point with a record: its growing modes (its rows' largest mode)
    for row in rows:
        if row.get("error") in ("", None) and row.get("mode") not in ("", None):
            modes[row["point"]] = max(modes.get(row["point"], 0), int(float(row["mode"])))
    if not modes:
        return []
    many = sum(1 for n in modes.values() if n >= least)
    if not many:
        return [
            f"no exponent column: the power law is fitted to an M-flow loss curve with at least {least} "
            f"growing modes, and every point has fewer (at most {max(modes.values())})"
        ]
    return [
        f"no exponent column: the power-law fit of the M-flow loss curve failed at all {many} point(s) with "
        f"{least} or more growing modes (as a rule: within the horizon the loss above the LV fixed point's "
        "spans < 4 decades, too few for a fit window; more steps give it more)"
    ]


def have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def write_table(rows: list[dict[str, Any]], out_dir: Path, parquet: bool | None = None) -> Path:
    """points.parquet (pyarrow) or points.csv; written atomically. Returns the path."""
    columns = columns_of(rows)
    data = {c: [_cell(row.get(c)) for row in rows] for c in columns}
    if parquet is None:
        parquet = have_pyarrow()
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrays = {}
        for c, values in data.items():
            kinds = {type(v) for v in values if v is not None}
            if kinds == {int, float} or kinds == {float}:
                values = [None if v is None else float(v) for v in values]
            elif len(kinds) > 1:
                values = [None if v is None else str(v) for v in values]
            arrays[c] = pa.array(values)
        table = pa.table(arrays)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        path = out_dir / "points.parquet"
        atomic_write_bytes(path, sink.getvalue().to_pybytes())
        return path
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for i in range(len(rows)):
        writer.writerow(
            [
                "" if data[c][i] is None else repr(data[c][i]) if isinstance(data[c][i], float) else data[c][i]
                for c in columns
            ]
        )
    path = out_dir / "points.csv"
    atomic_write_bytes(path, buffer.getvalue().encode("utf-8"))
    return path


def _cell(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (list, tuple, dict)):
        return str(v)
    return v


def read_table(path: Path) -> list[dict[str, Any]]:
    """The rows of a table written by :func:`write_table` (parquet or CSV; CSV cells as text)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))
