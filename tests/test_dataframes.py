"""Results as data: ``to_dataframe()`` / ``to_dataframes()`` of Prediction and Comparison equal
the CSV tables that ``nqf predict --csv`` and ``nqf compare --csv`` write for the same run
(same columns, rows in the same order, every number exactly); the sweep's ``to_dataframe()``
is its points table (Parquet and CSV read the same); the float32 PrecisionWarning of
``predict`` (once per process, never with x64), in subprocesses so that x64 does not leak.

Sizes: the staircase, width 32, 600 steps for predict; width 8, 200 steps, GD, 2 seeds for compare.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import nqf
from nqf.core.dataframes import exact_floats
from nqf.core.errors import NqfError

pd = pytest.importorskip("pandas")

NQF = Path(sys.executable).parent / "nqf"
TEXT = {"source", "optimizer", "convention"}
INTEGERS = {"seed", "step", "mode"}
PREDICT = {"width": 32, "lr": 0.05, "steps": 600, "sigma0": 1e-6}
COMPARE = {"width": 8, "sigma0": 1e-6, "lr": 0.05, "steps": 200, "seeds": 2}


@pytest.fixture(scope="module")
def prediction():
    X, Y = nqf.get_task("staircase").generate(0)
    return nqf.predict(nqf.get_architecture("mlp"), X, Y, nqf.PredictConfig(**PREDICT))


@pytest.fixture(scope="module")
def comparison():
    return nqf.compare("staircase", None, nqf.CompareConfig(optimizers=("gd",), **COMPARE))


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def assert_frame_is_csv(frame, path: Path) -> None:
    """Same columns in the same order, the same rows in the same order, each cell the number
    (or text) the CSV holds, exactly; an empty numeric cell is NaN."""
    header, rows = read_csv(path)
    assert list(frame.columns) == header
    assert len(frame) == len(rows) > 0
    for i, name in enumerate(header):
        cells = [row[i] for row in rows]
        if name in TEXT:
            assert frame[name].tolist() == cells, name
        elif name in INTEGERS:
            assert frame[name].dtype == np.int64, (name, frame[name].dtype)
            assert frame[name].tolist() == [int(c) for c in cells], name
        else:
            assert frame[name].dtype == np.float64, (name, frame[name].dtype)
            expected = np.array([float(c) if c else math.nan for c in cells])
            np.testing.assert_array_equal(frame[name].to_numpy(), expected, err_msg=name)  # NaN where NaN
    # and what pandas itself reads from the file
    read = pd.read_csv(path, keep_default_na=False, na_values=[""], **exact_floats(pd))
    pd.testing.assert_frame_equal(frame, read, check_dtype=False)


def write_cli_tables(folder: Path, tables: dict) -> Path:
    """The tables as the command line writes them (``--csv DIR``), in this process."""
    from nqf.cli.outputs import write_tables

    folder.mkdir()
    write_tables(folder, tables)
    return folder


# -- Prediction -------------------------------------------------------------------------------


def test_prediction_frames_are_the_predict_csv_tables(prediction, tmp_path):
    from nqf.report.curve_tables import prediction_tables

    frames = prediction.to_dataframes()
    assert list(frames) == ["curves", "modes"]
    folder = write_cli_tables(tmp_path / "tables", prediction_tables(prediction))
    for name, frame in frames.items():
        assert_frame_is_csv(frame, folder / f"{name}.csv")
    pd.testing.assert_frame_equal(prediction.to_dataframe(), frames["curves"])
    pd.testing.assert_frame_equal(prediction.to_dataframe("modes"), frames["modes"])
    # the numbers are the Prediction's own
    curves = frames["curves"]
    mflow = curves[curves["source"] == "mflow"]
    assert mflow["step"].tolist() == [int(t) for t in prediction.flow.steps]
    np.testing.assert_array_equal(mflow["loss"].to_numpy(), np.asarray(prediction.flow.loss, dtype=np.float64))
    modes = frames["modes"]
    lv = modes[modes["source"] == "lv"]
    assert lv["mode"].tolist() == [1, 2, 3, 4] and set(lv["convention"]) == {"occupation"}
    np.testing.assert_array_equal(lv["switch_step"].to_numpy(), prediction.lv_switch_steps)


def test_unknown_table_and_missing_pandas_are_one_line_errors(prediction, comparison, monkeypatch):
    with pytest.raises(NqfError, match="^unknown table 'points'; choose one of curves, modes$"):
        prediction.to_dataframe("points")
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    message = (
        "to_dataframe needs pandas: pip install '.[dataframe]' in nqf's clone "
        "(pip install 'nqf[dataframe]' where nqf comes from an index)"
    )
    for call in (prediction.to_dataframe, prediction.to_dataframes, comparison.to_dataframe):
        with pytest.raises(NqfError) as error:
            call()
        assert str(error.value) == message


@pytest.mark.slow  # through the real command
def test_prediction_frames_equal_the_predict_cli_csv(prediction, tmp_path):
    """The real command on the same data writes the same tables, and no PrecisionWarning (x64)."""
    X, Y = nqf.get_task("staircase").generate(0)
    data = tmp_path / "data.npz"
    np.savez(data, X=np.asarray(X), Y=np.asarray(Y))
    args = [f"--{k}={v}" for k, v in PREDICT.items()]
    out = tmp_path / "tables"
    done = subprocess.run(
        [str(NQF), "predict", "--data", str(data), "--arch", "mlp", *args, "--csv", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "PrecisionWarning" not in done.stderr and "float32" not in done.stderr, done.stderr
    for name, frame in prediction.to_dataframes().items():
        assert_frame_is_csv(frame, out / f"{name}.csv")


# -- Comparison -------------------------------------------------------------------------------


def test_comparison_frames_are_the_compare_csv_tables(comparison, tmp_path):
    from nqf.report.curve_tables import comparison_tables

    frames = comparison.to_dataframes()
    folder = write_cli_tables(tmp_path / "tables", comparison_tables(comparison))
    for name, frame in frames.items():
        assert_frame_is_csv(frame, folder / f"{name}.csv")
    pd.testing.assert_frame_equal(comparison.to_dataframe(), frames["curves"])
    pd.testing.assert_frame_equal(comparison.to_dataframe("modes"), frames["modes"])
    # one row per (source, optimizer, seed, step): every curve of every seed
    curves = frames["curves"]
    assert not curves.duplicated(["source", "optimizer", "seed", "step"]).any()
    sizes = curves.groupby(["source", "optimizer", "seed"]).size()
    assert set(sizes.index.get_level_values("source")) == {"network", "quadratic", "mflow", "lv"}
    assert set(sizes) == {COMPARE["steps"] + 1} and len(sizes) == 4 * COMPARE["seeds"]
    net = curves[(curves["source"] == "network") & (curves["seed"] == 1)]
    np.testing.assert_array_equal(net["loss"].to_numpy(), comparison.network["gd"].loss[0, 1])


@pytest.mark.slow  # through the real command
def test_comparison_frames_equal_the_compare_cli_csv(comparison, tmp_path):
    args = [f"--{k}={v}" for k, v in COMPARE.items()]
    out = tmp_path / "tables"
    done = subprocess.run(
        [str(NQF), "compare", "--task", "staircase", "--optimizers", "gd", *args, "--csv", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "PrecisionWarning" not in done.stderr, done.stderr
    for name, frame in comparison.to_dataframes().items():
        assert_frame_is_csv(frame, out / f"{name}.csv")


# -- the sweep's points table -----------------------------------------------------------------

SWEEP = """
[sweep]
mode = "predict"
[task]
name = "staircase"
samples = 64
[settings]
width = 8
steps = 300
lr = 0.05
[axes]
sigma0 = [1e-6, 1e-4]
[figures]
curves = 0
"""


def test_sweep_frame_is_the_points_table(tmp_path):
    from nqf.scans.sweep.run import SweepResult, plan_sweep, run_sweep
    from nqf.scans.sweep.table import read_table, write_table

    spec = tmp_path / "spec.toml"
    spec.write_text(SWEEP)
    out = tmp_path / "out"
    plan = plan_sweep(spec, out)
    with pytest.raises(NqfError, match="no table yet"):
        SweepResult(plan).to_dataframe()
    result = run_sweep(plan, out, quiet=True)
    assert result.table is not None and result.table.suffix == ".parquet"
    rows = read_table(result.table)
    frame = result.to_dataframe()
    assert list(frame.columns) == list(rows[0]) and len(frame) == len(rows) == 2 * 4
    for name in frame.columns:
        assert cells(frame, name) == [row[name] for row in rows], name
    assert frame["error"].tolist() == [""] * len(rows)
    assert frame["switch_mflow"].dtype == np.float64 and frame["mode"].tolist() == [1, 2, 3, 4] * 2
    # the same table as points.csv (no pyarrow) reads back to the same cells
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    csv_path = write_table(rows, csv_dir, parquet=False)
    from_csv = SweepResult(plan, table=csv_path).to_dataframe()
    assert list(from_csv.columns) == list(frame.columns)
    for name in frame.columns:
        assert cells(from_csv, name) == cells(frame, name), name


def cells(frame, name: str) -> list:
    """A column's values, None for a missing one (NaN or None)."""
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in frame[name].tolist()]


# -- float32: one PrecisionWarning per process, none with x64 -----------------------------------

_PRECISION_SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    import jax
    if sys.argv[1] == "x64":
        jax.config.update("jax_enable_x64", True)
    import nqf
    X, Y = nqf.get_task("staircase").generate(0)
    arch = nqf.get_architecture("mlp")
    config = nqf.PredictConfig(width=32, lr=0.05, steps=300, sigma0=1e-6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            p = nqf.predict(arch, X, Y, config)
    found = [(str(w.message), w.filename) for w in caught if issubclass(w.category, nqf.PrecisionWarning)]
    print(json.dumps({"dtype": str(p.flow.loss.dtype), "x64": bool(jax.config.jax_enable_x64), "found": found}))
    """
)


@pytest.mark.slow  # a second Python process
@pytest.mark.parametrize("mode", ["float32", "x64"])
def test_float32_precision_warning_subprocess(mode):
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run(
        [sys.executable, "-c", _PRECISION_SCRIPT, mode], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if mode == "x64":
        assert out["dtype"] == "float64" and out["x64"] and out["found"] == []
        return
    assert out["dtype"] == "float32" and not out["x64"]
    assert len(out["found"]) == 1, out["found"]  # two predictions, one warning
    message, filename = out["found"][0]
    assert filename == "<string>"  # points at the caller's line, not into nqf
    assert "float32" in message and "a few percent" in message
    assert "jax.config.update('jax_enable_x64', True)" in message
    assert issubclass(nqf.PrecisionWarning, UserWarning)
