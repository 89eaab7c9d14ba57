"""CLI polish (issue 23, item 6): tables that are never cut, ``--help`` without ``<bool>`` and
without ragged breaks, the sweep's time left, and the sweep table's ``exponent`` column.

The tests that start the console script are marked slow (``tests/conftest.py``); the rest
render in this process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

NQF = str(Path(sys.executable).with_name("nqf"))

# -- 1. tables: whole headers when piped, the width of COLUMNS when it is set -----------------------

PREDICTION_HEADERS = ("mode", "c_k", "m_k*", "switch-on step", "plateau loss")  # the prediction: the M-flow
MODES_HEADERS = ("mode", "LV (map)", "LV (flow)", "closed form", "vanishing init", "limit plateau")  # the analysis


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "FORCE_TERMINAL")}
    env.update(extra)
    return env


def _nqf(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """The console script with stdout and stderr piped (not terminals), stdin closed."""
    proc = subprocess.run(
        [NQF, *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=_env() if env is None else env,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _fake_prediction(modes: int = 4) -> dict:
    """The keys of ``Prediction.to_json()`` that ``nqf.cli.predict.modes_table`` reads, with long numbers."""
    numbers = [1.234567e-05 * (k + 1) for k in range(modes)]
    lv = {
        key: numbers
        for key in (
            "growth",
            "fixed_point",
            "switch_steps",
            "continuous_switch_steps",
            "closed_form_switch_steps",
            "plateau_losses",
        )
    }
    rows = [
        {"modes": [k + 1], "growth": v, "fixed_point": v, "switch_step": v, "plateau_loss": v}
        for k, v in enumerate(numbers)
    ]
    return {
        "prediction": {"modes": rows},
        "lv": lv,
        "mflow": {"switch_steps": numbers},
        "singular_limit": {"switch_steps": numbers},
    }


def test_piped_table_keeps_every_header_whole(monkeypatch, capsys):
    from nqf.cli.outputs import print_table, stdout_console
    from nqf.cli.predict import modes_table, prediction_table

    monkeypatch.delenv("COLUMNS", raising=False)
    console = stdout_console()
    long_line = "a line longer than eighty columns, " * 4
    console.print(long_line.strip())
    print_table(console, prediction_table(_fake_prediction()))
    print_table(console, modes_table(_fake_prediction()))
    text = capsys.readouterr().out
    assert "…" not in text
    assert long_line.strip() in text.splitlines()  # piped prose is not wrapped either
    for headers, marker in ((PREDICTION_HEADERS, "switch-on step"), (MODES_HEADERS, "vanishing init")):
        header = next(line for line in text.splitlines() if marker in line and "┃" in line)
        for name in headers:
            assert name in header, (name, header)
    assert "1.235e-05" in text


def test_columns_wins_and_headers_fold_rather_than_cut(monkeypatch, capsys):
    from nqf.cli.outputs import print_table, stdout_console
    from nqf.cli.predict import modes_table

    monkeypatch.setenv("COLUMNS", "60")
    print_table(stdout_console(), modes_table(_fake_prediction()))
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 60
    assert not any("…" in line for line in lines)  # folded onto more lines, not cut


@pytest.mark.slow
def test_predict_piped_through_the_cli_cuts_no_header(tmp_path):
    import nqf

    X, Y = nqf.get_task("staircase", samples=64).generate(0)
    data = tmp_path / "staircase.npz"
    np.savez(data, X=X, Y=Y)
    proc = _nqf(
        "predict", "--data", data, "--arch", "mlp", "--inputs", 8, "--outputs", 4, "--width", 8,
        "--sigma0", 1e-6, "--lr", 0.05, "--steps", 300,
    )  # fmt: skip
    out = proc.stdout
    assert "…" not in out
    for headers, marker in ((PREDICTION_HEADERS, "switch-on step"), (MODES_HEADERS, "vanishing init")):
        header = next(line for line in out.splitlines() if marker in line and "┃" in line)
        for name in headers:
            assert name in header, (name, header)
    assert any(line.startswith("M-flow: ") and line.endswith("jumps)") for line in out.splitlines()), out


@pytest.mark.slow
def test_structure_piped_through_the_cli_cuts_nothing():
    """``nqf structure --list`` and ``nqf structure mlp`` piped: every row whole (they were cut at
    80 columns: the list's descriptions, the closed form)."""
    listing = _nqf("structure", "--list").stdout
    assert "…" not in listing
    assert "mixture of 4 experts (softmax gate), f = sum_e g_e(u.x) a_e sigma(v_e.x)" in listing
    blocks = _nqf("structure", "mlp").stdout
    assert "…" not in blocks
    assert "A_c = sigma'(0)/2 (e_c x^T + x e_c^T), sigma'(0) = 1" in blocks


@pytest.mark.slow
def test_compare_piped_through_the_cli_cuts_no_header():
    proc = _nqf(
        "compare", "--task", "staircase", "--samples", 64, "--width", 8, "--sigma0", 1e-6, "--lr", 0.05,
        "--steps", 200, "--seeds", 2,
    )  # fmt: skip
    out = proc.stdout
    assert "…" not in out
    lines = out.splitlines()
    for headers in (
        ("mode", "c_k", "limit", "LV", "M-flow", "quad.", "L limit", "L M-flow", "L quad."),
        ("mode", "optimizer", "M-flow", "network", "sd", "vs M-flow", "own thr.", "plateau"),
        ("optimizer", "until step", "max M defect", "max update defect"),
    ):
        assert any(all(name in line for name in headers) for line in lines), (headers, out)


# -- 2. --help: no <bool>, no ragged breaks, no JAX ----------------------------------------------------

HELPS = (
    (),
    ("predict",),
    ("compare",),
    ("structure",),
    ("sweep",),
    ("reproduce",),
    ("report",),
    ("store",),
    ("store", "ls"),
    ("store", "gc"),
)

_HELP_SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from nqf.cli import main
    helps = {}
    for args in json.loads(sys.argv[1]):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            try:
                main([*args, "--help"])
            except SystemExit as exit:
                code = exit.code
            else:
                code = 0
        helps[" ".join(args)] = {"code": code, "text": buffer.getvalue()}
    print(json.dumps({"helps": helps, "jax": "jax" in sys.modules, "numpy": "numpy" in sys.modules}))
    """
)


@pytest.mark.slow
def test_every_help_subprocess_shows_no_bool_breaks_no_phrase_and_loads_no_jax():
    proc = subprocess.run(
        [sys.executable, "-c", _HELP_SCRIPT, json.dumps(HELPS)],
        capture_output=True,
        text=True,
        env=_env(COLUMNS="200"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert not report["jax"] and not report["numpy"]
    for args in HELPS:
        name = " ".join(args)
        shown = report["helps"][name]
        assert shown["code"] in (0, None), (name, shown)
        assert "Usage:" in shown["text"], name
        assert "<bool>" not in shown["text"], (name, shown["text"])
    helps = report["helps"]
    # a flag shows no type, an option that takes a value does
    json_row = next(line for line in helps["predict"]["text"].splitlines() if "--json" in line)
    assert "Print the prediction as JSON." in json_row and "<" not in json_row
    assert any("--width" in line and "<int>" in line for line in helps["predict"]["text"].splitlines())
    # a docstring's later paragraph is rewrapped whole, not broken where the source broke it
    assert "(--executor ray, --address)" in helps["reproduce"]["text"]


# -- 3. the sweep's time left --------------------------------------------------------------------------


def test_eta_from_the_points_finished():
    from nqf.scans.sweep.run import eta_seconds

    assert eta_seconds(0.0, 0.0, 0, 10, 5.0) is None  # nothing finished yet
    assert eta_seconds(0.0, 20.0, 4, 10, 20.0) == pytest.approx(30.0)  # 5 s a point, 6 left
    assert eta_seconds(0.0, 20.0, 4, 10, 26.0) == pytest.approx(24.0)  # counts down between points
    assert eta_seconds(0.0, 20.0, 4, 10, 100.0) == 0.0  # never negative
    assert eta_seconds(0.0, 20.0, 10, 10, 20.0) == 0.0


def test_progress_shows_time_left_on_a_terminal_only(monkeypatch):
    import nqf.scans.sweep.run as run

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert run._progress(10, quiet=False) is None  # piped stderr: no bar, no time left
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert run._progress(10, quiet=True) is None
    progress = run._progress(10, quiet=False)
    assert progress is not None
    now = time.monotonic()
    task_id = progress.add_task("sweep", total=10, completed=2, note="", started=now - 40, last=now, finished=0, todo=8)
    column = progress.columns[-1]
    task = progress.tasks[0]
    assert "-:--:--" in column.render(task).plain  # before the first point
    progress.update(task_id, completed=6, finished=4, last=now)
    left = column.render(task).plain  # 10 s a point, 4 left: about 40 s
    assert left.endswith(" left") and left.startswith("0:00:"), left
    assert 35 <= int(left.split()[0].split(":")[-1]) <= 40, left


# -- 4. the exponent column of a predict sweep -----------------------------------------------------------


def _rows(exponents: dict[int, list]) -> list[dict]:
    """Predict-table rows: per point, one row per mode with that point's exponent."""
    return [
        {"point": point, "mode": k + 1, "growth": 1.0, "exponent": value, "seconds": 1.0, "error": ""}
        for point, values in exponents.items()
        for k, value in enumerate(values)
    ]


def test_exponent_column_is_float_with_nan_or_left_out_with_a_note(tmp_path):
    pandas = pytest.importorskip("pandas")
    from nqf.core.dataframes import points_frame
    from nqf.scans.sweep.table import columns_of, table_notes, write_table

    some = _rows({0: [None] * 12, 1: [1.5] * 12})
    for parquet in (True, False) if _have_pyarrow() else (False,):
        folder = tmp_path / f"some-{parquet}"
        folder.mkdir()
        frame = points_frame(write_table(some, folder, parquet=parquet))
        assert frame["exponent"].dtype == np.float64
        assert frame["exponent"].isna().tolist() == [True] * 12 + [False] * 12
        assert table_notes(some, "predict") == []
    none = _rows({0: [None] * 12, 1: [None] * 3})
    assert "exponent" not in columns_of(none)
    folder = tmp_path / "none"
    folder.mkdir()
    assert "exponent" not in pandas.read_csv(write_table(none, folder, parquet=False)).columns
    rows = [{k: v for k, v in row.items() if k != "exponent"} for row in none]
    (note,) = table_notes(rows, "predict")
    assert "failed at all 1 point(s) with 10 or more growing modes" in note
    (few,) = table_notes(_rows({0: [None] * 4, 1: [None] * 3}), "predict")
    assert "at least 10 growing modes, and every point has fewer (at most 4)" in few
    assert table_notes(rows, "compare") == []
    failed_only = [{"point": 0, "mode": None, "seconds": None, "error": "boom"}]
    assert table_notes(failed_only, "predict") == []  # no record: nothing to explain


def _have_pyarrow() -> bool:
    from nqf.scans.sweep.table import have_pyarrow

    return have_pyarrow()


POWERLAW_SPEC = """
[sweep]
mode = "predict"
[task]
name = "powerlaw"
[settings]
width = 32
lr = 0.05
sigma0 = 1e-6
[axes]
steps = {steps}
[figures]
curves = 0
"""


@pytest.mark.slow
def test_powerlaw_sweep_cli_fills_the_exponent_or_says_why_not(tmp_path):
    """The powerlaw task (32 modes): 12000 steps give the M-flow loss a fit, 1000 do not (the loss
    above the fixed point's spans < 4 decades). Both points: a float column, NaN at the short one.
    The short point alone: no column, one note line."""
    pandas = pytest.importorskip("pandas")
    both = tmp_path / "both.toml"
    both.write_text(POWERLAW_SPEC.format(steps="[1000, 12000]"))
    out = tmp_path / "both"
    proc = _nqf("sweep", both, "--out", out, "--quiet", timeout=600)
    assert "2 computed" in proc.stdout and "note:" not in proc.stdout, proc.stdout
    frame = _frame(pandas, out)
    assert frame["exponent"].dtype == np.float64
    by_point = frame.groupby("point")["exponent"]
    assert by_point.apply(lambda s: s.isna().all()).tolist() == [True, False]
    assert math.isfinite(by_point.first()[1])

    short = tmp_path / "short.toml"
    short.write_text(POWERLAW_SPEC.format(steps="[1000]"))
    proc = _nqf("sweep", short, "--out", tmp_path / "short", "--quiet", timeout=600)
    assert "0 failed" in proc.stdout, proc.stdout
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "no exponent column" in notes[0] and "4 decades" in notes[0], proc.stdout
    assert "exponent" not in _frame(pandas, tmp_path / "short").columns


def _frame(pandas, out: Path):
    parquet = out / "points.parquet"
    return pandas.read_parquet(parquet) if parquet.exists() else pandas.read_csv(out / "points.csv")


@pytest.mark.slow
def test_a_reader_that_leaves_early_is_not_an_error(tmp_path):
    """``nqf ... | head``: the reader closes the pipe before nqf writes (here before it starts);
    the text is dropped, the command finishes its work and its files, exit 0, nothing on stderr
    (it was a BrokenPipeError traceback and exit 1, which failed the tutorial's
    ``set -o pipefail`` cells now and then)."""
    import nqf

    X, Y = nqf.get_task("staircase", samples=64).generate(0)
    data = tmp_path / "staircase.npz"
    np.savez(data, X=X, Y=Y)
    for args in (
        ["structure", "--list"],
        ["predict", "--data", data, "--arch", "mlp", "--width", 8, "--sigma0", 1e-6, "--lr", 0.05, "--steps", 300,
         "--csv", tmp_path / "tables"],
    ):  # fmt: skip
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first write
        try:
            proc = subprocess.run(
                [NQF, *map(str, args)], stdout=write, stderr=subprocess.PIPE, text=True, env=_env(), timeout=300
            )
        finally:
            os.close(write)
        assert proc.returncode == 0, (args[0], proc.returncode, proc.stderr)
        assert proc.stderr == "", (args[0], proc.stderr)
    assert (tmp_path / "tables" / "modes.csv").exists()  # the work after the text was done
