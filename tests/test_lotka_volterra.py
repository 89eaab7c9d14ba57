"""Lotka-Volterra reduction: closed forms, log-space integration, fixed points, escape rates.

Every ODE solve here has 4 modes and the default output grid, so the implicit solver
compiles once for the whole file.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqf.core.errors import NqfError
from nqf.optimizers import closed_optimizer
from nqf.theory.lotka_volterra.maps import lv_occupations
from nqf.theory.lotka_volterra.solve import solve_lv, switch_times
from nqf.theory.lotka_volterra.system import (
    LotkaVolterra,
    equilibrium,
    excess_loss,
    fixed_point,
    logistic_occupation,
    logistic_switch_time,
    staircase_switch_time,
    switch_slope_continuous,
)
from tests.conftest import assert_allclose

switch_slope_gd = closed_optimizer("gd").switch_slope
switch_slope_momentum = closed_optimizer("momentum").switch_slope

LR = 0.05
S = np.array([3.0, 2.0, 1.0, 0.5])  # docs/theory.md worked case: c = s/2, K = I/4


def staircase(sigma0):
    return LotkaVolterra(c=S / 2, K=np.eye(4) / 4, m0=sigma0**2, lr=LR)


def test_validation_and_value_semantics():
    with pytest.raises(NqfError, match="shape"):
        LotkaVolterra(c=[1.0, 2.0], K=np.eye(3), m0=1e-3, lr=0.1)
    with pytest.raises(NqfError, match="m0 must be > 0"):
        LotkaVolterra(c=[1.0], K=[[1.0]], m0=0.0, lr=0.1)
    with pytest.raises(NqfError, match="non-finite"):
        LotkaVolterra(c=[np.nan], K=[[1.0]], m0=1e-3, lr=0.1)
    with pytest.raises(NqfError, match="lr"):
        LotkaVolterra(c=[1.0], K=[[1.0]], m0=1e-3, lr=-1.0)
    a = LotkaVolterra(c=[1.0, 0.5], K=[1.0, 2.0], m0=1e-3, lr=0.1)
    b = LotkaVolterra(c=[1.0, 0.5], K=np.diag([1.0, 2.0]), m0=[1e-3, 1e-3], lr=0.1)
    assert a.is_diagonal and b.is_diagonal
    assert_allclose(a.dense_K, b.K, rtol=0)
    assert a == LotkaVolterra(c=[1.0, 0.5], K=[1.0, 2.0], m0=1e-3, lr=0.1)
    assert hash(a) == hash(LotkaVolterra(c=[1.0, 0.5], K=[1.0, 2.0], m0=1e-3, lr=0.1))
    with pytest.raises((AttributeError, TypeError)):
        a.lr = 1.0
    with pytest.raises(ValueError):
        a.c[0] = 3.0  # read-only storage


def test_logistic_closed_form_solves_the_ode():
    """d/dt of the closed form equals 4 lr m (c - K m) (independent of the ODE solver)."""
    c = jnp.array([1.5, 0.7, 0.0, -0.4])
    K = jnp.array([0.25, 2.0, 1.0, 1.0])
    m0 = jnp.array([1e-20, 0.9, 1e-3, 1e-2])  # second mode starts above m* = 0.35: decays onto it
    for t in (1e-9, 3.7, 95.0, 400.0):  # (t = 0 itself: ln(4 lr K t) = -inf, derivative 0 x inf)
        m, dm = jax.jvp(lambda s: logistic_occupation(c, K, m0, LR, s), (jnp.asarray(t),), (jnp.asarray(1.0),))
        # atol: c - K m cancels near saturation (rounding of m times K)
        assert_allclose(dm, 4 * LR * m * (c - K * m), rtol=1e-10, atol=float(jnp.max(4 * LR * m * K * m)) * 1e-13)
    assert_allclose(logistic_occupation(c, K, m0, LR, 0.0), m0, rtol=1e-14)
    # a mode far past saturation and e^{rt} beyond the float range: exactly m*
    assert_allclose(logistic_occupation(1.5, 0.25, 1e-60, LR, 1e5), 6.0, rtol=1e-14)


@pytest.mark.slow  # 2.8-5.7 s
def test_single_modes_match_the_logistic_closed_form():
    """Uncoupled modes integrated by the log-space ODE solver equal the exact logistic."""
    c = np.array([1.5, 1.0, 0.5, -0.5])
    k = np.array([0.25, 0.5, 1.0, 1.0])
    m0 = np.array([1e-20, 1e-8, 1e-60, 1e-3])
    system = LotkaVolterra(c=c, K=np.diag(k), m0=m0, lr=LR)
    t_half = logistic_switch_time(c, k, m0, LR)
    assert np.isnan(t_half[3])  # c < 0: no positive fixed point
    t_final = 1.5 * np.nanmax(t_half)
    sol = solve_lv(system, t_final, method="kvaerno5", rtol=1e-12, atol=1e-12)
    exact = np.asarray(logistic_occupation(c, k, m0, LR, sol.ts[:, None]))
    assert_allclose(sol.occupations, exact, rtol=1e-8)
    assert_allclose(sol.losses, system.loss(exact), rtol=1e-8, atol=1e-12)
    # switch times by root finding in the dense output
    got = switch_times(sol)
    assert_allclose(got[:3], t_half[:3], rtol=1e-8)
    assert np.isnan(got[3])
    # the dense output between grid points
    assert_allclose(sol.occupation(t_half[:3]).diagonal(), c[:3] / k[:3] / 2, rtol=1e-8)
    # queries of any shape and size (padded to a bucket inside): a scalar, 17 times, a 2-D grid
    for t in (np.float64(0.3 * t_final), np.linspace(0.0, t_final, 17), np.linspace(0.0, t_final, 12).reshape(3, 4)):
        got = sol.log_occupation(t)
        assert got.shape == np.shape(t) + (4,)
        assert_allclose(np.exp(got), np.asarray(logistic_occupation(c, k, m0, LR, np.asarray(t)[..., None])), rtol=1e-8)
    # at the half-time the closed form is exactly half of m* = c/K
    assert_allclose(logistic_occupation(c[:3], k[:3], m0[:3], LR, t_half[:3]), c[:3] / k[:3] / 2, rtol=1e-12)
    # the diagonal closed-form path of solve_lv gives the same trajectory
    closed = solve_lv(system, t_final)
    assert closed.method == "logistic" and closed.num_steps == 0
    assert_allclose(closed.occupations, exact, rtol=1e-12)
    assert_allclose(switch_times(system)[:3], t_half[:3], rtol=1e-14)


def test_staircase_formula_of_theory_section_3():
    """t_k ~= ln(2 s_k / m0) / (2 lr s_k) is the exact half-time without the -1 inside the log."""
    m0 = 1e-12
    exact = logistic_switch_time(S / 2, 0.25, m0, LR)
    approx = staircase_switch_time(S, m0, LR)
    assert_allclose(exact - approx, np.log1p(-m0 / (2 * S)) / (2 * LR * S), rtol=1e-6, atol=1e-12)
    assert_allclose(approx, np.log(2 * S / m0) / (2 * LR * S), rtol=1e-15)


@pytest.mark.slow  # 3.4-5.9 s
def test_log_space_handles_tiny_init_and_step_count_does_not_grow_with_plateau():
    """m0 = sigma0^2 down to 1e-120; plateaus 10x longer cost < 2x solver steps.

    Measured (rtol = atol = 1e-8, Kvaerno5): sigma0 = 1e-3 / 1e-30 / 1e-60: total steps
    142 / 289 / 305, accepted 119 / 218 / 227, while the last switch moves from t = 276 to
    2763 to 5526. At sigma0 = 1e-3 the four transitions overlap and share steps; once they
    are separated (1e-30) each costs a fixed number and only ~ln(plateau) is added.
    """
    runs = {}
    for sigma0 in (1e-3, 1e-30, 1e-60):
        system = staircase(sigma0)
        exact = logistic_switch_time(S / 2, 0.25, sigma0**2, LR)
        sol = solve_lv(system, 1.3 * exact.max(), method="kvaerno5")
        assert_allclose(switch_times(sol), exact, rtol=1e-6)
        assert np.all(np.isfinite(sol.losses))
        runs[sigma0] = sol
    ratio_total = runs[1e-30].num_steps / runs[1e-3].num_steps
    ratio_accepted = runs[1e-30].num_accepted_steps / runs[1e-3].num_accepted_steps
    assert ratio_accepted <= 2.0, ratio_accepted
    assert ratio_total <= 2.2, ratio_total
    # plateau doubles again: a few more steps, not twice as many
    assert runs[1e-60].num_steps <= 1.25 * runs[1e-30].num_steps


def test_fixed_point_is_the_complementarity_solution():
    """NNLS fixed point == the unique saturated equilibrium found by enumerating active sets."""
    rng = np.random.default_rng(0)
    m = 6
    B = rng.normal(size=(m, m))
    K = B @ B.T / m + 0.1 * np.eye(m)
    c = rng.normal(size=m)
    system = LotkaVolterra(c=c, K=K, m0=1e-6, lr=LR)
    found = fixed_point(system)
    saturated = []
    for r in range(m + 1):
        for active in itertools.combinations(range(m), r):
            mask = np.zeros(m, bool)
            mask[list(active)] = True
            eq = equilibrium(c, K, mask)
            v = c - K @ eq
            if np.all(eq[mask] > 0) and np.all(v[~mask] <= 1e-12):
                saturated.append(eq)
    assert len(saturated) == 1  # K positive definite: unique
    assert_allclose(found, saturated[0], rtol=1e-10, atol=1e-12)
    assert 0 < np.count_nonzero(found) < m  # the draw has both active and suppressed modes
    # excess loss is L(m) - L(m*) computed without cancellation, and >= 0
    probe = np.abs(rng.normal(size=(5, m)))
    assert_allclose(excess_loss(system, probe), system.loss(probe) - system.loss(found), rtol=1e-9)
    assert np.all(excess_loss(system, probe) > 0)


def test_competition_equilibrium_and_errors():
    c, K = np.array([1.0, 0.5]), np.array([[1.0, 0.8], [0.8, 1.0]])
    joint = equilibrium(c, K, [0, 1])
    assert_allclose(joint, np.linalg.solve(K, c), rtol=1e-12)
    assert joint[1] < 0  # the weaker mode cannot coexist: suppressed
    assert_allclose(fixed_point(LotkaVolterra(c=c, K=K, m0=1e-9, lr=LR)), [1.0, 0.0], rtol=1e-12, atol=1e-14)
    with pytest.raises(NqfError, match="not symmetric"):
        fixed_point(LotkaVolterra(c=c, K=[[1.0, 0.2], [0.8, 1.0]], m0=1e-9, lr=LR))
    with pytest.raises(NqfError, match="positive semidefinite"):
        fixed_point(LotkaVolterra(c=c, K=[[1.0, 2.0], [2.0, 1.0]], m0=1e-9, lr=LR))
    with pytest.raises(NqfError, match="singular"):
        equilibrium([1.0, 2.0], [[1.0, 1.0], [1.0, 1.0]], [0, 1])


def test_gd_map_escape_slope():
    """Switch step of the exact GD map moves by 1/ln(1 + 2 lr c) per unit ln(1/sigma0)."""
    c = 1.5  # 2 lr c = 0.15, docs/theory.md: 1/ln(1.15) = 7.16 (measured 7.17 on a tanh network)
    assert_allclose(switch_slope_gd(c, LR), 1 / math.log(1.15), rtol=1e-14)
    assert switch_slope_gd(c, LR) == pytest.approx(7.155, abs=1e-3)
    assert switch_slope_continuous(c, LR) == pytest.approx(6.667, abs=1e-3)  # 7% off
    steps = []
    sigmas = (1e-5, 1e-60)
    for sigma0 in sigmas:
        m = lv_occupations(LotkaVolterra(c=[c], K=[0.25], m0=sigma0**2, lr=LR), 2000)[:, 0]
        steps.append(np.argmax(m >= 0.5 * c / 0.25))
    slope = (steps[1] - steps[0]) / math.log(sigmas[0] / sigmas[1])
    assert slope == pytest.approx(switch_slope_gd(c, LR), abs=0.02)


def test_momentum_escape_slope():
    """Heavy-ball: per-step growth z from the quadratic vs direct iteration of the linearised update."""
    c, beta = 1.5, 0.9
    # docs/theory.md: the slope per unit ln(1/m0) is 1/(2 ln z) = 1.445; lr/(1 - beta) would give 0.55
    assert switch_slope_momentum(c, LR, beta) / 2 == pytest.approx(1.445, abs=2e-3)

    def steps_to_grow(sigma0):
        w_prev = w = sigma0
        for n in range(1, 10_000):
            w, w_prev = w + beta * (w - w_prev) + 2 * LR * c * w, w
            if w * w >= 1.0:
                return n
        raise AssertionError("no escape")

    slope = (steps_to_grow(1e-80) - steps_to_grow(1e-5)) / math.log(1e75)
    assert slope == pytest.approx(switch_slope_momentum(c, LR, beta), abs=0.01)


def test_diagonal_fast_path_for_many_modes():
    """10^5 uncoupled modes: closed-form losses equal a direct float64 evaluation."""
    n = 100_000
    k = np.arange(1, n + 1, dtype=float)
    c = k**-1.5
    system = LotkaVolterra(c=c, K=np.ones(n), m0=1e-12, lr=LR)
    ts = np.array([0.0, 100.0, 1e3, 1e4, 1e5])
    sol = solve_lv(system, ts[-1], ts, save_occupations=False)
    assert sol.method == "logistic" and sol.occupations is None
    r = 4 * LR * c
    direct = c[None, :] / (1 + (c / 1e-12 - 1)[None, :] * np.exp(-r[None, :] * ts[:, None]))
    assert_allclose(sol.losses, -(direct @ c) + 0.5 * (direct**2).sum(1), rtol=1e-10)
    assert_allclose(sol.excess_losses, 0.5 * ((direct - c) ** 2).sum(1), rtol=1e-9)
    assert_allclose(switch_times(system), np.log(c / 1e-12 - 1) / r, rtol=1e-13)
