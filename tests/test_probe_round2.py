"""Findings of the second hostile probe: silent wrong answers and tracebacks at the public API."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nqf
from nqf.core.errors import NqfError
from nqf.core.measure import switch_steps_own
from nqf.training.tasks import TASKS

NQF = Path(sys.executable).parent / "nqf"

# -- 1. boolean task options are real booleans -------------------------------------------


def _bool_options():
    return [
        (name, option)
        for name, cls in TASKS.items()
        for option, default in nqf.task_options(name).items()
        if isinstance(default, bool)
    ]


@pytest.mark.parametrize("name, option", _bool_options())
@pytest.mark.parametrize("value", ["false", "no", "", 0, 1, None, 1.0])
def test_boolean_task_option_refuses_what_is_no_bool(name, option, value):
    with pytest.raises(NqfError, match=rf"^task {name}: option {option} must be true or false, got {value!r}$"):
        nqf.get_task(name, **{option: value})


def test_boolean_task_option_refused_when_the_class_is_built_directly():
    from nqf.training.tasks import Staircase

    with pytest.raises(NqfError, match="whiten must be true or false, got 'false'"):
        Staircase(whiten="false")


def test_boolean_task_option_takes_python_and_numpy_bools():
    plain = nqf.get_task("staircase", whiten=False)
    from_numpy = nqf.get_task("staircase", whiten=np.bool_(False))
    assert from_numpy.whiten is False and from_numpy == plain  # a Python bool: hashable, JSON-ready
    X, _ = from_numpy.generate(0, "float64")
    assert not np.allclose(np.asarray(X).T @ np.asarray(X) / X.shape[0], np.eye(8))  # not whitened


# -- 2. own-threshold switch steps of diverged runs and of modes that never switched on --


@pytest.fixture(scope="module")
def diverging_comparison():
    """The probe's case: adam at lr 100 diverges at step 1; within 50 GD steps only mode 1 of the
    quadratic model reaches m_1*/2 (at step 48), the network's modes none."""
    config = nqf.CompareConfig(
        width=8,
        sigma0=1e-3,
        steps=50,
        lr=0.05,
        optimizers=("gd", "adam"),
        learning_rates={"adam": 100.0},
        closure=False,
    )
    return nqf.compare(nqf.get_task("staircase"), None, config)


def test_own_threshold_is_nan_for_a_diverged_run(diverging_comparison):
    c = diverging_comparison
    assert c.network["adam"].diverged_at[0, 0] >= 0
    assert np.all(np.isnan(c.network_switch_own["adam"]))  # was 0, 0, 0, 0: every mode "at step 0"
    for row in c.to_json()["modes"]:
        assert row["measured_own_threshold"]["network"]["adam"] is None


def test_own_threshold_is_nan_for_modes_that_never_switched_on(diverging_comparison):
    c = diverging_comparison
    common_quad, own_quad = c.quadratic_switch[0], c.quadratic_switch_own[0]
    assert math.isfinite(common_quad[0]) and np.all(np.isnan(common_quad[1:]))
    assert math.isfinite(own_quad[0])  # the mode that switched on keeps its own-threshold step
    assert np.all(np.isnan(own_quad[1:]))  # was 46, 42, 34: mode 4 "before" mode 1
    assert np.all(np.isnan(c.network_switch["gd"])) and np.all(np.isnan(c.network_switch_own["gd"]))


def test_own_threshold_rows_of_modes_csv_are_empty_where_not_switched(diverging_comparison):
    from nqf.comparison.tables import comparison_tables

    columns, rows = comparison_tables(diverging_comparison)["modes.csv"]
    own = {
        (r[columns.index("source")], r[columns.index("optimizer")], r[columns.index("mode")]): r[
            columns.index("switch_step")
        ]
        for r in rows
        if r[columns.index("convention")] == "own_occupation"
    }
    assert own.pop(("quadratic", "gd", "1")) != ""
    assert len(own) == 11 and set(own.values()) == {""}, own


def test_nqf_compare_json_has_no_invented_own_threshold_steps():
    """The probe's command, through the console script: its JSON had own-threshold steps 0, 0, 0, 0
    for the diverged adam run and 46, 45, 40, 38 for GD modes that never switched on."""
    command = [str(NQF), "compare", "--task", "staircase", "--width", "8", "--sigma0", "1e-3", "--steps", "50"]
    command += ["--lr", "0.05", "--optimizers", "gd,adam", "--lr-adam", "100", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    modes = json.loads(done.stdout)["modes"]
    own = [m["measured_own_threshold"] for m in modes]
    assert [m["network"] for m in own] == [{"gd": None, "adam": None}] * 4
    assert own[0]["quadratic"] is not None and modes[0]["measured"]["quadratic"] is not None
    assert [m["quadratic"] for m in own[1:]] == [None] * 3


def test_switch_steps_own_public_helper_takes_the_common_thresholds_and_divergence():
    steps = np.array([0, 1, 2, 3, 10])
    occ = np.array([[0.0, 0.0], [0.5, 0.1], [1.0, 0.2], [2.0, 0.3], [3.0, 0.4]])
    # mode 1 never reaches its common threshold 2.0: no own-threshold step
    out = switch_steps_own(steps, occ, thresholds=[1.0, 2.0])
    assert out[0] == 3.0 and math.isnan(out[1])
    assert np.all(np.isnan(switch_steps_own(steps, occ, thresholds=[1.0, 2.0], diverged=True)))
    stacked = np.stack([occ, occ])
    both = switch_steps_own(steps, stacked, thresholds=[1.0, 0.1], diverged=[False, True])
    np.testing.assert_array_equal(np.isnan(both), [[False, False], [True, True]])


# -- 3. seeds ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1.5, -1, 1.0, True, "1", 2**32])
def test_task_generate_refuses_what_is_no_seed(seed):
    with pytest.raises(NqfError, match=r"^seed must be an integer in \[0, 4294967295\], got "):
        nqf.get_task("staircase").generate(seed)


def test_task_generate_takes_int_seeds_and_jax_keys_but_not_float_keys():
    import jax

    task = nqf.get_task("staircase")
    a, _ = task.generate(np.int64(3), "float64")
    b, _ = task.generate(3, "float64")
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c, _ = task.generate(jax.random.PRNGKey(1), "float64")
    d, _ = task.generate(jax.random.key(1), "float64")
    np.testing.assert_array_equal(np.asarray(c), np.asarray(d))
    with pytest.raises(NqfError, match="^key must be an int seed or a JAX PRNG key"):
        task.generate(np.array([1.5, 2.0]))  # was read as the words (1, 2)


@pytest.mark.no_shape_checks  # the library's own refusal, as a user without the checks gets it
def test_closure_diagnostic_refuses_a_negative_rotation_seed():
    task = nqf.get_task("staircase")
    X, Y = task.generate(0, "float64")
    config = nqf.TrainConfig(width=4, lr=0.05, steps=2, sigma0=1e-3, model="quadratic")
    for bad in (-1, 1.5):
        with pytest.raises(NqfError, match=r"^rotation_seed must be an integer in \[0, 4294967295\]"):
            nqf.closure_diagnostic(task.architecture(), X, Y, config, rotation_seed=bad)


# -- 4. structure's batch size ----------------------------------------------------------


@pytest.mark.no_shape_checks  # the library's own refusal, as a user without the checks gets it
@pytest.mark.parametrize("batch_size", [-1, 0, 2.5])
def test_structure_refuses_a_batch_size_below_one(batch_size):
    arch = nqf.get_architecture("mlp")
    X = np.random.default_rng(0).standard_normal((5, 8))
    with pytest.raises(NqfError, match=rf"^batch_size must be a positive integer, got {batch_size!r}$"):
        nqf.structure(arch, X, method="autodiff", batch_size=batch_size)


# -- 5. solve_lv's output times ---------------------------------------------------------


@pytest.mark.no_shape_checks  # the library's own refusal, as a user without the checks gets it
@pytest.mark.parametrize("ts", [[5.0, 1.0], [1.0, 1.0, 2.0], [0.0, float("nan")]])
def test_solve_lv_refuses_times_not_strictly_increasing(ts):
    lv = nqf.LotkaVolterra(c=[1.0, 0.5], K=[[1.0, 0.2], [0.2, 1.0]], m0=1e-3, lr=0.1)
    with pytest.raises(NqfError, match=r"^solve_lv: "):
        nqf.solve_lv(lv, 10.0, ts=ts)


# -- 6. architectures by name: outputs from integer labels, shapes from lists ------------


def _labelled(N: int = 20, D: int = 3, classes: int = 2):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D))
    return X, np.arange(N) % classes


@pytest.mark.parametrize("classes", [2, 6])
def test_predict_by_name_takes_the_outputs_from_integer_labels(classes):
    X, y = _labelled(classes=classes)
    config = nqf.PredictConfig(width=4, lr=0.05, steps=20, sigma0=1e-3)
    by_name = nqf.predict("mlp", X, y, config)
    arch = nqf.get_architecture("mlp", inputs=3, outputs=classes)
    by_arch = nqf.predict(arch, X, y, config)
    np.testing.assert_array_equal(by_name.flow.loss, by_arch.flow.loss)


@pytest.mark.slow  # loads the command line's modules
def test_architecture_for_data_maps_labels_as_the_cli_does():
    from nqf.architectures import architecture_for_data
    from nqf.cli._unit import data_shapes

    X, y = _labelled(classes=5)
    assert architecture_for_data("mlp", X, y).outputs == 5 == data_shapes(X, y)[1]
    assert architecture_for_data("mlp", X, y == 1).outputs == 2  # booleans are labels too


@pytest.mark.no_shape_checks  # lists, as a user without the test-time checks passes them
def test_predict_and_train_by_name_take_shapes_from_lists():
    X, y = _labelled(classes=2)
    Y = np.eye(2)[y]
    config = nqf.PredictConfig(width=4, lr=0.05, steps=20, sigma0=1e-3)
    from_lists = nqf.predict("mlp", X.tolist(), Y.tolist(), config)
    from_arrays = nqf.predict("mlp", X, Y, config)
    np.testing.assert_array_equal(from_lists.flow.loss, from_arrays.flow.loss)
    train_config = nqf.TrainConfig(width=4, lr=0.05, steps=5, sigma0=1e-3)
    np.testing.assert_array_equal(
        nqf.train("mlp", X.tolist(), y.tolist(), train_config).loss, nqf.train("mlp", X, Y, train_config).loss
    )
