"""The numpy Kvaerno5 of the LV gradient flow (nqf.theory.lv_kvaerno) against exact times, a
tight solve of its own, and diffrax's compiled solve of the same ODE to the same tolerance."""

import numpy as np
import pytest

import nqf.theory.lotka_volterra as lvm
import nqf.theory.lv_solve as lvs
from nqf.core.errors import NqfError
from nqf.theory.lv_kvaerno import kvaerno_switch_times

from .conftest import assert_allclose


def _thresholds(system):
    reference = lvm.fixed_point(system)
    positive = reference > 0
    with np.errstate(divide="ignore"):
        return np.where(positive, np.log(np.where(positive, 0.5 * reference, 1.0)), np.inf)


def _solve(system, t_final, **kw):
    return kvaerno_switch_times(
        system.c, system.dense_K, system.lr, np.log(system.m0), t_final, _thresholds(system), **kw
    )


def _partner_system(m0):
    s = np.array([3.0, 2.0, 1.0, 0.5])
    c = np.concatenate([s / 2, -s / 2])
    K = np.block([[np.eye(4) / 4, -np.eye(4) / 4], [-np.eye(4) / 4, np.eye(4) / 4]]) + 0.01
    return lvm.LotkaVolterra(c, K, np.full(8, m0), 0.05, 7.125)


@pytest.mark.parametrize("m0", [1e-3, 1e-12, 1e-60])
def test_diagonal_system_matches_the_logistic_closed_form(m0):
    """Uncoupled modes are logistic curves with exact switch-on times (lotka_volterra)."""
    c = np.array([1.5, 1.0, 0.5, 0.25, -0.3])
    k = np.array([0.25, 0.25, 0.5, 1.0, 0.2])
    system = lvm.LotkaVolterra(c, k, np.full(5, m0), 0.05, 2.0)
    exact = np.asarray(lvm.logistic_switch_time(c, k, system.m0, system.lr), dtype=np.float64)
    horizon = 1.2 * np.nanmax(exact[:4])
    times, stats = _solve(system, horizon)
    assert stats["accepted"] > 0
    assert_allclose(times[:4], exact[:4], rtol=1e-6)  # measured: 4.5e-7 at m0 = 1e-3 (the Hermite interpolant)
    assert np.isnan(times[4])  # c < 0: no fixed-point occupation, no threshold


@pytest.mark.parametrize("m0", [1e-3, 1e-12, 1e-60])
def test_coupled_system_against_a_tight_solve_and_diffrax(m0):
    """Coupled partner modes: the default tolerance (1e-8 on ln m) is within 1e-6 of a solve at
    1e-12, and of diffrax's Kvaerno5 at the same tolerance (measured: 4e-8 - 8e-7)."""
    system = _partner_system(m0)
    horizon = 30000.0 if m0 < 1e-20 else 3000.0
    times, _ = _solve(system, horizon)
    tight, _ = _solve(system, horizon, rtol=1e-12, atol=1e-12, max_steps=100000)
    compiled = lvs.flow_switch_times(system, horizon, lvm.fixed_point(system), method="compiled")
    assert np.isfinite(times[:4]).all() and np.isnan(times[4:]).all()
    assert_allclose(times, tight, rtol=2e-6)
    assert_allclose(times, compiled, rtol=2e-6)
    assert_allclose(compiled, tight, rtol=2e-6)
    assert np.all(np.diff(times[:4]) > 0)  # the staircase switches in order


def test_horizon_and_start():
    """Modes not reached by the horizon are NaN; a mode already above its threshold is 0."""
    system = _partner_system(1e-12)
    full, _ = _solve(system, 3000.0)
    short, _ = _solve(system, 0.5 * (full[1] + full[2]))
    assert_allclose(short[:2], full[:2], rtol=1e-6)
    assert np.isnan(short[2:]).all()
    high = lvm.LotkaVolterra(system.c, system.K, np.concatenate([[10.0], np.full(7, 1e-12)]), 0.05, 7.125)
    times, _ = _solve(high, 3000.0)
    assert times[0] == 0.0


def test_step_budget_is_one_error():
    with pytest.raises(NqfError, match="max steps"):
        _solve(_partner_system(1e-12), 3000.0, max_steps=5)


def test_unknown_method():
    system = _partner_system(1e-12)
    with pytest.raises(NqfError, match="unknown method"):
        lvs.flow_switch_times(system, 3000.0, lvm.fixed_point(system), method="rk4")
