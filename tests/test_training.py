"""Training loop against independent computations, divergence, sweeps, and measured switch-on steps."""

import math
from dataclasses import replace
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from nqf.architectures.architecture import structure
from nqf.core.errors import NqfError
from nqf.core.measure import (
    fit_switch_slope,
    half_fixed_point,
    loss_crossings,
    own_thresholds,
    plateau_levels,
    switch_steps,
    switch_steps_own,
)
from nqf.core.sampling import minibatch_indices
from nqf.optimizers import closed_optimizer
from nqf.training.config import TrainConfig, checkpoint_steps
from nqf.training.grid import train_grid
from nqf.training.runs import model_inputs, train, training_keys
from nqf.training.tasks import get_task
from tests.conftest import assert_allclose

STAIRCASE = get_task("staircase")
X, Y = STAIRCASE.generate(0, "float64")
ARCH = STAIRCASE.architecture()
BASIS = STAIRCASE.mode_basis(0)
THRESHOLDS = half_fixed_point(STAIRCASE.fixed_point_occupations())  # (3, 2, 1, 0.5)


@partial(jax.jit, static_argnames="lr")
def m_map(M, S, Y, lr, idx=None):
    """One GD step on M: M+ = (I - 2 lr G) M (I - 2 lr G), G = contract(forms(M) - y) (on samples idx)."""
    s = S if idx is None else jax.tree_util.tree_map(lambda a: a[idx], S)
    y = Y if idx is None else Y[idx]
    G = s.contract(s.forms(M) - y)
    P = jnp.eye(M.shape[0]) - 2 * lr * G
    return P @ M @ P


def test_gd_on_quadratic_model_equals_the_m_map():
    # training reads the readout and the inputs once (shared factors), the reference per sample and output
    marked = model_inputs(ARCH, jnp.asarray(X), "quadratic")
    assert [(t.shared_left, t.shared_right) for t in marked.terms] == [(True, True)]
    assert not any(t.shared_left for t in structure(ARCH, X).terms)
    config = TrainConfig(optimizer="gd", lr=0.05, steps=60, sigma0=0.1, width=32, model="quadratic", dtype="float64")
    result = train(ARCH, X, Y, config, basis=np.eye(ARCH.dim))
    S = structure(ARCH, X)
    W0 = np.asarray(result_init(config))
    M = W0 @ W0.T
    diagonals, losses = [np.diag(M)], [0.5 * np.mean(np.sum((np.asarray(S.forms(M)) - np.asarray(Y)) ** 2, 1))]
    for _ in range(config.steps):
        M = m_map(M, S, Y, config.lr)
        diagonals.append(np.diag(M))
        losses.append(0.5 * np.mean(np.sum((np.asarray(S.forms(M)) - np.asarray(Y)) ** 2, 1)))
    assert result.diverged_at is None
    assert_allclose(result.steps, np.arange(61), rtol=0)
    assert_allclose(result.occupations, np.array(diagonals), rtol=1e-10, atol=1e-13)
    assert_allclose(result.loss, losses, rtol=1e-10)
    assert_allclose(result.W_final @ result.W_final.T, M, rtol=1e-10, atol=1e-13)
    assert losses[-1] < 0.5 * losses[0]  # the map really moved
    assert_allclose(result.weight_norm, np.sqrt(np.sum(result.occupations, axis=1)), rtol=1e-12)
    assert result.block_names == ("a", "v")


def result_init(config):
    from nqf.architectures.architecture import init_weights

    return init_weights(ARCH, training_keys(config.seed)[0], config.width, config.sigma0, np.float64)


def test_sgd_on_quadratic_model_replays_minibatch_indices():
    config = TrainConfig(
        optimizer="sgd", lr=0.05, steps=40, batch_size=32, sigma0=0.1, seed=3, model="quadratic", dtype="float64"
    )
    result = train(ARCH, X, Y, config, basis=np.eye(ARCH.dim))
    S = structure(ARCH, X)
    batches = np.asarray(minibatch_indices(training_keys(3)[1], X.shape[0], 32, 40))
    W0 = np.asarray(result_init(config))
    M = W0 @ W0.T
    for t in range(40):
        M = m_map(M, S, Y, config.lr, batches[t])
    assert_allclose(result.W_final @ result.W_final.T, M, rtol=1e-10, atol=1e-13)
    # full-batch steps end elsewhere: the batches matter, so the comparison can fail
    M_full = W0 @ W0.T
    for _ in range(40):
        M_full = m_map(M_full, S, Y, config.lr)
    assert np.abs(M - M_full).max() > 1e-3


def test_divergence_is_reported_with_its_step():
    config = TrainConfig(optimizer="gd", lr=3.0, steps=200, sigma0=0.1, width=32, model="quadratic", dtype="float64")
    result = train(ARCH, X, Y, config, basis=BASIS)
    assert result.diverged
    # independent run: explicit gradient 2 G W in NumPy, same criterion (non-finite loss or
    # gradient, or a loss above DIVERGENCE_FACTOR = 100 times the initial loss)
    S = structure(ARCH, X)
    W = np.asarray(result_init(config))
    expected, loss0 = None, None
    with np.errstate(all="ignore"):
        for t in range(config.steps):
            f = np.asarray(S.forms(W @ W.T))
            loss = 0.5 * np.mean(np.sum((f - np.asarray(Y)) ** 2, 1))
            loss0 = loss if loss0 is None else loss0
            grad = 2 * np.asarray(S.contract(f - np.asarray(Y))) @ W
            if not (np.isfinite(loss) and np.all(np.isfinite(grad)) and loss <= 100.0 * loss0):
                expected = t
                break
            W = W - config.lr * grad
    assert expected is not None and result.diverged_at == expected
    d = result.diverged_at
    assert np.all(np.isfinite(result.loss[:d]))
    # records from the diverged step on are NaN (a blown-up state never counts as a switch-on)
    assert np.all(np.isnan(result.loss[d:])) and np.all(np.isnan(result.occupations[d:]))
    assert np.all(np.isfinite(result.W_final))  # frozen at the diverged (still finite) state


def test_sweep_shapes_and_entry_equals_single_run():
    config = TrainConfig(
        optimizer="sgd", lr=0.05, steps=50, batch_size=64, width=16, model="quadratic", dtype="float64", checkpoints=12
    )
    sigma0s, seeds = [1e-1, 1e-3, 1e-30], [0, 5]
    sweep = train_grid(ARCH, X, Y, config, sigma0s, seeds, basis=BASIS)
    R = len(sweep.steps)
    assert sweep.steps[0] == 0 and sweep.steps[-1] == 50 and np.all(np.diff(sweep.steps) > 0)
    assert sweep.loss.shape == (3, 2, R) and sweep.occupations.shape == (3, 2, R, 4)
    assert sweep.block_norms.shape == (3, 2, R, 2) and sweep.W_final.shape == (3, 2, ARCH.dim, 16)
    assert np.all(sweep.diverged_at == -1)
    single = train(ARCH, X, Y, replace(config, sigma0=1e-3, seed=5), basis=BASIS)
    entry = sweep.run(1, 1)
    assert entry.config == single.config
    for name in ("loss", "occupations", "weight_norm", "block_norms", "W_final"):
        assert_allclose(getattr(entry, name), getattr(single, name), rtol=1e-12, atol=0, err_msg=name)
    # sigma0 = 1e-30 in float64 stays representable: M(0) ~ n sigma0^2 = 1.6e-59
    assert 1e-61 < sweep.occupations[2, 0, 0].sum() < 1e-57


def test_staircase_switch_steps_and_escape_slopes():
    """docs/theory.md section 5: quadratic model, GD, lr 0.05, n = 32: 93, 138, 258, 488 at sigma0 = 1e-6."""
    config = TrainConfig(optimizer="gd", lr=0.05, steps=720, width=32, model="quadratic", dtype="float64")
    sigma0s = [1e-2, 1e-4, 1e-6, 1e-8]
    sweep = train_grid(ARCH, X, Y, config, sigma0s, [0], basis=BASIS)
    steps = switch_steps(sweep.steps, sweep.occupations, THRESHOLDS)[:, 0]  # (scales, modes)
    # measured with this data seed: 93, 136, 256, 491 (seed spread about +-4 steps)
    assert_allclose(steps[2], [93, 138, 258, 488], rtol=0.03)
    assert np.all(steps == np.round(steps))  # recorded every step: exact integer steps
    for k, c in enumerate(STAIRCASE.spectrum()):
        fit = fit_switch_slope(sigma0s, steps[:, k])
        predicted = closed_optimizer("gd").switch_slope(c, 0.05)  # 1 / ln(1 + 2 lr c_k): 7.155, 10.49, 20.50, 40.50
        assert abs(fit.slope - predicted) < 0.02 * predicted, (k, fit, predicted)
    # plateau losses of the whitened staircase, reached between switch-ons
    levels = plateau_levels(STAIRCASE.plateau_losses())
    crossings = loss_crossings(sweep.steps, sweep.loss[2, 0], levels)
    assert np.all(np.diff(crossings) > 0) and np.all(np.abs(crossings - steps[2]) < 0.1 * steps[2])


def test_tanh_network_matches_quadratic_model_on_first_modes():
    """Network vs quadratic model at sigma0 = 1e-6: docs/theory.md 94/93 and 141/138 for modes 1-2."""
    config = TrainConfig(optimizer="gd", lr=0.05, steps=170, sigma0=1e-6, width=32, dtype="float64")
    net = train(ARCH, X, Y, config, basis=BASIS)
    quad = train(ARCH, X, Y, replace(config, model="quadratic"), basis=BASIS)
    s_net = switch_steps(net.steps, net.occupations, THRESHOLDS)
    s_quad = switch_steps(quad.steps, quad.occupations, THRESHOLDS)
    assert_allclose(s_net[:2], [94, 138], rtol=0, atol=3)  # measured 94, 138
    assert_allclose(s_net[:2], s_quad[:2], rtol=0.03)
    assert np.isnan(s_net[3]) and np.isnan(s_quad[3])  # mode 4 not yet on at step 170


def test_checkpoints_and_measure_helpers():
    ck = checkpoint_steps(1000, 20)
    assert ck[0] == 0 and ck[-1] == 1000 and len(set(ck)) == len(ck) and 10 <= len(ck) <= 21
    assert 1 in ck and 2 in ck  # log-spaced early steps
    assert_allclose(checkpoint_steps(5), np.arange(6), rtol=0)

    steps = np.array([0, 1, 2, 3, 10])
    occ = np.array([[0.0, 0.0], [0.5, 0.1], [1.0, 0.2], [2.0, 0.3], [3.0, 4.0]])
    # mode 0: exact (consecutive records) at step 2; mode 1: between 3 and 10, linear in m
    assert_allclose(switch_steps(steps, occ, [1.0, 2.0]), [2.0, 3 + 7 * (2.0 - 0.3) / (4.0 - 0.3)], rtol=1e-15)
    assert np.isnan(switch_steps(steps, occ, [5.0, 2.0])[0])
    assert_allclose(own_thresholds(occ), [1.5, 2.0], rtol=0)
    assert_allclose(switch_steps_own(steps, occ), [3.0, 3 + 7 * 1.7 / 3.7], rtol=1e-15)
    with_nan = np.vstack([occ, [np.nan, np.nan]])
    assert_allclose(own_thresholds(with_nan), [1.5, 2.0], rtol=0)
    stacked = np.stack([occ, 2 * occ])  # leading (seed) axis
    assert switch_steps(steps, stacked, [1.0, 2.0]).shape == (2, 2)
    assert_allclose(loss_crossings(steps, [4.0, 3.0, 2.0, 1.0, 0.0], [2.5, 0.5]), [2.0, 3 + 7 * 0.5], rtol=1e-15)

    rng = np.random.default_rng(0)
    sig = np.array([1e-2, 1e-3, 1e-4, 1e-5, 1e-6])
    y = 4.0 + 7.0 * np.log(1 / sig) + rng.normal(0, 0.5, sig.size)
    fit = fit_switch_slope(sig, y)
    ref = scipy.stats.linregress(np.log(1 / sig), y)
    assert_allclose(
        [fit.slope, fit.stderr, fit.intercept, fit.intercept_stderr],
        [ref.slope, ref.stderr, ref.intercept, ref.intercept_stderr],
        rtol=1e-10,
    )
    assert fit.points == 5
    assert math.isnan(fit_switch_slope(sig[:2], y[:2]).stderr)
    assert_allclose(closed_optimizer("gd").switch_slope(1.5, 0.05), 1 / math.log(1.15), rtol=1e-15)
    # heavy ball: larger root of z^2 - 2.05 z + 0.9 = 0
    heavy = closed_optimizer("momentum").switch_slope(1.5, 0.05, 0.9)
    assert_allclose(heavy, 1 / math.log((2.05 + math.sqrt(2.05**2 - 3.6)) / 2), rtol=1e-15)


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


def test_config_errors():
    with pytest.raises(NqfError, match="unknown optimizer"):
        TrainConfig(optimizer="lbfgs")
    with pytest.raises(NqfError, match="batch_size"):
        TrainConfig(optimizer="sgd")
    with pytest.raises(NqfError, match="full batch"):
        TrainConfig(optimizer="gd", batch_size=8)
    with pytest.raises(NqfError, match="beta is not used"):
        TrainConfig(optimizer="gd", beta=0.9)
    with pytest.raises(NqfError, match="unknown model"):
        TrainConfig(model="mflow")
    with pytest.raises(NqfError, match="underflows float32"):
        train(ARCH, X, Y, TrainConfig(sigma0=1e-30, dtype="float32", steps=2))
    with pytest.raises(NqfError, match="targets Y must have shape"):
        train(ARCH, X, Y[:, :2], TrainConfig(steps=2))
    with pytest.raises(NqfError, match="mode basis"):
        train(ARCH, X, Y, TrainConfig(steps=2), basis=np.eye(5))
