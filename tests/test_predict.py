"""predict(): the M-flow, the LV reduction and the vanishing-init limit against each other
and against closed forms; `nqf predict` through the console script."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.theory.data_matrices.build import data_matrices
from nqf.theory.flow import continuous_flow
from nqf.theory.lotka_volterra.modes import mode_basis
from nqf.theory.lotka_volterra.solve import solve_lv
from nqf.theory.lotka_volterra.system import logistic_occupation
from nqf.theory.predict.pipeline import PredictConfig, first_crossing, lv_occupations, predict
from tests.conftest import assert_allclose

NQF = str(Path(sys.executable).with_name("nqf"))


@pytest.fixture(scope="module")
def staircase():
    task = nqf.get_task("staircase")
    X, Y = task.generate(0)
    return nqf.get_architecture("mlp"), np.asarray(X), np.asarray(Y)


def diagonal_init(basis, m0):
    """W0 (d x d) with M0 = W0 W0^T = sum_k m0_k q_k q_k^T exactly diagonal in the modes."""
    return basis * np.sqrt(m0)


@pytest.mark.slow  # 2.8-5.7 s
def test_lv_equals_mflow_when_data_commute_and_init_is_diagonal(staircase):
    arch, X, Y = staircase
    data = data_matrices(arch, X, Y)
    modes = mode_basis(data)
    assert modes.defect < 1e-12
    m = modes.basis.shape[1]
    rng = np.random.default_rng(1)
    m0 = 10.0 ** rng.uniform(-9, -7, m)
    # pad to a square W0 (the null space of C gets nothing)
    W0 = np.zeros((arch.dim, arch.dim))
    W0[:, :m] = diagonal_init(modes.basis, m0)
    config = PredictConfig(width=arch.dim, lr=0.05, steps=700)
    p = predict(arch, X, Y, config, W0=W0, data=data)
    assert p.init_defect < 1e-12
    g = p.num_growing
    flow_occ = np.asarray(p.flow.occupations)
    lv_occ = lv_occupations(p.lv, config.steps)[:, :g]
    assert_allclose(flow_occ, lv_occ, rtol=1e-8, atol=0)
    assert_allclose(p.mflow_switch_steps, p.lv_switch_steps, rtol=0, atol=0)
    # the LV loss is the M-flow loss
    assert_allclose(p.lv_loss, np.asarray(p.flow.loss), rtol=1e-8, atol=1e-12)

    # continuous time: gradient flow on M equals the LV ODE
    ts = np.linspace(0.0, 600.0, 61)
    flow = continuous_flow(
        data,
        jnp.asarray(W0 @ W0.T),
        0.05,
        600.0,
        saveat=ts,
        basis=jnp.asarray(modes.basis),
        solver="dopri8",
        rtol=1e-11,
        atol=1e-22,
    )
    sol = solve_lv(p.lv, 600.0, ts=ts, rtol=1e-11, atol=1e-11)
    # decaying partner modes fall to ~1e-15, below the rounding of M's O(1) entries: absolute floor
    assert_allclose(np.asarray(flow.occupations), sol.occupations, rtol=1e-7, atol=1e-13)


@pytest.mark.slow  # 2.8-5.7 s
def test_single_mode_is_the_logistic_curve():
    """One output, one input: c = s/2, K = 1/4 (+ the decaying partner, which stays at 0)."""
    arch = nqf.get_architecture("mlp", inputs=1, outputs=1, activation="tanh")
    X = np.array([[1.0], [-1.0]])
    Y = 2.0 * X  # s = 2: c = 1, K = 1/4
    data = data_matrices(arch, X, Y)
    modes = mode_basis(data)
    assert_allclose(modes.growth, [1.0, -1.0], rtol=1e-12)
    m0 = 1e-10
    W0 = np.zeros((2, 2))
    W0[:, 0] = modes.basis[:, 0] * np.sqrt(m0)
    ts = np.linspace(0, 400, 41)
    flow = continuous_flow(
        data,
        jnp.asarray(W0 @ W0.T),
        0.05,
        400.0,
        saveat=ts,
        basis=jnp.asarray(modes.basis[:, :1]),
        solver="dopri8",
        rtol=1e-11,
        atol=1e-22,
    )
    exact = logistic_occupation(1.0, 0.25, m0, 0.05, ts)
    assert_allclose(np.asarray(flow.occupations)[:, 0], exact, rtol=1e-6)


def test_defect_separates_whitened_from_correlated_inputs():
    arch = nqf.get_architecture("mlp")
    white = nqf.get_task("staircase")
    corr = nqf.get_task("staircase", whiten=False, correlation=0.6)
    Xw, Yw = white.generate(0)
    Xc, Yc = corr.generate(0)
    config = PredictConfig(width=16, lr=0.05, steps=300)
    pw = predict(arch, Xw, Yw, config)
    pc = predict(arch, Xc, Yc, config)
    assert pw.defect < 1e-12 and pw.lv_applies
    assert pc.defect > 1e-2 and not pc.lv_applies
    assert any("M-flow" in note for note in pc.notes)
    assert pc.to_json()["lv"]["applies"] is False


@pytest.mark.parametrize("optimizer", ["momentum", "nesterov"])
def test_lv_map_with_a_buffer_equals_the_mflow_on_diagonal_data(staircase, optimizer):
    arch, X, Y = staircase
    data = data_matrices(arch, X, Y)
    modes = mode_basis(data)
    m = modes.basis.shape[1]
    W0 = np.zeros((arch.dim, arch.dim))
    W0[:, :m] = diagonal_init(modes.basis, np.full(m, 1e-8))
    p = predict(
        arch, X, Y, PredictConfig(width=arch.dim, lr=0.02, steps=300, optimizer=optimizer, beta=0.8), W0=W0, data=data
    )
    occ = lv_occupations(p.lv, 300, optimizer, 0.8)[:, : p.num_growing]
    assert_allclose(np.asarray(p.flow.occupations), occ, rtol=1e-8)


def test_switch_steps_follow_the_staircase_and_vanishing_init_limit(staircase):
    arch, X, Y = staircase
    p = predict(arch, X, Y, PredictConfig(width=32, lr=0.05, steps=800, sigma0=1e-6))
    # docs/theory.md section 5 measured the quadratic model at 93, 138, 258, 488 (one seed);
    # the exact M-map with this seed's init:
    assert list(p.mflow_switch_steps[:2]) == [93.0, 136.0]
    # modes switch in order of growth, and the singular-limit order is the same
    assert np.all(np.diff(p.mflow_switch_steps) > 0)
    assert list(p.singular.activation_order) == [0, 1, 2, 3]
    # plateau losses of the staircase: L0 - sum_{j<=k} s_j^2 / 2 with L0 = sum s^2 / 2
    s = np.array([3.0, 2.0, 1.0, 0.5])
    expected = 0.5 * (np.sum(s**2) - np.cumsum(s**2))
    assert_allclose(p.lv_plateau_losses, expected, rtol=1e-9, atol=1e-9)


def test_first_crossing_interpolates_between_checkpoints():
    steps = np.array([0, 10, 20])
    occ = np.array([[0.0], [1.0], [3.0]])
    assert first_crossing(steps, occ, [2.0])[0] == 15.0
    assert np.isnan(first_crossing(steps, occ, [5.0])[0])


def test_predict_rejects_bad_inputs(staircase):
    arch, X, Y = staircase
    with pytest.raises(nqf.NqfError, match="unstable"):
        predict(arch, X, Y, PredictConfig(width=8, lr=0.5, steps=10))
    with pytest.raises(nqf.NqfError, match="equivariant"):
        PredictConfig(width=8, lr=0.05, steps=10, optimizer="adam")
    with pytest.raises(nqf.NqfError):
        predict(arch, X[:, :5], Y, PredictConfig(width=8, lr=0.05, steps=10))
    with pytest.raises(nqf.NqfError, match="W0"):
        predict(arch, X, Y, PredictConfig(width=8, lr=0.05, steps=10), W0=np.zeros((3, 8)))


def _run(*args):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([NQF, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow  # through the real command
def test_cli_predict_json_and_errors(tmp_path, staircase):
    arch, X, Y = staircase
    data = tmp_path / "data.npz"
    np.savez(data, X=X, Y=Y)
    W = 1e-5 * np.random.default_rng(0).standard_normal((arch.dim, 8))
    init = tmp_path / "w0.npz"
    np.savez(init, W=W)
    out = _run(
        "predict",
        "--data",
        str(data),
        "--arch",
        "mlp",
        "--activation",
        "tanh",
        "--width",
        "8",
        "--init",
        str(init),
        "--lr",
        "0.05",
        "--steps",
        "300",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result["mflow"]) >= {"steps", "loss"}
    assert set(result["lv"]) >= {"applies", "defect", "init_defect", "growth_rates", "switch_steps", "plateau_losses"}
    assert set(result["singular_limit"]) >= {"step_times", "order", "plateau_losses"}
    assert result["lv"]["applies"] is True
    assert_allclose(result["lv"]["growth_rates"], 4 * 0.05 * np.array([1.5, 1.0, 0.5, 0.25]), rtol=1e-9)
    rates = result["lv"]["growth_rates"]
    assert rates == sorted(rates, reverse=True)
    # the library gives the same numbers
    p = predict(arch, X, Y, PredictConfig(width=8, lr=0.05, steps=300), W0=W)
    assert_allclose(result["mflow"]["loss"], np.asarray(p.flow.loss), rtol=1e-12)
    assert result["lv"]["steps"] == [int(t) for t in p.lv_steps]
    assert_allclose(result["lv"]["loss"], np.asarray(p.lv_loss), rtol=1e-12)

    bad = tmp_path / "bad.npz"
    np.savez(bad, X=np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), Y=Y)
    for args, message in [
        (["--data", str(tmp_path / "missing.npz")], "no such file"),
        (["--data", str(bad)], "non-finite"),
        (["--data", str(data), "--lr", "0.5"], "stable only for lr <"),
        (["--data", str(data), "--inputs", "5"], "X has shape"),
    ]:
        base = {"--arch": "mlp", "--width": "8", "--sigma0": "1e-6", "--lr": "0.05", "--steps": "50"}
        argv = ["predict"]
        extra = dict(zip(args[::2], args[1::2], strict=True))
        for k, v in {**base, **extra}.items():
            argv += [k, v]
        out = _run(*argv)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], out.stderr


def test_mflow_keeps_tiny_modes_at_small_init(staircase):
    """sigma0 = 1e-12: mode 4 grows from m ~ 1e-23 next to O(1) modes. Propagating M itself
    lost it to rounding (negative occupation, then divergence); the factored map keeps it."""
    arch, X, Y = staircase
    p = predict(arch, X, Y, PredictConfig(width=32, lr=0.05, steps=1100, sigma0=1e-12))
    assert np.all(np.asarray(p.flow.occupations) >= 0)
    assert np.all(np.isfinite(p.mflow_switch_steps))
    assert np.max(np.abs(p.mflow_switch_steps - p.lv_switch_steps)) <= 1.0
