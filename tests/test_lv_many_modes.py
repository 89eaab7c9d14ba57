"""The closed-form (logistic) path of ``solve_lv`` for many uncoupled modes: evaluated in
(time x mode) blocks, it equals an independent numpy float64 evaluation, whatever the
block sizes, and special modes (c <= 0, K = 0, m0 >= m*, tiny m0) keep the log-space form.

Correctness only; the speed target lives in benchmarks/ (``lv_many_modes``).
"""

import numpy as np
import pytest

import nqf.theory.lotka_volterra.logistic as lv
from nqf.theory.lotka_volterra.solve import default_times, solve_lv
from nqf.theory.lotka_volterra.system import LotkaVolterra, logistic_occupation, logistic_switch_time
from tests.conftest import assert_allclose

LR = 0.05


def _power_law_system(n=2999):
    """c_k = k^-1.5 with K and m0 varying per mode (c > 0, K > 0, m0 < m*: the one-exp form)."""
    k = np.arange(1, n + 1, dtype=np.float64)
    c = k**-1.5
    K = 1.0 + 0.5 * np.sin(k)
    m0 = 1e-12 * (1.0 + 0.3 * np.cos(k))
    return LotkaVolterra(c=c, K=K, m0=m0, lr=LR)


def _reference(system, ts):
    """Straight numpy float64: m = m*/(1 + q), q = (m*/m0 - 1) e^{-rt}; m - m* = -m* q/(1 + q)
    (no cancellation); L = L0 - c.m + K.m^2/2, excess = K.(m - m*)^2 / 2 (w = c - K m* = 0)."""
    c, K, m0 = system.c, system.diagonal, system.m0
    m_star = c / K
    q = (m_star / m0 - 1.0) * np.exp(-4.0 * system.lr * c * ts[:, None])
    m = m_star / (1.0 + q)
    delta = -m_star * q / (1.0 + q)
    return m, system.loss0 - m @ c + 0.5 * (m * m) @ K, 0.5 * (delta * delta) @ K


def _small_blocks(monkeypatch, mode_chunk=400, block=1000):
    monkeypatch.setattr(lv, "_LOGISTIC_MODE_CHUNK", mode_chunk)
    monkeypatch.setattr(lv, "_LOGISTIC_BLOCK_ELEMENTS", block)


def test_blocks_equal_a_direct_numpy_evaluation(monkeypatch):
    """2999 modes in chunks of 375 (8 chunks, one padding mode), 257 times in blocks of 2
    (one padding time): occupations, losses and excess losses equal the direct evaluation."""
    system = _power_law_system()
    horizon = 1.2 * float(np.max(logistic_switch_time(system.c, system.diagonal, system.m0, LR)))
    ts = default_times(horizon, 129)
    m, loss, excess = _reference(system, ts)
    _small_blocks(monkeypatch)
    sol = solve_lv(system, horizon, ts)
    assert sol.method == "logistic" and sol.occupations.shape == (ts.size, system.num_modes)
    assert_allclose(sol.occupations, m, rtol=1e-13)
    assert_allclose(sol.losses, loss, rtol=1e-12)
    assert_allclose(sol.excess_losses, excess, rtol=1e-12)
    # at t = 0 the occupations are m0 exactly
    assert np.array_equal(sol.occupations[0], system.m0)


@pytest.mark.parametrize("mode_chunk, block, batch_size", [(4096, 1 << 17, 64), (400, 1000, 64), (7, 50, 3), (1, 1, 1)])
def test_block_sizes_do_not_change_the_result(monkeypatch, mode_chunk, block, batch_size):
    system = _power_law_system(203)
    ts = np.concatenate([[0.0], np.geomspace(1.0, 2e4, 40)])
    m, loss, excess = _reference(system, ts)
    _small_blocks(monkeypatch, mode_chunk, block)
    for save in (True, False):
        sol = solve_lv(system, ts[-1], ts, save_occupations=save, batch_size=batch_size)
        assert_allclose(sol.losses, loss, rtol=1e-12)
        assert_allclose(sol.excess_losses, excess, rtol=1e-12)
        if save:
            assert_allclose(sol.occupations, m, rtol=1e-13)
        else:
            assert sol.occupations is None


def test_excess_loss_is_nonnegative_and_decreasing():
    system = _power_law_system(5000)
    horizon = 1.5 * float(np.max(logistic_switch_time(system.c, system.diagonal, system.m0, LR)))
    sol = solve_lv(system, horizon, save_occupations=False)
    excess = sol.excess_losses
    assert np.all(excess > 0)
    assert np.all(np.diff(excess) < 0)
    assert excess[-1] < 1e-6 * excess[0]


def test_special_modes_keep_the_log_space_form(monkeypatch):
    """Modes off the one-exp form (c < 0, c = 0, K = 0, m0 > m*, m0 = 1e-300, subnormal
    m0) mixed with regular ones, across chunk boundaries: every occupation equals the
    log-space closed form exponentiated in numpy (subnormal m survive), in the original
    mode order, and the losses equal L(m) of those occupations."""
    rng = np.random.default_rng(3)
    n = 1500
    c = rng.lognormal(0.0, 1.0, n)
    K = rng.lognormal(0.0, 0.5, n)
    m0 = 10.0 ** rng.uniform(-60, -2, n)
    kind = rng.integers(0, 8, n)
    c = np.where(kind == 1, -c, c)
    c = np.where(kind == 2, 0.0, c)
    K = np.where(kind == 3, 0.0, K)
    c = np.where(kind == 3, -np.abs(c), c)  # K = 0 with c < 0: pure decay m0 e^{rt}
    m0 = np.where(kind == 4, 3.0 * c / np.where(K > 0, K, 1.0), m0)  # above m*: decays onto it
    m0 = np.where(kind == 5, 1e-300, m0)
    m0 = np.where(kind == 6, 5e-310, m0)  # subnormal
    m0 = np.where(m0 > 0, m0, 1e-3)
    system = LotkaVolterra(c=c, K=K, m0=m0, lr=LR, loss0=0.7)
    ts = np.concatenate([[0.0], np.geomspace(1e-3, 3e3, 97)])
    _small_blocks(monkeypatch, 128, 2000)
    sol = solve_lv(system, ts[-1], ts)
    exact = np.exp(np.asarray(lv.logistic_log_occupation(c, K, np.log(m0), LR, ts[:, None])))
    assert_allclose(sol.occupations, exact, rtol=1e-13)
    scale = np.abs(system.loss0) + np.abs(exact) @ np.abs(c) + 0.5 * (exact * exact) @ K
    assert_allclose(sol.losses, system.loss(exact), rtol=0, atol=1e-14 * float(scale.max()))
    assert_allclose(sol.occupations[0, kind == 6], 5e-310, rtol=1e-12)  # subnormal, not flushed to 0
    # without K = 0 growth the fixed point exists and the excess loss is L(m) - L(m*) >= 0
    assert sol.excess_losses is not None and np.all(sol.excess_losses >= 0)


def test_regular_modes_match_the_log_space_form_at_extremes():
    """m0 = 1e-60 (far switch-on), e^{rt} beyond the float range, m0 = m* (rho = 1)."""
    c = np.array([1.5, 1e-6, 0.3, 2.0])
    K = np.array([0.25, 1.0, 0.3, 4.0])
    m0 = np.array([1e-60, 1e-60, 1.0, 1e-200])  # mode 3: m0 = m* exactly
    system = LotkaVolterra(c=c, K=K, m0=m0, lr=LR)
    ts = np.array([0.0, 1e-9, 1.0, 461.0, 1e5, 1e9])
    sol = solve_lv(system, ts[-1], ts)
    exact = np.asarray(logistic_occupation(c, K, m0, LR, ts[:, None]))
    assert_allclose(sol.occupations, exact, rtol=1e-13)
    assert np.array_equal(sol.occupations[0], m0)
    assert np.all(sol.occupations[:, 2] == 1.0)
    assert_allclose(sol.occupations[-1, [0, 3]], (c / K)[[0, 3]], rtol=1e-15)
