"""Every optimizer object against what it claims (``nqf.optimizers``).

For each optimizer that closes on M: its M-flow (the maps, derived from its own ``flow_step``)
equals training the quadratic model on W with its optax transformation, written out here as a
plain loop, to 1e-10 (float64), at a width above d (W = F Q with Q not square); its closed forms
(the escape rate, the stability bound) equal the spectral radius of its own step linearised
around M = 0; its prediction runs end to end through ``nqf.predict`` and the command line.
"""

import dataclasses
import json

import jax
import numpy as np
import optax
import pytest

import nqf
from nqf.optimizers import (
    OPTIMIZER_RECORDS,
    PREDICT_OPTIMIZERS,
    AbstractClosedOptimizer,
    AbstractOptimizer,
    closed_optimizer,
    optimizer_record,
)
from nqf.theory.data_matrices.build import data_matrices
from nqf.theory.flow import optimizer_map
from nqf.theory.predict.stages import first_crossing
from tests.conftest import run_nqf
from tests.test_flow import case, lr_for, quad_grad, rel

FULL_BATCH = [name for name in PREDICT_OPTIMIZERS if closed_optimizer(name).deterministic_flow]


def test_every_optimizer_is_one_object_of_its_own_class():
    for name, optimizer in OPTIMIZER_RECORDS.items():
        assert isinstance(optimizer, AbstractOptimizer) and optimizer.name == name
        assert optimizer == type(optimizer)() and hash(optimizer) == hash(type(optimizer)())
        assert optimizer.closes_on_m == isinstance(optimizer, AbstractClosedOptimizer)
    with pytest.raises(nqf.NqfError, match="adam does not close on M"):
        closed_optimizer("adam")
    # the settings schema states one default beta for the M-flows that carry one
    from nqf.comparison.settings import BETA

    assert {o.default_beta for o in OPTIMIZER_RECORDS.values() if o.flow_takes_beta} == {BETA}


@pytest.mark.parametrize("name", FULL_BATCH)
@pytest.mark.parametrize("arch_name", ["mlp", "moe"])
def test_the_m_flow_is_training_the_quadratic_model(name, arch_name):
    """optimizer_map's M (and its buffers' Gram blocks) equal training W with the optax
    transformation on the quadratic model, from W0 of width n > d, to 1e-10."""
    optimizer = closed_optimizer(name)
    arch, X, Y, A = case(arch_name, 6 if arch_name == "moe" else 3)
    data = data_matrices(arch, X, Y)
    d, n, steps, beta = arch.dim, arch.dim + 3 if arch_name != "moe" else 6, 60, 0.8
    W = 0.3 * jax.random.normal(jax.random.PRNGKey(7), (d, n))
    lr = 0.3 * lr_for(data, A, W @ W.T)
    M0 = W @ W.T
    transform = optimizer.build(lr, beta)
    state = transform.init(W)
    Ms = [M0]
    for _ in range(steps):  # the training loop, written out
        updates, state = transform.update(quad_grad(W, A, Y), state, W)
        W = optax.apply_updates(W, updates)
        Ms.append(W @ W.T)
    result = optimizer_map(data, M0, lr, steps, name, beta=beta)
    assert rel(Ms[-1], Ms[0]) > 0.1  # M moved
    assert rel(result.M, np.stack(Ms)) <= 1e-10
    if optimizer.buffers:
        V = state[0].trace  # optax's momentum buffer
        P, Q = result.state
        assert rel(P, W @ V.T) <= 1e-10 and rel(Q, V @ V.T) <= 1e-10
    # adaptive stepping (jumps across linear stretches) lands on the same final M
    jumped = optimizer_map(data, M0, lr, 1500, name, beta=beta, checkpoints=[0, 1500], stepping="adaptive")
    stepped = optimizer_map(data, M0, lr, 1500, name, beta=beta, checkpoints=[0, 1500])
    assert dict(jumped.stats)["jumped"] > 0  # the Gram map derived from the step was linearised and used
    assert rel(jumped.final, stepped.final) <= 1e-7


def _step_matrix(optimizer: AbstractClosedOptimizer, curvature: float, lr: float, beta: float) -> np.ndarray:
    """The optimizer's step on one scalar direction with gradient curvature * w, as a k x k matrix
    acting on (w, buffers): column j is the step of the unit carry e_j."""
    k = 1 + optimizer.buffers
    T = np.empty((k, k))
    for j in range(k):
        unit = tuple(float(i == j) for i in range(k))
        T[:, j] = optimizer.flow_step(curvature * unit[0], unit, lr, beta)
    return T


@pytest.mark.parametrize("name", PREDICT_OPTIMIZERS)
@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9])
def test_escape_rate_and_stability_bound_are_the_steps_own(name, beta):
    """log_growth is ln of the spectral radius of the step near M = 0 (gradient -2 c w); the step
    is stable just below stable_rate / lambda and unstable just above."""
    optimizer = closed_optimizer(name)
    lr = 0.05
    for c in (0.01, 0.3, 1.5, 7.0):
        radius = np.abs(np.linalg.eigvals(_step_matrix(optimizer, -2.0 * c, lr, beta))).max()
        np.testing.assert_allclose(optimizer.log_growth(2.0 * lr * c, beta), np.log(radius), rtol=1e-12)
        np.testing.assert_allclose(optimizer.switch_slope(c, lr, beta), 1 / np.log(radius), rtol=1e-12)
    bound = optimizer.stable_rate(beta) / lr  # the largest stable curvature
    below = np.abs(np.linalg.eigvals(_step_matrix(optimizer, bound * (1 - 1e-6), lr, beta))).max()
    above = np.abs(np.linalg.eigvals(_step_matrix(optimizer, bound * (1 + 1e-6), lr, beta))).max()
    assert below <= 1.0 + 1e-9 < above


def test_nesterov_predicts_the_trained_quadratic_model():
    """The optimizer added in one file: nqf.predict's M-flow switch-on steps equal those of the
    quadratic model trained with optax's Nesterov (nqf.train); heavy ball, at the same beta,
    switches modes on at other steps (its LV map on a diagonal init: tests/test_predict.py)."""
    X, Y = nqf.get_task("staircase").generate(0, dtype=np.float64)
    arch = nqf.get_architecture("mlp", activation="tanh")
    config = nqf.PredictConfig(width=16, lr=0.02, steps=800, sigma0=1e-4, optimizer="nesterov", beta=0.5, network=False)
    p = nqf.predict(arch, X, Y, config)
    train = nqf.TrainConfig(
        width=16, lr=0.02, steps=800, sigma0=1e-4, optimizer="nesterov", beta=0.5, model="quadratic"
    )
    run = nqf.train(arch, X, Y, train, basis=p.modes.basis[:, : p.num_growing])
    trained = first_crossing(run.steps, run.occupations, p.thresholds)
    np.testing.assert_array_equal(p.mflow_switch_steps, trained)
    assert np.all(np.isfinite(p.mflow_switch_steps))
    heavy = nqf.predict(arch, X, Y, dataclasses.replace(config, optimizer="momentum"))
    assert not np.array_equal(heavy.mflow_switch_steps, p.mflow_switch_steps)


@pytest.mark.slow  # through the console script
def test_the_command_line_predicts_with_nesterov():
    done = run_nqf(
        "predict", "--task", "staircase", "--width", "8", "--lr", "0.02", "--steps", "300", "--sigma0", "1e-4",
        "--optimizer", "nesterov", "--beta", "0.5", "--no-network", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["config"]["optimizer"] == "nesterov" and out["config"]["beta"] == 0.5
    assert optimizer_record("nesterov").label == "Nesterov"
