"""pandas DataFrames of nqf's tables: what ``to_dataframe()`` / ``to_dataframes()`` of
:class:`nqf.Prediction` and :class:`nqf.Comparison`, and ``to_dataframe()`` of the sweep's
result (``nqf.scans.sweep.run.SweepResult``), return.

The frames are the tables the command line writes, read back as numbers:

- curves and modes (``nqf predict --csv DIR``, ``nqf compare --csv DIR``): the rows and
  columns of ``nqf.report.curve_tables`` (its docstring says what each row is; the rows are
  made by ``nqf.theory.predict.tables`` and ``nqf.comparison.tables``), one frame per table,
  ``"curves"`` and ``"modes"``, the rows in the CSV's order. Each cell becomes the number it
  was written from (the CSV cells are the shortest text that reads back exactly): ``seed``,
  ``step`` and ``mode`` int64 (nullable Int64 if a cell is empty: the seed of an overlay
  row), ``loss``, ``switch_step`` and ``plateau_loss`` float64 (an empty cell, not
  available or not finite, is NaN), ``source``, ``optimizer`` and ``convention`` text
  (pandas' default string dtype);
- the sweep's points (``points.parquet``, or ``points.csv`` without pyarrow;
  ``nqf.scans.sweep.table``): the file read with pandas.

pandas is optional (the ``dataframe`` extra) and imported on first use; without it these
raise NqfError with the install line. Here, at the bottom of the package, so that every
result class can use it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nqf.core.errors import NqfError, install_hint

if TYPE_CHECKING:
    import pandas as pd

PANDAS_MISSING = f"to_dataframe needs pandas: {install_hint('dataframe')}"

TABLES = ("curves", "modes")

# the kind of each column of the curve and mode tables (nqf.theory.predict.tables: CURVE_COLUMNS, MODE_COLUMNS)
_KINDS: dict[str, type] = {
    "source": str,
    "optimizer": str,
    "seed": int,
    "step": int,
    "loss": float,
    "mode": int,
    "convention": str,
    "switch_step": float,
    "plateau_loss": float,
}


def require_pandas() -> Any:
    """The pandas module; NqfError (one line, how to install it) when it is not installed."""
    try:
        import pandas
    except ImportError:
        raise NqfError(PANDAS_MISSING) from None
    return pandas


def table_frame(columns, rows) -> pd.DataFrame:
    """A table of ``nqf.theory.predict.tables`` / ``nqf.comparison.tables`` (columns, rows of CSV cells) as a DataFrame:
    the same rows in the same order, each cell as its number (module docstring)."""
    pandas = require_pandas()
    data = {name: _column([row[i] for row in rows], _KINDS[name], pandas) for i, name in enumerate(columns)}
    return pandas.DataFrame(data, columns=list(columns))


def _column(cells: list[str], kind: type, pandas) -> Any:
    if kind is str:
        return pandas.Series(cells, dtype=str)  # pandas' own text dtype (object before pandas 3), also when empty
    if kind is float:
        return pandas.array([float(c) if c else math.nan for c in cells], dtype="float64")
    if all(cells):
        return pandas.array([int(c) for c in cells], dtype="int64")
    return pandas.array([int(c) if c else None for c in cells], dtype="Int64")  # an empty cell: <NA>


def tables_frames(tables: dict[str, tuple]) -> dict[str, pd.DataFrame]:
    """``{"curves.csv": (columns, rows), "modes.csv": ...}`` as ``{"curves": frame, "modes": frame}``."""
    return {name.removesuffix(".csv"): table_frame(columns, rows) for name, (columns, rows) in tables.items()}


def check_table(table: str) -> str:
    """``table`` if it names a table of ``to_dataframes()``, else NqfError."""
    if table not in TABLES:
        raise NqfError(f"unknown table {table!r}; choose one of {', '.join(TABLES)}")
    return table


def points_frame(path: Path | None) -> pd.DataFrame:
    """The sweep's table file (``nqf.scans.sweep.table.write_table``) as a DataFrame.

    Parquet: ``pandas.read_parquet``. CSV: only an empty cell is missing (NaN; text such as
    ``NA`` stays text), numbers read back exactly (they were written as Python's repr), and
    ``error`` is text, empty for a point with a record, as in the Parquet file. The two agree
    cell for cell, but for a column with no value at all: None in Parquet, NaN in CSV.
    """
    pandas = require_pandas()
    if path is None:
        raise NqfError("the sweep has no table yet: run_sweep writes it (points.parquet or points.csv)")
    path = Path(path)
    if path.suffix == ".parquet":
        return pandas.read_parquet(path)
    frame = pandas.read_csv(path, keep_default_na=False, na_values=[""], dtype={"error": str}, **exact_floats(pandas))
    if "error" in frame:
        frame["error"] = frame["error"].fillna("")
    return frame


def exact_floats(pandas) -> dict[str, str]:
    """``read_csv``'s option for floats that read back exactly: pandas 3 parses them so by
    default (and deprecates the option), pandas 2 needs ``float_precision="round_trip"``."""
    major = int(pandas.__version__.split(".", 1)[0])
    return {} if major >= 3 else {"float_precision": "round_trip"}
