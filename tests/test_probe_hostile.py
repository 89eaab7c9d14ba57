"""Issue 34, "probe again as a hostile user would": the defects found, each with its test.

The house rules: a refusal is one ``error: ...`` line (one ``NqfError`` line in the API), exit 2,
before heavy work; no traceback, no silently wrong answer, no hang, no stray write, nothing lost.
Every probe tried is listed below with its outcome: "ok, covered by" (already tested), "ok" (right
already, not tested elsewhere: tested here where cheap), "fixed" (tested here) or "left" (why).

1. Data files (``nqf.core.input_files``; ``--data``, ``--init``, ``--overlay``, ``--unit``,
   ``--task npz --path``, sweep specs, ``reproduce --config``, the output folder's own files)

   - .npz / .npy holding pickled objects: ok, covered by test_files_and_outputs.py::
     test_the_reader_refuses_what_numpy_would_load_wrongly and test_bad_inputs.py (x_object.npz,
     pickle.npz): refused from the header, nothing unpickled.
   - truncated files, headers that claim more than the file holds, zip bombs, arrays beyond the
     memory: ok, covered by test_bad_inputs.py (truncated.npz) and test_files_and_outputs.py::
     test_a_lying_array_file_is_one_line / test_an_array_larger_than_the_memory_is_one_line.
   - a FIFO as ``--data``, ``--init``, ``--overlay`` (.csv, .npy, .json), ``--unit`` or
     ``--task npz --path``: ok (probed through the real command: "is not a regular file" / "is not
     a file" at once); a FIFO in the store: covered by test_store_gc.py::
     test_a_fifo_named_like_a_record_is_reported_never_opened.
   - a FIFO as the sweep spec or ``reproduce --config``: FIXED (``nqf sweep fifo.toml`` and
     ``nqf reproduce --config fifo.toml`` hung forever in ``read_toml``): test_a_fifo_spec_or_config_
     is_refused_not_waited_on, test_read_toml_refuses_what_is_not_a_small_regular_file.
   - a 40 GiB (sparse) sweep spec or config: FIXED (MemoryError traceback): test_read_toml_refuses_
     what_is_not_a_small_regular_file.
   - ``nqf report --out DIR`` whose manifest.json is a FIFO: FIXED (hung); a 40 GiB manifest.json:
     FIXED (the process was killed for memory, exit 137): test_a_manifest_that_is_a_fifo_or_huge_is_
     one_line.
   - a symbolic link to a folder as ``--data`` / ``--init`` / ``--overlay`` / ``--unit`` / spec /
     config: ok ("is a folder" / "is not a file"); folders: covered by test_bad_inputs.py
     (folder.npz, reproduce-config-folder).
   - an empty file as ``--data`` / ``--init`` / ``--overlay`` / spec: ok, covered by
     test_bad_inputs.py (empty.npz, curve_empty.csv); an empty .npy / .json overlay, an empty
     ``--unit`` .py ("has no function"): ok; an empty ``reproduce --config``: ok (the defaults).
   - left: ``--data`` / ``--init`` errors name the file but not the option (``error: w.npz is not a
     regular file``); cosmetic, and the CLI is being edited by the other helper of this round.

2. Text that reaches report.html or a figure

   - markup (``<script>``, ``&``) in an experiment's title, description, run names, errors and
     problem lines (e.g. a record whose values were replaced by ``"<script>x</script>&"`` and its
     checksum recomputed): ok, every field goes through ``html.escape``; pinned by
     test_the_report_escapes_markup_wherever_it_comes_from.
   - ``reproduce --set`` with markup or ``$``: E4.train_models, E6.optimizers, E5.cases: ok (checked
     names: refused in one line); E5.fixed_activation was not checked with the config (the
     other runs ran, then one failed: the refusal came after the heavy work): found here, fixed in
     parallel by the other helper of this round, covered by tests/test_probe_round4.py::
     test_reproduce_refuses_a_set_value_before_any_run (so not tested again here).
   - a ``$`` pair in a name drawn in a figure (``--overlay 'm$\\frac$x.csv'``, a ``--unit`` file named
     ``u$\\frac$x.py``, a returned Architecture named ``$\\frac$``, a task or data file name): FIXED
     (matplotlib parsed it as mathtext: a ValueError traceback while saving, exit 1):
     test_dollars_in_names_are_drawn_as_typed.
   - markup in a data file name, an overlay file name or an architecture name in a figure: ok
     (matplotlib draws text, not HTML).
   - sweep figures: ok (they draw only checked names: optimizers, modes, numbers).

3. Two ``nqf reproduce --quick --only E1 --out SAME`` at once: ok (probed through the real command:
   both exit 0, each run computed once, no .lock or .tmp left, every record sound); covered by
   test_reproduce.py::test_two_concurrent_reproduce_processes_compute_each_run_once; kills and
   resumption by test_reproduce_kill.py.

4. Tampered stores (what test_store_tamper.py does not cover)

   - a 40 GiB (sparse) record file: FIXED (``read_regular`` read it whole: killed for memory);
     reported as one problem line and recomputed: test_a_huge_record_is_reported_and_recomputed.
   - a 40 GiB store marker (nqf-store.json): FIXED with the same limit (1 MiB for a marker):
     test_a_huge_record_is_reported_and_recomputed.
   - a record with valid JSON, header and a recomputed checksum, but values of the wrong type
     (strings, dicts, nested lists, lists cut short, emptied, NaN, negative losses, bools): ok,
     "summarising failed: <Type>: ..." in the report and the table, never a traceback; a checksum
     is not a signature, so a forger who recomputes it is believed (a record of plausible numbers
     cannot be told from a real one). Left: negative forged losses print matplotlib's
     RuntimeWarnings on stderr (the figures then fail in one problem line).
   - header fields of the wrong type (config a string, record a list): ok, covered by
     test_store_tamper.py (config of the wrong type, record of the wrong type).

5. The Python API (``nqf.predict``, ``nqf.train``, ``nqf.compare`` and their configs)

   - NaN / inf in X or Y, empty arrays, complex targets, ragged lists, seeds: ok, covered by
     test_api_arguments.py and test_bad_inputs.py; -inf in X, inf in Y (train and predict): ok.
   - float16 X: FIXED (numpy's "overflow encountered in cast" RuntimeWarning from the bound
     check): test_float16_data_passes_the_finite_check_without_a_warning.
   - float32, int, bool X; int Y (N, K); big-endian, Fortran-ordered and strided X; a list of
     lists; a single sample; a duplicated (rank-deficient) column; X or Y all zero (one line: C
     vanishes); a pandas DataFrame / Series (pandas 3.1.1), with an object column or pd.NA (one
     line): ok (probed, the same switch-on steps as float64 where the data are the same).
   - a masked array with masked values: FIXED (the masked values were used silently):
     test_a_masked_array_with_masked_values_is_refused.
   - traced values (``jax.jit`` / ``vmap`` / ``grad`` around ``nqf.predict`` or ``nqf.train``, a
     traced ``lr`` in the config): FIXED (the message blamed "a ragged nested list", and a traced
     lr was a TracerArrayConversionError traceback): test_traced_arguments_are_one_line. A traced
     lr in ``CompareConfig``: ok ("learning rate must be a positive finite number, got JitTracer").
   - ``predict`` / ``train`` given an int or None as the architecture, a dict or the other entry's
     config: FIXED (AttributeError tracebacks): test_wrong_kinds_of_arch_or_config_are_one_line.
   - config numbers of the wrong kind: FIXED (``PredictConfig(sigma0="0.1")``, lists, None,
     complex, 2-element arrays for lr / sigma0 / beta were TypeError or ValueError tracebacks;
     ``lr=True`` and ``np.complex128`` were accepted; ``TrainConfig`` beta / eps likewise;
     ``CompareConfig(optimizers=None)`` and ``learning_rates=0.1`` were TypeErrors; ``check_lr="no"``
     was taken as true): test_config_numbers_must_be_real_numbers. NumPy scalars: FIXED
     (``TrainConfig(lr=np.float32(0.05))`` and ``CompareConfig(beta=np.float32(0.5))`` were refused
     as "not a positive finite number"): test_numpy_scalars_are_taken_as_their_floats. An int beyond
     float's range (10**400) as ``TrainConfig.sigma0`` or ``CompareConfig.lr``: FIXED (OverflowError
     tracebacks): test_config_numbers_must_be_real_numbers.
   - left: a name field (optimizer, route, model) given as a 2-element NumPy array raises numpy's
     "truth value of an array is ambiguous" ValueError; ``closure_fraction=True`` is taken as 1.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import nqf
from nqf.core.errors import NqfError

pytestmark = pytest.mark.no_shape_checks  # ill-typed arguments on purpose: nqf's own refusal is tested


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def run_cli(args: list[str], capfd) -> tuple[int, str, str]:
    """``nqf ARGS`` in this process: (exit status, stdout, stderr)."""
    from nqf.cli import main

    capfd.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capfd.readouterr()
    return code, out, err


def assert_one_error_line(code: int, err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-2000:])
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def staircase():
    task = nqf.get_task("staircase")
    X, Y = (np.asarray(a) for a in task.generate(0))
    return task, task.architecture(), X, Y


def predict_config(**change) -> nqf.PredictConfig:
    return nqf.PredictConfig(**{"width": 8, "lr": 0.05, "steps": 60, "sigma0": 1e-3, **change})


# -- 1. files that are not small regular files -----------------------------------------------------


@pytest.mark.timeout(120)  # before the fix: blocked forever opening the FIFO
@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_a_fifo_spec_or_config_is_refused_not_waited_on(command, tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    if command == "sweep":
        args = ["sweep", fifo, "--out", tmp_path / "out", "--dry-run"]
    else:
        args = ["reproduce", "--only", "E1", "--config", fifo, "--out", tmp_path / "out"]
    code, out, err = run_cli(args, capfd)
    assert_one_error_line(code, err, "is not a regular file (a FIFO, socket or device)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]  # nothing written


@pytest.mark.timeout(60)
def test_read_toml_refuses_what_is_not_a_small_regular_file(tmp_path):
    from nqf.core.input_files import MAX_TOML_BYTES, read_toml

    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as handle:
        handle.truncate(40 * 2**30)  # sparse: no disk, and never read
    with pytest.raises(NqfError, match=r"holds 40 GiB, more than the 16 MiB a TOML spec or config may take") as err:
        read_toml(huge, "spec huge.toml")
    one_line(err)
    edge = tmp_path / "edge.toml"
    edge.write_bytes(b"# " + b"x" * (MAX_TOML_BYTES - 3) + b"\n")  # exactly the limit: read
    assert read_toml(edge, "spec edge.toml") == {}
    if Path("/dev/zero").exists():  # a device would never end
        with pytest.raises(NqfError, match=r"is not a regular file"):
            read_toml("/dev/zero", "config file '/dev/zero'")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link.toml").symlink_to(tmp_path / "folder")
    with pytest.raises(NqfError, match=r"spec link.toml is a folder, not a TOML file"):
        read_toml(tmp_path / "link.toml", "spec link.toml")
    (tmp_path / "ok.toml").write_text("[E1]\nsigma0 = 1e-8\n")
    assert read_toml(tmp_path / "ok.toml", "config") == {"E1": {"sigma0": 1e-8}}


@pytest.mark.timeout(120)
def test_a_manifest_that_is_a_fifo_or_huge_is_one_line(tmp_path, capfd):
    from nqf.paper.plan import read_manifest
    from nqf.store.results import MAX_READ_BYTES

    fifo_out = tmp_path / "fifo"
    fifo_out.mkdir()
    os.mkfifo(fifo_out / "manifest.json")
    code, out, err = run_cli(["report", "--out", fifo_out], capfd)
    assert_one_error_line(code, err, "manifest.json is a FIFO, not a regular file")
    assert sorted(p.name for p in fifo_out.iterdir()) == ["manifest.json"]

    huge_out = tmp_path / "huge"
    huge_out.mkdir()
    with open(huge_out / "manifest.json", "wb") as handle:
        handle.truncate(MAX_READ_BYTES + 1)  # sparse; before the fix read whole (40 GiB: killed)
    with pytest.raises(NqfError, match=r"manifest.json holds 256.0 MiB, more than the 256.0 MiB nqf reads") as err:
        read_manifest(huge_out)
    one_line(err)


# -- 4. a huge record or marker in a results store -------------------------------------------------


def test_a_huge_record_is_reported_and_recomputed(tmp_path):
    from nqf.store.maintenance import summarise
    from nqf.store.results import MARKER, MAX_READ_BYTES, ResultsStore, read_marker

    config, record = {"seed": 0}, {"loss": [1.0, 0.5]}
    store = ResultsStore(tmp_path)
    store.put("E1", "gd", config, record)
    path = store.path("E1", store.key("E1", "gd", config))
    with open(path, "r+b") as handle:
        handle.truncate(MAX_READ_BYTES + 1)  # sparse: a huge file, no disk taken, never read

    damaged = ResultsStore(tmp_path, recompute=True)
    assert damaged.get("E1", "gd", config) is None and list(damaged.scan()) == []
    (line,) = damaged.problems
    assert line == f"runs/E1/{path.name}: 256.0 MiB, more than the 256.0 MiB nqf reads (not read); to be recomputed"
    summary = summarise(tmp_path)
    assert summary.experiments["E1"]["damaged"] == 1, summary.experiments
    damaged.put("E1", "gd", config, record)  # the recomputation replaces it
    assert ResultsStore(tmp_path).get("E1", "gd", config) == record

    with open(tmp_path / MARKER, "r+b") as handle:
        handle.truncate(2**20 + 1)
    assert read_marker(tmp_path) == (None, "nqf-store.json holds 1.0 MiB, more than the 1.0 MiB nqf reads")


# -- 2. text in report.html and in figures --------------------------------------------------------


def test_the_report_escapes_markup_wherever_it_comes_from():
    from nqf.paper._base import ExperimentOutcome, RunStatus
    from nqf.paper.report_page import render_report

    attack = "<script>alert(1)</script>&<img src=x onerror=alert(2)>"
    outcome = ExperimentOutcome(
        name="E1",
        title=f"title {attack}",
        description=f"description {attack}",
        config={"label": attack},
        runs=(RunStatus(f"run {attack}", "a" * 64, "failed", f"ValueError: {attack}"),),
        result=None,
        error=f"summarising failed: ValueError: could not convert string to float: {attack!r}",
    )
    page = render_report([outcome], {}, [f"runs/E1/x.json: {attack}"], mode="quick", version=f"0 {attack}")
    assert "<script>alert" not in page and "<img src=x" not in page and "onerror=alert(2)>" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;&amp;&lt;img src=x onerror=alert(2)&gt;") >= 6


def test_dollars_in_names_are_drawn_as_typed(staircase, tmp_path):
    """A ``$`` pair in an architecture's name (the title) and in an overlay file's name (the
    legend) was mathtext to matplotlib: ``$\\frac$`` failed to parse when the figure was saved."""
    from matplotlib.figure import Figure

    from nqf.comparison.curves import compare_overlay, read_loss_curve
    from nqf.report._style import plain_text
    from nqf.report.predict_plot import plot_prediction

    _, arch, X, Y = staircase
    prediction = dataclasses.replace(nqf.predict(arch, X, Y, predict_config()), arch_name="u$\\frac$x.py:f <b>&")
    curve = tmp_path / "m$\\frac$x.csv"
    curve.write_text("step,loss\n" + "".join(f"{t},{2.0 / (1 + t)}\n" for t in range(1, 60)))
    overlay = compare_overlay(read_loss_curve(curve), prediction)
    written = plot_prediction(prediction, tmp_path / "p.png", overlay)
    assert written.is_file() and written.stat().st_size > 0

    assert plain_text("a $x$ and $\\frac$") == "a \\$x\\$ and \\$\\frac\\$"
    fig = Figure()
    text = fig.text(0.5, 0.5, plain_text("$\\frac$ costs $5"))
    fig.canvas.draw()  # draws without parsing mathtext
    assert text.get_window_extent().width > 0


# -- 5. the Python API ----------------------------------------------------------------------------


def test_float16_data_passes_the_finite_check_without_a_warning():
    from nqf.theory.data_matrices.checks import check_finite

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" was a RuntimeWarning
        check_finite("inputs X", np.ones((4, 3), dtype=np.float16))
        with pytest.raises(NqfError, match=r"inputs X contains 1 non-finite value"):
            check_finite("inputs X", np.array([[1.0, np.inf]], dtype=np.float16))
        with pytest.raises(NqfError, match=r"of magnitude above 1e\+30"):
            check_finite("inputs X", np.array([[1.0, 1e31]], dtype=np.float32))


def test_a_masked_array_with_masked_values_is_refused(staircase):
    _, arch, X, Y = staircase
    masked = np.ma.masked_array(X, mask=np.abs(X) > 2)
    count = int(np.count_nonzero(np.abs(X) > 2))
    with pytest.raises(NqfError, match=rf"inputs X is a masked array with {count} masked value\(s\)") as err:
        nqf.predict(arch, masked, Y, predict_config())
    one_line(err)
    with pytest.raises(NqfError, match=r"targets Y is a masked array"):
        nqf.train(arch, X, np.ma.masked_array(Y, mask=Y > 1), nqf.TrainConfig(width=8, lr=0.05, steps=20))
    from nqf.core.arguments import real_array

    assert real_array("X", np.ma.masked_array([1.0, 2.0])).tolist() == [1.0, 2.0]  # nothing masked: taken


def test_traced_arguments_are_one_line(staircase):
    _, arch, X, Y = staircase
    traced = "is a traced JAX value (inside jax.jit, vmap or grad)"
    cases = {
        "inputs X": lambda: jax.jit(lambda x: nqf.predict(arch, x, Y, predict_config()).flow.loss)(X),
        "targets Y": lambda: jax.jit(lambda y: nqf.train(arch, X, y, nqf.TrainConfig(width=8, steps=20)).loss)(Y),
        "config.lr": lambda: jax.jit(lambda lr: nqf.predict(arch, X, Y, predict_config(lr=lr)).flow.loss)(0.05),
        "inputs X ": lambda: jax.vmap(lambda x: nqf.predict(arch, [x], Y[:1], predict_config()).flow.loss)(X[:2]),
    }
    for name, call in cases.items():
        with pytest.raises(NqfError) as err:
            call()
        # JAX appends its note on filtered frames to an exception raised while it traces: the line is nqf's
        first = str(err.value).splitlines()[0]
        assert first.startswith(f"{name.strip()} {traced}: nqf.predict, nqf.train and nqf.compare read"), first


def test_wrong_kinds_of_arch_or_config_are_one_line(staircase):
    _, arch, X, Y = staircase
    train_config = nqf.TrainConfig(width=8, lr=0.05, steps=20)
    cases = [
        (lambda: nqf.predict(3, X, Y, predict_config()), "predict needs an architecture .* or its name, got int"),
        (lambda: nqf.predict(None, X, Y, predict_config()), "got NoneType"),
        (lambda: nqf.predict(arch, X, Y, {"width": 8}), "predict needs a PredictConfig as its config, got dict"),
        (lambda: nqf.predict(arch, X, Y, train_config), "predict needs a PredictConfig as its config, got TrainConfig"),
        (lambda: nqf.train(None, X, Y, train_config), "train needs an architecture .* or its name, got NoneType"),
        (lambda: nqf.train(arch, X, Y, predict_config()), "train needs a TrainConfig as its config, got PredictConfig"),
    ]
    for call, message in cases:
        with pytest.raises(NqfError, match=message) as err:
            call()
        one_line(err)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: predict_config(sigma0="0.1"), r"sigma0 must be a positive finite number, got '0.1'"),
        (lambda: predict_config(sigma0=None), r"sigma0 must be a positive finite number, got None"),
        (lambda: predict_config(lr=[0.1]), r"learning rate must be a positive finite number, got \[0.1\]"),
        (lambda: predict_config(lr=True), r"learning rate must be a positive finite number, got True"),
        (lambda: predict_config(lr=np.complex128(0.1)), r"learning rate must be a positive finite number"),
        (lambda: predict_config(lr=np.array([0.1, 0.2])), r"learning rate must be a positive finite number"),
        (lambda: predict_config(optimizer="momentum", beta="0.5"), r"momentum beta must lie in \[0, 1\), got '0.5'"),
        (lambda: predict_config(check_lr="no"), r"check_lr must be True or False, got 'no'"),
        (lambda: nqf.TrainConfig(lr=True), r"learning rate must be a positive finite number, got True"),
        (lambda: nqf.TrainConfig(optimizer="momentum", beta="x"), r"beta must lie in \[0, 1\), got 'x'"),
        (lambda: nqf.TrainConfig(optimizer="adam", eps=[1e-8]), r"eps must be >= 0, got \[1e-08\]"),
        (lambda: nqf.CompareConfig(optimizers=None), r"optimizers must be a name or names of optimizers, got None"),
        (lambda: nqf.CompareConfig(learning_rates=0.1), r"learning_rates must be \(optimizer, lr\) pairs or a mapping"),
        (lambda: nqf.CompareConfig(learning_rates=[0.1]), r"learning_rates must be \(optimizer, lr\) pairs"),
        # ints beyond float's range: OverflowError tracebacks before
        (lambda: nqf.TrainConfig(sigma0=10**400), r"sigma0 must be a finite number >= 0, got 1000"),
        (lambda: nqf.CompareConfig(lr=10**400), r"learning rate must be a positive finite number, got 1000"),
        (lambda: predict_config(lr=10**400), r"learning rate must be a positive finite number, got 1000"),
    ],
)
def test_config_numbers_must_be_real_numbers(make, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.complex128 was accepted with a ComplexWarning
        with pytest.raises(NqfError, match=message) as err:
            make()
    one_line(err)


def test_numpy_scalars_are_taken_as_their_floats():
    config = nqf.TrainConfig(lr=np.float32(0.05), sigma0=np.float32(1e-3), optimizer="momentum", beta=np.float16(0.5))
    assert type(config.lr) is float and config.lr == float(np.float32(0.05))
    assert type(config.beta) is float and config.beta == 0.5 and type(config.sigma0) is float
    assert nqf.TrainConfig(lr=1).lr == 1  # Python numbers stay as given (store keys unchanged)
    compare = nqf.CompareConfig(optimizers=("momentum",), beta=np.float32(0.5))
    assert type(compare.beta) is float and json.dumps(compare.beta) == "0.5"
    assert predict_config(lr=np.float32(0.05), optimizer="momentum", beta=np.float64(0.5)).lr == np.float32(0.05)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: nqf.PredictConfig(width=4, lr=0.1, steps=10, optimizer=np.array(["gd", "gd"])), "optimizer must be"),
        (lambda: nqf.PredictConfig(width=4, lr=0.1, steps=10, route=np.array(["a", "b"])), "route must be a name"),
        (lambda: nqf.TrainConfig(model=np.array(["network", "x"])), "model must be a name"),
        (lambda: nqf.TrainConfig(optimizer=np.array(["gd", "x"])), "unknown optimizer"),
    ],
)
def test_a_name_given_as_an_array_is_one_line(make, message):
    """A name field given as a NumPy array raised NumPy's "truth value is ambiguous" ValueError."""
    with pytest.raises(NqfError, match=message):
        make()


def test_closure_fraction_true_is_not_taken_as_one():
    from nqf.comparison.config import CompareConfig

    with pytest.raises(NqfError, match="closure_fraction must lie in"):
        CompareConfig(width=4, sigma0=1e-3, lr=0.1, steps=10, closure_fraction=True)
