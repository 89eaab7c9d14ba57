r"""E3's theory helpers (numpy): eps = ln(1/m0), the GD map's limit step times, the worst relative
error and its log-log slope, the singular limit's paths u_k(s) and step function, and the
competing LV system with its level crossings."""

from __future__ import annotations

import math

import numpy as np

from .config import COMPETITION_C, COMPETITION_K, COMPETITION_LOSS0


def eps_of(sigma0, width: int) -> np.ndarray:
    """eps = ln(1/m0), m0 = n sigma0^2 (E[M(0)] = n sigma0^2 I)."""
    return np.log(1.0 / (width * np.asarray(sigma0, dtype=np.float64) ** 2))


def gd_limit_times(c, lr: float) -> np.ndarray:
    """Singular limit of the GD map for uncoupled modes: s_k^GD = 1 / (2 ln(1 + 2 lr c_k)).

    u = ln(m)/eps climbs by 2 ln(1 + 2 lr c_k) / eps per step from u = -1.
    """
    return 1.0 / (2.0 * np.log1p(2.0 * lr * np.asarray(c, dtype=np.float64)))


def worst_relative_error(times_over_eps, limit) -> np.ndarray:
    """max_k |t_k / eps - s_k| / s_k per row (NaN entries, e.g. a mode never reached, count as inf)."""
    t = np.asarray(times_over_eps, dtype=np.float64)
    s = np.asarray(limit, dtype=np.float64)
    err = np.abs(t - s) / np.abs(s)
    return np.where(np.isfinite(err), err, np.inf).max(axis=-1)


def loglog_slope(eps, errors) -> tuple[float, float]:
    """Least-squares slope and intercept of ln(error) against ln(eps)."""
    eps = np.asarray(eps, dtype=np.float64)
    errors = np.asarray(errors, dtype=np.float64)
    if eps.size < 3 or not np.all(np.isfinite(errors) & (errors > 0)):
        return math.nan, math.nan
    slope, intercept = np.polyfit(np.log(eps), np.log(errors), 1)
    return float(slope), float(intercept)


def limit_paths(c, K, lr: float, events, s_grid) -> np.ndarray:
    """u_k(s) of the singular limit on ``s_grid`` (all modes start at u = -1), (S, m).

    Between events, modes at u = 0 stay there and the others move at
    4 lr (c_k - sum_{j at 0} K_kj m_j*), m* the equilibrium of the modes at u = 0 with
    m* > 0 (the events name them: "on" adds a mode, "off" removes it).
    """
    from nqf.theory.lotka_volterra.system import equilibrium

    c = np.asarray(c, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    grid = np.asarray(s_grid, dtype=np.float64)
    times = sorted({float(s) for s, _, _ in events})
    u = np.full(c.size, -1.0)
    on = np.zeros(c.size, dtype=bool)
    out = np.empty((grid.size, c.size))
    start = 0.0
    for stop in [*times, math.inf]:
        m_eq = equilibrium(c, K, on) if on.any() else np.zeros(c.size)
        speed = np.where(on, 0.0, 4.0 * lr * (c - K @ m_eq))
        inside = (grid >= start) & (grid < stop)
        out[inside] = np.minimum(u[None, :] + speed[None, :] * (grid[inside, None] - start), 0.0)
        if math.isinf(stop):
            break
        u = np.minimum(u + speed * (stop - start), 0.0)
        for s, j, kind in events:
            if float(s) == stop:
                on[j] = kind == "on"
                u[j] = 0.0 if kind == "on" else u[j]
        start = stop
    return out


def step_function(step_times, plateau_losses, loss0: float, s_grid) -> np.ndarray:
    """The limit's loss at each s: loss0 before the first step, then each step's plateau loss."""
    grid = np.asarray(s_grid, dtype=np.float64)
    levels = np.concatenate([[loss0], np.asarray(plateau_losses, dtype=np.float64)])
    return levels[np.searchsorted(np.asarray(step_times, dtype=np.float64), grid, side="right")]


def _competition_system(eps: float, lr: float):
    from nqf.theory.lotka_volterra.system import LotkaVolterra

    return LotkaVolterra(
        c=np.array(COMPETITION_C),
        K=np.array(COMPETITION_K),
        m0=np.full(len(COMPETITION_C), math.exp(-eps)),
        lr=lr,
        loss0=COMPETITION_LOSS0,
    )


def _level_crossings(sol, mode: int, level: float, grid: np.ndarray, iterations: int = 60):
    """Times at which m_mode crosses ``level`` (bracketed on ``grid``, bisected in the dense output).

    Returns (times (j,), rising (j,) bool).
    """
    target = math.log(level)
    above = sol.log_occupation(grid)[:, mode] >= target
    idx = np.flatnonzero(above[1:] != above[:-1])
    lo, hi = grid[idx].copy(), grid[idx + 1].copy()
    rising = ~above[idx]
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        past = (sol.log_occupation(mid)[:, mode] >= target) == rising
        hi = np.where(past, mid, hi)
        lo = np.where(past, lo, mid)
    return 0.5 * (lo + hi), rising
