"""The numpy Kvaerno5 of the LV gradient flow (nqf.theory.lotka_volterra.kvaerno) against exact times, a
tight solve of its own, and diffrax's compiled solve of the same ODE to the same tolerance; its
batch of systems (shared c, K; own lr, u0, thresholds) against the scalar solver row by row."""

import numpy as np
import pytest

import nqf.theory.lotka_volterra.kvaerno as lvk
import nqf.theory.lotka_volterra.solve as lvs
import nqf.theory.lotka_volterra.system as lvm
from nqf.core.errors import NqfError
from nqf.theory.lotka_volterra.kvaerno import kvaerno_switch_times, kvaerno_switch_times_batch

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


# -- the batch ------------------------------------------------------------------------------------------


def _dense_staircase(m, seed):
    """c > 0 decreasing (a staircase), K = I/4 + a dense symmetric PSD coupling."""
    rng = np.random.default_rng(seed)
    c = np.sort(rng.uniform(0.2, 1.5, m))[::-1]
    q = np.linalg.qr(rng.standard_normal((m, m)))[0]
    K = 0.25 * np.eye(m) + 0.05 * (q * rng.uniform(0.0, 1.0, m)) @ q.T
    m_star = np.linalg.solve(K, c)
    assert (m_star > 0).all()
    return c, K, np.log(0.5 * m_star)


def _mixed_rows(m, rows, seed):
    """lr in [0.01, 0.1], m0 from 1e-3 to 1e-60 (log-spaced, shuffled), per-mode jitter."""
    rng = np.random.default_rng(seed)
    lr = rng.uniform(0.01, 0.1, rows)
    m0 = rng.permutation(np.logspace(-3, -60, rows))
    return lr, np.log(m0)[:, None] + rng.normal(0.0, 0.5, (rows, m))


def _assert_rows_equal_scalar(c, K, lr, u0, t_final, thresholds, **kw):
    """Each row of the batch is the scalar solver's result, bit for bit, with its step counts.

    Exact, not to a tolerance: each row takes the scalar solver's arithmetic (one BLAS gemv per
    row and product, one LAPACK inverse per chord matrix), so no row depends on its neighbours."""
    times, stats = kvaerno_switch_times_batch(c, K, lr, u0, t_final, thresholds, **kw)
    lrs = np.broadcast_to(lr, (u0.shape[0],))
    rows = np.broadcast_to(thresholds, u0.shape)
    assert times.shape == u0.shape and stats["steps"].shape == stats["accepted"].shape == (u0.shape[0],)
    for b in range(u0.shape[0]):
        one, one_stats = kvaerno_switch_times(c, K, lrs[b], u0[b], t_final, rows[b], **kw)
        np.testing.assert_array_equal(times[b], one, err_msg=f"row {b}")
        assert (stats["steps"][b], stats["accepted"][b]) == (one_stats["steps"], one_stats["accepted"]), b
    return times, stats


@pytest.mark.slow  # 2.8-5.7 s
def test_batch_equals_the_scalar_solver_row_by_row():
    """50 coupled staircase systems (4 modes, dense K), lr in [0.01, 0.1], m0 from 1e-3 to 1e-60:
    the same times to the last bit and the same step counts (rows take 70 to 264 steps)."""
    c, K, thresholds = _dense_staircase(4, seed=0)
    lr, u0 = _mixed_rows(4, 50, seed=1)
    times, stats = _assert_rows_equal_scalar(c, K, lr, u0, 1e5, thresholds)
    assert np.isfinite(times).all()
    assert stats["steps"].min() < stats["steps"].max()  # rows leave the batch at different sweeps


def test_batch_horizon_start_and_per_row_thresholds():
    """Rows whose thresholds are not reached by the horizon (NaN), rows already above a threshold
    at t = 0 (time 0), thresholds per row with modes never asked (inf), one lr for all rows."""
    c, K, thresholds = _dense_staircase(3, seed=2)
    rows = 12
    _, u0 = _mixed_rows(3, rows, seed=3)
    per_row = np.tile(thresholds, (rows, 1))
    u0[:3, 0] = thresholds[0] + 1.0  # above at t = 0
    u0[3, :] = thresholds + 0.5  # every mode above: done before the first step
    per_row[4:6, 2] = np.inf  # never asked
    per_row[6, :] = np.inf  # nothing asked
    times, stats = _assert_rows_equal_scalar(c, K, 0.05, u0, 400.0, per_row)
    assert (times[:4, 0] == 0.0).all() and (times[3] == 0.0).all()
    assert stats["steps"][3] == stats["steps"][6] == 0  # nothing pending: no step at all
    assert np.isnan(times[4:6, 2]).all() and np.isnan(times[6]).all()
    cut = np.isnan(times) & np.isfinite(per_row)  # asked, not reached by the horizon
    assert cut.any() and (np.isfinite(times) & (times > 0)).any()
    longer, _ = kvaerno_switch_times_batch(c, K, 0.05, u0, 1e5, per_row)
    assert np.isfinite(longer[cut]).all() and (longer[cut] > 400.0).all()
    reached = np.isfinite(times)
    assert_allclose(times[reached], longer[reached], rtol=1e-6)  # the horizon moves only the last step


def test_batch_diagonal_K_against_the_logistic_times():
    """Uncoupled modes: each row's times are the exact logistic ones, and the scalar solver's."""
    c = np.array([1.5, 1.0, 0.5, -0.3])
    k = np.array([0.25, 0.25, 0.5, 0.2])
    lr, u0 = _mixed_rows(4, 10, seed=4)
    with np.errstate(divide="ignore"):
        thresholds = np.where(c > 0, np.log(np.maximum(0.5 * c / k, 0.0)), np.inf)
    times, _ = _assert_rows_equal_scalar(c, np.diag(k), lr, u0, 1e5, thresholds)
    exact = lvm.logistic_switch_time(c, k, np.exp(u0), lr[:, None])
    assert_allclose(times[:, :3], exact[:, :3], rtol=1e-6)
    assert np.isnan(times[:, 3]).all()


def test_batch_errors_name_the_row():
    """The step budget is per row, counted as the scalar solver counts it; the error names the row."""
    c, K, thresholds = _dense_staircase(3, seed=5)
    u0 = np.log(np.array([[1e-12] * 3, [1e-3] * 3, [1e-12] * 3]))
    u0[1] = thresholds + 1.0  # row 1 is done at t = 0
    _, stats = kvaerno_switch_times_batch(c, K, 0.05, u0, 1e5, thresholds)
    with pytest.raises(NqfError, match=r"^solve_lv: the ODE solver failed on row 0 of 3 \(max steps"):
        kvaerno_switch_times_batch(c, K, 0.05, u0, 1e5, thresholds, max_steps=int(stats["steps"][0]) - 1)
    budget = int(stats["steps"].max())  # enough for the row with the most steps
    kvaerno_switch_times_batch(c, K, 0.05, u0, 1e5, thresholds, max_steps=budget)
    u0[0] = thresholds + 1.0
    with pytest.raises(NqfError, match="on row 2 of 3"):
        kvaerno_switch_times_batch(c, K, np.array([0.05, 0.05, 0.01]), u0, 1e5, thresholds, max_steps=budget)


def test_batch_rows_whose_chord_iteration_fails_and_chunks(monkeypatch):
    """With 4 chord iterations instead of 10 many steps fail in some rows and not in others:
    those rows halve their own step and the batch still equals the scalar solver row by row.
    Solving the rows in chunks of 3 changes no number, and errors count rows across chunks."""
    c, K, thresholds = _dense_staircase(4, seed=6)
    lr, u0 = _mixed_rows(4, 10, seed=7)
    reference, stats = kvaerno_switch_times_batch(c, K, lr, u0, 1e5, thresholds)
    failed = []
    step = lvk._step

    def counting_step(*args):
        ok, u1, err = step(*args)
        failed.append((ok.size - np.count_nonzero(ok), ok.size))
        return ok, u1, err

    with monkeypatch.context() as patch:
        patch.setattr(lvk, "_NEWTON_ITERATIONS", 4)
        patch.setattr(lvk, "_step", counting_step)
        few, few_stats = _assert_rows_equal_scalar(c, K, lr, u0, 1e5, thresholds)
    assert any(0 < fails < rows for fails, rows in failed)  # a sweep where some rows fail, others not
    assert (few_stats["steps"] > stats["steps"]).any()
    assert_allclose(few, reference, rtol=1e-6)  # the same solve, other steps
    monkeypatch.setattr(lvk, "_CHUNK_ENTRIES", 3 * 16)
    chunked, chunked_stats = kvaerno_switch_times_batch(c, K, lr, u0, 1e5, thresholds)
    np.testing.assert_array_equal(chunked, reference)
    np.testing.assert_array_equal(chunked_stats["steps"], stats["steps"])
    u0[:7] = thresholds + 1.0  # rows 0-6 are done at t = 0: the first chunks have nothing to do
    with pytest.raises(NqfError, match="on row 7 of 10"):
        kvaerno_switch_times_batch(c, K, lr, u0, 1e5, thresholds, max_steps=3)


_C, _K = np.ones(3), np.eye(3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.ones((3, 1)), _K, 0.05, np.zeros((2, 3)), 10.0, np.zeros(3)), "c must be 1-D"),
        ((_C, np.eye(4), 0.05, np.zeros((2, 3)), 10.0, np.zeros(3)), r"K must be \(3, 3\)"),
        ((_C, _K, 0.05, np.zeros(3), 10.0, np.zeros(3)), r"u0 must be \(B, 3\)"),
        ((_C, _K, 0.05, np.zeros((2, 4)), 10.0, np.zeros(3)), r"u0 must be \(B, 3\)"),
        ((_C, _K, np.full(3, 0.05), np.zeros((2, 3)), 10.0, np.zeros(3)), r"lr must be one number or \(2,\)"),
        ((_C, _K, 0.05, np.zeros((2, 3)), 10.0, np.zeros(4)), r"thresholds must be \(3,\) or \(2, 3\)"),
        ((_C, _K, 0.05, np.zeros((2, 3)), 10.0, np.zeros((3, 3))), "thresholds must be"),
        ((_C, _K, 0.05, np.zeros((2, 3)), np.ones(2), np.zeros(3)), "t_final must be one number"),
    ],
)
def test_batch_bad_shapes_are_one_line_errors(args, message):
    with pytest.raises(NqfError, match="^kvaerno_switch_times_batch: " + message) as caught:
        kvaerno_switch_times_batch(*args)
    assert "\n" not in str(caught.value)


def test_scalar_bad_shapes_are_one_line_errors():
    with pytest.raises(NqfError, match=r"^kvaerno_switch_times: u0 must be \(3,\)"):
        kvaerno_switch_times(_C, _K, 0.05, np.zeros((1, 3)), 10.0, np.zeros(3))
    with pytest.raises(NqfError, match=r"^kvaerno_switch_times: lr must be one number"):
        kvaerno_switch_times(_C, _K, np.full(1, 0.05), np.zeros(3), 10.0, np.zeros(3))
