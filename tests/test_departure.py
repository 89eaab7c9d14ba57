"""The network along the quadratic model's predicted path (nqf.theory.departure): P(t) W0 and the gap."""

import json

import numpy as np
import pytest

from nqf import PredictConfig, get_task, predict
from nqf.architectures import mlp, mlp_fixed
from nqf.architectures.architecture import init_weights
from nqf.core.errors import NqfError
from nqf.optimizers import PREDICT_OPTIMIZERS, closed_optimizer
from nqf.theory.data_matrices.build import data_matrices
from nqf.theory.departure.estimate import departure, path_weights, propagators
from nqf.theory.flow import optimizer_map, square_factor
from nqf.training.runs import training_keys

from .conftest import assert_allclose

STAIR = get_task("staircase")
X, Y = STAIR.generate(0, dtype=np.float64)
TANH = mlp(inputs=8, outputs=4, activation="tanh")


@pytest.mark.parametrize("optimizer", [n for n in PREDICT_OPTIMIZERS if closed_optimizer(n).deterministic_flow])
@pytest.mark.parametrize("width", [32, 4])
def test_propagator_reproduces_the_m_flow(optimizer, width):
    """M_t = P(t) M0 P(t)^T = W_t W_t^T equals the M-flow's M to 1e-10 (float64), GD and heavy-ball
    momentum; width 4 < d = 12 as well (there only W_t = P(t) W0 is carried, see ``propagators``)."""
    data = data_matrices(TANH, X, Y)
    W0 = np.asarray(init_weights(TANH, training_keys(0)[0], width, 1e-3, np.float64))
    steps = np.array([0, 1, 7, 40, 120, 200])
    lr = 0.05 if optimizer == "gd" else 0.01
    kw = {"checkpoints": steps, "factor": square_factor(W0=W0), "record_M": True}
    flow = optimizer_map(data, None, lr, 200, optimizer, beta=0.9, **kw)
    Ws, _ = path_weights(data, W0, optimizer, lr, steps, beta=0.9)
    for W, M in zip(np.asarray(Ws), np.asarray(flow.M), strict=True):
        assert_allclose(W @ W.T, M, rtol=0, atol=1e-10 * np.abs(M).max())
    if width >= W0.shape[0]:
        Ps, _ = propagators(data, W0, optimizer, lr, steps, beta=0.9)
        M0 = W0 @ W0.T
        for P, W, M in zip(np.asarray(Ps), np.asarray(Ws), np.asarray(flow.M), strict=True):
            assert_allclose(P @ M0 @ P.T, M, rtol=0, atol=1e-10 * np.abs(M).max())
            assert_allclose(P @ W0, W, rtol=0, atol=1e-10 * np.abs(W).max())
    assert np.abs(np.asarray(flow.M)[-1]).max() > 1.0  # modes switched on: the check covers O(1) weights


def _numpy_gap(steps_wanted, lr=0.05, sigma0=1e-6, width=32, seed=0):
    """Independent check: GD on the linear two-layer model in numpy (W = [a; v], f = a (v.x)), then the
    tanh network and the quadratic model at those weights. Returns {step: gap}."""
    W = np.asarray(init_weights(TANH, training_keys(seed)[0], width, sigma0, np.float64))
    K = Y.shape[1]
    out = {}
    for t in range(max(steps_wanted) + 1):
        A, V = W[:K], W[K:]
        H = X @ V  # (N, n) pre-activations v_i . x
        f_quad = H @ A.T  # tanh'(0) = 1
        if t in steps_wanted:
            f_net = np.tanh(H) @ A.T
            out[t] = np.linalg.norm(f_net - f_quad) / np.linalg.norm(f_quad)
        R = (f_quad - Y) / X.shape[0]
        W = W - lr * np.concatenate([R.T @ H, X.T @ R @ A], axis=0)
    return out


def test_gap_of_tanh_grows_and_matches_numpy():
    p = predict(TANH, X, Y, PredictConfig(width=32, lr=0.05, steps=300, sigma0=1e-6))
    d = departure(TANH, X, Y, p)
    assert d.samples == 256 and not d.subsampled
    at = {int(s): float(g) for s, g in zip(d.steps, d.relative_gap, strict=True)}
    reference = _numpy_gap({50, 90, 200, 300})
    for t, g in reference.items():
        assert_allclose(at[t], g, rtol=1e-8)
    assert at[50] < 1e-4 < at[90] < at[200] < at[300]  # grows once mode 1 carries O(1) weights
    # the numbers docs/departure.md quotes (data seed 0, init seed 0)
    assert 0.05 < at[90] < 0.07 and 0.18 < at[200] < 0.19 and 0.19 < at[300] < 0.2
    assert d.network_loss[-1] > d.quadratic_loss[-1]


@pytest.mark.slow  # heavy for the dev loop (make test-fast); CI runs it
def test_exactly_quadratic_unit_has_no_departure():
    """mlp-fixed with z^2/2 is its own quadratic form: gap ~ 0, the network's own prediction = the M-flow's."""
    arch = mlp_fixed(inputs=8, activation="square")
    Xq, Yq = get_task("quadratic", samples=512).generate(0, dtype=np.float64)
    config = PredictConfig(width=16, lr=0.01, steps=400, sigma0=1e-6, departure=True)
    p = predict(arch, Xq, Yq, config)
    d = p.departure
    assert np.all(d.relative_gap < 1e-10)
    assert_allclose(d.network_loss, d.quadratic_loss, rtol=1e-10)
    mflow = p.mflow_switch_steps
    assert np.isfinite(mflow).sum() >= 3
    assert np.all(np.abs(p.network.switch_steps - mflow)[np.isfinite(mflow)] <= 0.5)
    out = json.loads(json.dumps(p.to_json(), allow_nan=False))["departure"]
    assert set(out) >= {"steps", "relative_gap", "samples"}
    assert len(out["steps"]) == len(out["relative_gap"]) == 401 and out["samples"] == 512
    # reproducible to the byte: no wall time in the JSON (Departure.seconds keeps it for Python)
    assert "seconds" not in out and set(p.departure.seconds) == {"path", "curve"}
    again = predict(arch, Xq, Yq, config)
    assert json.dumps(again.to_json()["departure"]) == json.dumps(p.to_json()["departure"])


def test_departure_is_off_by_default():
    p = predict(TANH, X, Y, PredictConfig(width=32, lr=0.05, steps=50, sigma0=1e-6))
    assert p.departure is None and p.to_json()["departure"] is None


def _strict(text: str) -> dict:
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.slow  # through the real command
def test_cli_departure_through_the_real_command(tmp_path):
    """``nqf predict --departure`` and ``nqf compare --departure``: strict JSON, the same numbers as the library."""
    import subprocess
    import sys
    from pathlib import Path

    nqf_cli = str(Path(sys.executable).parent / "nqf")
    X, Y = get_task("staircase").generate(0)
    np.savez(tmp_path / "data.npz", X=np.asarray(X), Y=np.asarray(Y))
    common = ["--width", "32", "--sigma0", "1e-6", "--lr", "0.05", "--steps", "600", "--departure", "--json"]
    run = subprocess.run(
        [nqf_cli, "predict", "--data", "data.npz", "--arch", "mlp", *common, "--plot", "p.png"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    block = _strict(run.stdout)["departure"]
    assert (tmp_path / "p.png").stat().st_size > 0
    library = predict(mlp(), X, Y, PredictConfig(width=32, lr=0.05, steps=600, sigma0=1e-6, departure=True))
    expected = library.departure.to_json()
    assert block["steps"] == expected["steps"]
    assert_allclose(
        np.array(block["relative_gap"], dtype=float),
        np.array(expected["relative_gap"], dtype=float),
        rtol=1e-9,
        atol=1e-12,
    )
    run = subprocess.run(
        [nqf_cli, "compare", "--task", "staircase", *common, "--optimizers", "gd"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = _strict(run.stdout)
    assert result["config"]["departure"] is True
    (first,) = result["departure"]["gd"]
    assert first["steps"] == expected["steps"]
    text = subprocess.run(
        [nqf_cli, "compare", "--task", "staircase", *common[:-1], "--optimizers", "gd"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert text.returncode == 0 and "relative output gap" in text.stdout, text.stderr[-2000:]


def test_a_departure_of_other_inputs_is_refused():
    """The architecture, the data and W0 must be the prediction's (one line each), else the
    departure would describe nothing; the prediction's own inputs pass."""
    p = predict(TANH, X, Y, PredictConfig(width=8, lr=0.05, steps=150, sigma0=1e-6))
    Xn, Yn = np.asarray(X), np.asarray(Y)
    cases = [
        (lambda: departure(mlp(activation="gelu"), X, Y, p), "not of the architecture given"),
        (lambda: departure(TANH, Xn[:10], Yn[:10], p), "the data are not the prediction's"),
        (lambda: departure(TANH, X, Y, p, W0=np.ones((12, 8))), "not the prediction's initial"),
        (lambda: departure(TANH, X, Y, p, W0=np.zeros((3, 3))), r"W0 must have shape \(d=12"),
        (lambda: departure(TANH, X, Y, "nope"), "takes the Prediction"),
    ]
    for call, message in cases:
        with pytest.raises(NqfError, match=message):
            call()
    W0 = init_weights(TANH, training_keys(0)[0], 8, 1e-6)
    same = departure(TANH, X, Y, p, W0=np.asarray(W0))
    assert_allclose(same.relative_gap, departure(TANH, X, Y, p).relative_gap, rtol=1e-12)
