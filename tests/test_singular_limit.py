"""Singular (vanishing-init) limit: exact step times, plateaus, suppression, convergence.

ODE solves use 4 modes and the default grid (one compilation for the file).
"""

import numpy as np
import pytest

from nqf.core.errors import NqfError
from nqf.theory.lotka_volterra.solve import solve_lv, suggested_horizon, switch_times
from nqf.theory.lotka_volterra.system import LotkaVolterra, fixed_point, logistic_switch_time
from nqf.theory.singular_limit import plateau_losses, singular_limit
from tests.conftest import assert_allclose

LR = 0.05
S = np.array([3.0, 2.0, 1.0, 0.5])

# Coupled, positive definite (eigenvalues 0.14, 1, 1, 1.86). Mode 2 starts closer to
# saturation (u_2(0) = -0.2), switches on first, and is pushed out when mode 0 arrives.
COUPLED_C = np.array([1.0, 0.8, 0.3, 0.5])
COUPLED_K = np.array([[1, 0, 0.6, 0.1], [0, 1, 0.6, 0.1], [0.6, 0.6, 1, 0], [0.1, 0.1, 0, 1.0]])
COUPLED_A = np.array([1.0, 1.0, 0.2, 1.0])  # m0_k = exp(-eps a_k), so u_k(0) = -a_k


def test_staircase_step_times_and_plateaus():
    """K = I/4, c = s/2: step k at s_k = 1/(2 lr s_k); plateau after k: L0 - sum_{j<=k} s_j^2 / 2."""
    system = LotkaVolterra(c=S / 2, K=np.eye(4) / 4, m0=1e-12, lr=LR)
    limit = singular_limit(system)
    assert_allclose(limit.step_times, 1 / (2 * LR * S), rtol=1e-14)  # 3.33, 5, 10, 20
    assert list(limit.activation_order) == [0, 1, 2, 3]
    assert_allclose(limit.plateau_losses, -np.cumsum(S**2 / 2), rtol=1e-14)  # -4.5, -6.5, -7, -7.125
    assert_allclose(limit.fixed_point, 2 * S, rtol=1e-14)
    assert limit.suppressed == ()
    assert_allclose(limit.steps(), limit.step_times * np.log(1e12), rtol=1e-14)
    order, losses = plateau_losses(system)
    assert list(order) == [0, 1, 2, 3]
    assert_allclose(losses, limit.plateau_losses, rtol=0)

    # the general event-driven path (K not exactly diagonal) gives the same answer
    K = np.eye(4) / 4
    K[0, 1] = K[1, 0] = 1e-14
    events = singular_limit(LotkaVolterra(c=S / 2, K=K, m0=1e-12, lr=LR))
    assert_allclose(events.step_times, limit.step_times, rtol=1e-12)
    assert_allclose(events.plateau_losses, limit.plateau_losses, rtol=1e-12)
    assert_allclose(events.switch_times, limit.step_times, rtol=1e-12)


def test_worked_case_with_decaying_partners():
    """docs/theory.md worked case: modes q_k+- with c = +-s/2, K_++ = K_-- = 1/4, K_+- = -1/4 (K singular).

    The + modes make the staircase; each partner's speed becomes exactly 0 once its
    + mode is on (c_- - K_-+ m_+* = -s/2 + 2s/4): it never switches on.
    """
    n = S.size
    K = np.zeros((2 * n, 2 * n))
    for k in range(n):
        K[k, k] = K[n + k, n + k] = 0.25
        K[k, n + k] = K[n + k, k] = -0.25
    system = LotkaVolterra(c=np.concatenate([S / 2, -S / 2]), K=K, m0=1e-12, lr=LR)
    limit = singular_limit(system)
    assert_allclose(limit.step_times, 1 / (2 * LR * S), rtol=1e-12)
    assert list(limit.activation_order) == [0, 1, 2, 3]
    assert_allclose(limit.fixed_point, np.concatenate([2 * S, np.zeros(n)]), rtol=1e-12, atol=1e-12)
    assert_allclose(limit.final_speeds, np.zeros(2 * n), rtol=0, atol=1e-12)
    assert np.all(np.isnan(limit.activation_times[n:]))


def test_finite_init_converges_like_one_over_eps_staircase():
    """t_k / eps - s_k = ln(m_k*) / (r_k eps) + O(e^-eps) for the logistic staircase (exact)."""
    eps = np.array([10.0, 20.0, 40.0, 80.0, 160.0, 320.0])
    errors = []
    for e in eps:
        system = LotkaVolterra(c=S / 2, K=np.eye(4) / 4, m0=np.exp(-e), lr=LR)
        limit = singular_limit(system)
        assert limit.eps == pytest.approx(e, rel=1e-14)
        finite = logistic_switch_time(S / 2, 0.25, np.exp(-e), LR)
        errors.append(finite / e - limit.switch_times)
    errors = np.array(errors)
    rates = 2 * LR * S
    # exact: eps x error = [ln m* + ln(1 - m0/m*)] / r, m* = 2 s (the second term is O(e^-eps))
    offset = (np.log(2 * S)[None, :] + np.log1p(-np.exp(-eps)[:, None] / (2 * S)[None, :])) / rates[None, :]
    assert_allclose(errors * eps[:, None], offset, rtol=1e-9, atol=1e-12)
    # log-log slope of |error| vs eps; mode 3 has m* = 1, ln m* = 0: no 1/eps term at all
    for k in range(3):
        slope = np.polyfit(np.log(eps), np.log(np.abs(errors[:, k])), 1)[0]
        assert slope == pytest.approx(-1.0, abs=1e-3)
    assert np.abs(errors[:, 3]).max() < 1e-3


def test_finite_init_converges_like_one_over_eps_coupled():
    """Coupled LV (ODE) switch times / eps -> singular-limit switch times, error ~ 1/eps.

    Measured errors x eps (modes 0, 1, 3) at eps = 20, 40, 80, 160:
    (4.58, 5.53, -20.76), (4.56, 5.77, -20.90), (4.55, 5.84, -20.94), (4.55, 5.84, -20.94).
    """
    eps = np.array([20.0, 40.0, 80.0, 160.0])
    errors = []
    for e in eps:
        system = LotkaVolterra(c=COUPLED_C, K=COUPLED_K, m0=np.exp(-e * COUPLED_A), lr=LR)
        limit = singular_limit(system, eps=e)
        sol = solve_lv(system, suggested_horizon(system))
        errors.append(switch_times(sol) / e - limit.switch_times)
    errors = np.array(errors)
    assert np.all(np.isnan(errors[:, 2]))  # mode 2 ends suppressed: no switch-on
    for k in (0, 1, 3):
        slope = np.polyfit(np.log(eps), np.log(np.abs(errors[:, k])), 1)[0]
        assert -1.1 < slope < -0.9, (k, slope)
        # eps x error settles to a constant (the O(1) offset of the finite-init switch)
        assert abs(errors[-1, k] * eps[-1] - errors[-2, k] * eps[-2]) < 0.02 * abs(errors[-1, k] * eps[-1])
    limit = singular_limit(LotkaVolterra(c=COUPLED_C, K=COUPLED_K, m0=np.exp(-20 * COUPLED_A), lr=LR), eps=20)
    assert limit.events[:3] == (
        (pytest.approx(1 / 0.3), 2, "on"),
        (pytest.approx(5.365853658536585), 0, "on"),
        (pytest.approx(5.365853658536585), 2, "off"),
    )
    assert limit.suppressed == (2,)


def test_competition_suppression_confirmed_by_lv():
    """Two competing pairs (block-diagonal K).

    Pair (0, 1): c = (1, 0.5), K = [[1, .8], [.8, 1]]: mode 1 alone would reach 0.5, but
    under mode 0 its rate is 4 lr (0.5 - 0.8) < 0: it never switches on.
    Pair (2, 3): c = (0.8, 0.3), coupling 0.9, mode 3 starts at m0 = 1e-4: it switches on
    first (to 0.3), then mode 2 arrives and pushes it out.
    """
    c = np.array([1.0, 0.5, 0.8, 0.3])
    K = np.zeros((4, 4))
    K[:2, :2] = [[1.0, 0.8], [0.8, 1.0]]
    K[2:, 2:] = [[1.0, 0.9], [0.9, 1.0]]
    system = LotkaVolterra(c=c, K=K, m0=[1e-20, 1e-20, 1e-20, 1e-4], lr=LR)
    limit = singular_limit(system)
    assert limit.suppressed == (1, 3)
    assert_allclose(limit.fixed_point, [1.0, 0.0, 0.8, 0.0], rtol=1e-12, atol=1e-12)
    assert_allclose(limit.fixed_point, fixed_point(system), rtol=1e-12, atol=1e-12)
    assert list(limit.activation_order) == [3, 0, 2]
    kinds = [(j, kind) for _, j, kind in limit.events]
    assert kinds == [(3, "on"), (0, "on"), (2, "on"), (3, "off")]
    assert np.isnan(limit.activation_times[1])
    assert_allclose(limit.plateau_losses, [-0.045, -0.545, -0.82], rtol=1e-12)
    assert np.all(limit.final_speeds[[1, 3]] < 0)

    sol = solve_lv(system, suggested_horizon(system))
    sw = switch_times(sol)
    assert np.isnan(sw[1]) and np.isnan(sw[3])
    m = sol.occupations
    # mode 1: never reaches half of its solo equilibrium, peaks at ~1e-10, then decays
    assert m[:, 1].max() < 1e-9 < 0.25
    assert m[-1, 1] < 1e-10 * m[:, 1].max()
    # mode 3: transiently on at its solo equilibrium 0.3, then suppressed
    assert m[:, 3].max() == pytest.approx(0.3, rel=1e-3)
    assert m[-1, 3] < 1e-12
    assert_allclose(m[-1, [0, 2]], [1.0, 0.8], rtol=1e-8)
    # switch times of the surviving modes agree with the limit to O(1/eps)
    assert_allclose(sw[[0, 2]] / limit.eps, limit.switch_times[[0, 2]], rtol=0.05)


def test_rejects_what_the_limit_cannot_decide():
    c = np.array([1.0, 1.0])
    with pytest.raises(NqfError, match="not symmetric"):
        singular_limit(LotkaVolterra(c=c, K=[[1.0, 0.5], [0.2, 1.0]], m0=1e-9, lr=LR))
    with pytest.raises(NqfError, match="positive semidefinite"):
        singular_limit(LotkaVolterra(c=c, K=[[1.0, 2.0], [2.0, 1.0]], m0=1e-9, lr=LR))
    with pytest.raises(NqfError, match="without bound"):
        singular_limit(LotkaVolterra(c=c, K=[1.0, 0.0], m0=1e-9, lr=LR))
    with pytest.raises(NqfError, match="eps"):
        singular_limit(LotkaVolterra(c=c, K=[1.0, 1.0], m0=2.0, lr=LR))
