"""Degenerate modes (equal c_k) are timed as groups: predict, compare, their tables, JSON, CSV and
figures (issue 32, item 1; docs/theory.md 5.1).

A unit with a hidden width h > 1, a @ gelu(V x), has its modes in groups of h with one c_k (the
hidden neurons are interchangeable): inside a group W0 decides how the occupation splits among
the q_k (one m_k* may be 0), so per-mode steps depend on the draw. A group's total occupation
does not. Checked here against a plain-JAX gradient-descent loop written in this file (its own
W0 draw, not ``nqf.train``): the predicted group steps are within 5% of the loop's, for h = 1, 2
and 4 on wine and h = 1, 2 on 16 principal components of digits, and move by less than 5% with
the draw of W0.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.core.measure import (
    group_first,
    group_label,
    group_last_value,
    group_switch_steps,
    group_thresholds,
    mode_groups,
)
from nqf.theory.predict.pipeline import PredictConfig, predict

NQF = Path(sys.executable).parent / "nqf"
GROUP_TOLERANCE = 0.05  # group step, prediction vs the independent loop and across W0 draws, relative


class HiddenGelu(eqx.Module):
    """phi(w, x) = a @ gelu(V x): a (K, h), V (h, D); the unit of the issue's report."""

    a: jax.Array
    v: jax.Array

    def __call__(self, x):
        return self.a @ jax.nn.gelu(self.v @ x)


def _unit(hidden: int, inputs: int, outputs: int) -> HiddenGelu:
    return HiddenGelu(jnp.zeros((outputs, hidden)), jnp.zeros((hidden, inputs)))


def _wine() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    Y = np.eye(3)[y]
    return X, Y - Y.mean(0)


def _digits16() -> tuple[np.ndarray, np.ndarray]:
    """16 whitened principal components of digits (numpy's SVD, no scikit-learn estimator)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    Xc = X - X.mean(0)
    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    Z = Xc @ vt[:16].T / (s[:16] / math.sqrt(X.shape[0]))
    Y = np.eye(10)[y]
    return Z, Y - Y.mean(0)


DATA = {"wine": (_wine, 0.5, 400), "digits16": (_digits16, 1.0, 600)}


# -- the functions ------------------------------------------------------------------------------


def test_mode_groups_join_equal_growth_rates_only():
    assert mode_groups([1.5, 1.5, 1.5 * (1 + 1e-9), 1.0, 0.5, 0.5]) == ((0, 1, 2), (3,), (4, 5))
    assert mode_groups([1.0, 1.0 - 2e-6, 0.5]) == ((0,), (1,), (2,))  # a relative gap of 2e-6 > 1e-6
    assert mode_groups([]) == ()
    assert [group_label(g) for g in ((0, 1), (2,), (3, 4, 5))] == ["1-2", "3", "4-6"]


def test_group_switch_steps_time_the_total_occupation():
    steps = np.arange(5)
    occupations = np.array([[0.1, 0.1, 0.0], [0.3, 0.2, 0.0], [0.5, 0.6, 0.1], [0.5, 0.6, 0.2], [0.5, 0.6, 0.3]])
    thresholds = np.array([0.5, 0.5, 0.0])  # group {0, 1} reaches 1.0 at step 2; mode 2 has no threshold
    out = group_switch_steps(steps, occupations, thresholds, [[0, 1], [2]])
    assert out[0] == 2 and math.isnan(out[1])
    # one member with m_k* = 0 (inf as compare passes it): the group's threshold is the other's
    assert group_thresholds([np.inf, 0.7, 0.2], ((0, 1), (2,))).tolist() == [0.7, 0.2]
    # leading axes (seeds) pass through; groups of one are switch_steps
    batch = np.stack([occupations, 2 * occupations])
    assert group_switch_steps(steps, batch, [0.2, 0.2, 0.2], ((0,), (1,), (2,))).tolist() == [
        [1.0, 1.0, 3.0],
        [0.0, 0.0, 2.0],
    ]


def test_group_first_and_last_value():
    assert group_first([[np.nan, 45.0, 58.0, np.nan, 3.0]], ((0, 1), (2, 3), (4,))).tolist() == [[45.0, 58.0, 3.0]]
    assert np.isnan(group_first([np.nan, np.nan], ((0, 1),))).all()
    # the plateau once the group's last member is on
    values = group_last_value([1.0, 2.0, 3.0, 4.0, 5.0], [10.0, np.nan, 3.0, 4.0, np.nan], ((0, 1), (2, 3), (4,)))
    assert values[:2].tolist() == [1.0, 4.0] and np.isnan(values[2])


# -- against an independent training ------------------------------------------------------------


def _independent_group_steps(arch, X, Y, prediction, seed: int, lr: float, steps: int, model: str) -> np.ndarray:
    """GD written here on the network f(x) = sum_i a_i gelu(V_i x) or on its quadratic model
    f(x) = sum_i w_i^T H(x) w_i / 2 (H: the Hessian of this file's unit at 0), from its own
    W0 ~ N(0, sigma0^2) (numpy), timed per group on the prediction's modes and thresholds."""
    K, D = Y.shape[1], X.shape[1]
    hidden = arch.dim // (K + D)
    n, sigma0 = prediction.config.width, prediction.config.sigma0

    def unit(w, x):  # the module's leaves in order, flattened row-major: a (K, h), then V (h, D)
        a = w[: K * hidden].reshape(K, hidden)
        V = w[K * hidden :].reshape(hidden, D)
        return a @ jax.nn.gelu(V @ x)

    probe = np.random.default_rng(99).normal(size=arch.dim)
    assert np.allclose(unit(probe, X[0]), arch.unit(arch.unravel(jnp.asarray(probe)), X[0]), atol=1e-12)

    if model == "network":

        def outputs(W):
            return jax.vmap(lambda x: jax.vmap(unit, in_axes=(1, None))(W, x).sum(axis=0))(X)

    else:
        H = jax.vmap(lambda x: jax.hessian(unit)(jnp.zeros(arch.dim), x))(jnp.asarray(X))  # (N, K, d, d)

        def outputs(W):
            return 0.5 * jnp.einsum("nkij,ij->nk", H, W @ W.T)

    def loss(W):
        return 0.5 * jnp.mean(jnp.sum((outputs(W) - Y) ** 2, axis=-1))

    Q = jnp.asarray(prediction.modes.basis[:, : prediction.num_growing])

    def step(W, _):
        occupation = jnp.sum((Q.T @ W) ** 2, axis=1)  # m_k = |W^T q_k|^2
        return W - lr * jax.grad(loss)(W), occupation

    W0 = sigma0 * np.random.default_rng(1000 + seed).normal(size=(arch.dim, n))
    W, occupations = jax.lax.scan(jax.jit(step), jnp.asarray(W0), None, length=steps + 1)
    return group_switch_steps(np.arange(steps + 1), np.asarray(occupations), prediction.thresholds, prediction.groups)


def _gap(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b) / b))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("data", "hidden", "network_groups"),
    [("wine", 1, 1), ("wine", 2, 1), ("wine", 4, 1), ("digits16", 1, 5), ("digits16", 2, 5)],
)
def test_group_steps_match_an_independent_training_and_not_the_draw(data, hidden, network_groups):
    """Measured (float64; predicted M-flow / trained network, draws 0 and 1):
    wine h = 1: 51, 66 / 51, 62; h = 2: 50, 63 / 49, 60; h = 4: 48, 62 / 48, 59;
    digits16 h = 1: 88, 93, 97, 98, 104 / 90, 91, 96, 98, 104; h = 2: 86, 90, 94, 96, 100 / 86, 89, 94, 96, 102.
    Wine's second group comes 5-6% early in the network at every h (the network leaves the quadratic
    model after the first mode: issue 31's departure, not the grouping): there the quadratic model,
    trained here, is the reference."""
    make, lr, steps = DATA[data]
    X, Y = make()
    arch = nqf.from_equinox(_unit(hidden, X.shape[1], Y.shape[1]), X.shape[1], Y.shape[1])
    draws = [
        predict(arch, X, Y, PredictConfig(width=32, lr=lr, steps=steps, sigma0=1e-6, seed=seed)) for seed in (0, 1)
    ]
    prediction = draws[0]
    assert all(len(group) == hidden for group in prediction.groups)  # the h neurons: groups of h
    assert prediction.degenerate == (hidden > 1)
    assert any("degenerate" in note for note in prediction.notes) == (hidden > 1)
    predicted = [d.group_readings()["mflow"][: network_groups + 1] for d in draws]
    assert np.all(np.isfinite(predicted[0]))
    # the group steps do not move with the draw of W0
    assert _gap(predicted[1], predicted[0]) <= GROUP_TOLERANCE, predicted
    network = [
        _independent_group_steps(arch, X, Y, prediction, seed, lr, steps, "network")[: network_groups + 1]
        for seed in (0, 1)
    ]
    assert _gap(network[1], network[0]) <= GROUP_TOLERANCE, network
    # ... and are the trained network's while it stays quadratic
    assert _gap(network[0][:network_groups], predicted[0][:network_groups]) <= GROUP_TOLERANCE, (network, predicted)
    if data == "wine":  # every group against the quadratic model, trained here
        quadratic = _independent_group_steps(arch, X, Y, prediction, 0, lr, steps, "quadratic")[:2]
        assert _gap(quadratic, predicted[0][:2]) <= GROUP_TOLERANCE, (quadratic, predicted)


# -- through the command ------------------------------------------------------------------------

UNIT_FILE = textwrap.dedent(
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp


    class HiddenGelu(eqx.Module):
        a: jax.Array
        v: jax.Array

        def __call__(self, x):
            return self.a @ jax.nn.gelu(self.v @ x)


    def gelu2(input_shape, outputs):
        return HiddenGelu(jnp.zeros((outputs, 2)), jnp.zeros((2, input_shape[0])))
    """
)


def _nqf(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([str(NQF), *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_compare_reports_groups_where_the_modes_are_degenerate(tmp_path):
    """The issue's command: the network was "+125.5% off the theory on mode 1" where each
    group's total occupation agrees (50 vs 50); now the rows are the groups."""
    (tmp_path / "units.py").write_text(UNIT_FILE)
    X, Y = _wine()
    np.savez(tmp_path / "wine.npz", X=X, Y=Y)
    args = ["--task", "npz", "--path", str(tmp_path / "wine.npz"), "--unit", f"{tmp_path / 'units.py'}:gelu2"]
    args += ["--width", "32", "--sigma0", "1e-6", "--lr", "0.5", "--steps", "400"]
    done = _nqf("compare", *args, "--json", "--csv", str(tmp_path / "tables"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = result["modes"]
    assert [row["modes"] for row in rows] == [[1, 2], [3, 4]] and [row["label"] for row in rows] == ["1-2", "3-4"]
    for row in rows:
        error = row["relative_error"]["network"]["gd"]
        assert abs(error) <= GROUP_TOLERANCE, rows
    assert any(note.startswith("modes 1-2, 3-4 are degenerate") for note in result["notes"])
    modes_csv = (tmp_path / "tables" / "modes.csv").read_text().splitlines()
    network = [line.split(",") for line in modes_csv if line.startswith("network,gd,0,")]
    assert [(r[3], r[4]) for r in network] == [
        ("1", "group_occupation"),
        ("3", "group_occupation"),
        ("1", "group_own_occupation"),
        ("3", "group_own_occupation"),
    ]
    text = _nqf("predict", "--data", str(tmp_path / "wine.npz"), *args[4:])
    assert text.returncode == 0, text.stderr
    table = [line for line in text.stdout.splitlines() if line.startswith("│")]
    assert [line.split("│")[1].strip() for line in table] == ["1-2", "3-4"] * 2  # the prediction, the analysis
    assert "m_k*" not in text.stdout  # no per-mode fixed point inside a group
    prediction = json.loads(_nqf("predict", "--data", str(tmp_path / "wine.npz"), *args[4:], "--json").stdout)
    assert [row["modes"] for row in prediction["prediction"]["modes"]] == [[1, 2], [3, 4]]
    steps = [row["switch_step"] for row in prediction["prediction"]["modes"]]
    assert steps == [group["switch_steps"]["mflow"] for group in prediction["groups"]]
