r"""The optimizer's own discrete map on the Lotka-Volterra occupations, at a cost sublinear in T.

GD on a diagonal M (``gd_occupations``): u = ln m, u+ = u + 2 ln|1 + 2 lr (c - K e^u)|.
Once every mode is switched on and the interactions have settled, each mode moves at a
constant rate in u (0 for the converged modes, 2 ln|1 + 2 lr (c_k - (K m*)_k)| < 0 for the
decaying ones), so the rest of the horizon is u(t + j) = u(t) + j du exactly up to the
drift of du. :func:`lv_map_records` iterates the map in compiled blocks and, once du has
stopped changing (to ``RATE_TOLERANCE`` per step over a whole block), extrapolates to the
horizon. Heavy-ball momentum (``momentum_occupations``) can ring on its way down, so its
state (m, p, q) is extrapolated instead with each mode's 3 x 3 map for the settled
g = K m - c, once every mode is switched on and g has stopped changing.

Switch-on steps are found exactly along the way: the first step with m_k >= threshold_k.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqf.core.programs import bucket_length, to_device
from nqf.theory.flow.host import host_gd_log_occupations, host_momentum_block
from nqf.theory.lotka_volterra.system import LotkaVolterra, gd_log_occupations

BLOCK = 4096
# Largest change of a mode's per-step log-rate over a block that still counts as settled.
RATE_TOLERANCE = 1e-13


@functools.partial(jax.jit, static_argnames=("length",))
def momentum_block(c, K, lr, beta, state, length):
    """``length`` heavy-ball steps on a diagonal M from state (m, p, q): the (length, modes)
    trajectories of m, p and q (:func:`momentum_occupations` has the map)."""

    def step(state, _):
        m, p, q = state
        g = (K * m if K.ndim == 1 else K @ m) - c
        R = 2.0 * m * g + beta * p
        q_next = 4.0 * g * g * m + 4.0 * beta * g * p + beta**2 * q
        m_next = m - 2.0 * lr * R + lr**2 * q_next
        new = (m_next, R - lr * q_next, q_next)
        return new, new

    return jax.lax.scan(step, state, None, length=length)[1]


def lv_map_records(
    system: LotkaVolterra,
    num_steps: int,
    record: np.ndarray,
    thresholds: np.ndarray,
    optimizer: str = "gd",
    beta: float = 0.9,
    engine: str = "compiled",
) -> tuple[np.ndarray, np.ndarray, dict]:
    """The LV discrete map of ``optimizer`` (gd, or momentum with ``beta``) from system.m0.

    Returns (occupations at the steps ``record`` (R, m), switch-on steps (g,) for the g
    ``thresholds`` (NaN: not reached by num_steps), {"stepped", "extrapolated"}).
    """
    host = engine == "numpy"  # the same maps in numpy (nqf.theory.flow.host): nothing compiled
    c: Any
    K: Any
    lr: Any
    if host:
        c, K, lr = system.c, system.K, float(system.lr)
    else:
        c, K, lr = to_device(system.c), to_device(system.K), to_device(np.float64(system.lr))
    thresholds = np.asarray(thresholds, dtype=np.float64)
    g, m = thresholds.size, system.num_modes
    record = np.asarray(record, dtype=np.int64)
    out = np.empty((record.size, m))
    switch = np.full(g, np.nan)
    m0 = np.asarray(system.m0, dtype=np.float64)
    if record.size and record[0] == 0:
        out[0] = m0
    _cross(switch, thresholds, 0, m0[None, :g])
    if optimizer == "gd":
        # in float64 first: tiny m0 underflows in float32
        state: jax.Array | np.ndarray | tuple = np.log(m0) if host else to_device(np.log(m0))
    else:
        zero = np.zeros(m)
        state = (m0, zero, zero) if host else (to_device(m0), to_device(zero), to_device(zero))
    t, stats = 0, {"stepped": 0, "extrapolated": 0}
    while t < num_steps:
        length = min(BLOCK, num_steps - t)
        # a bucketed block (another horizon reuses the program); the steps past ``length`` are dropped
        run = bucket_length(length, cap=BLOCK)
        if optimizer == "gd":
            if host:
                us = host_gd_log_occupations(c, K, lr, state, length)
            else:
                with np.errstate(over="ignore"):  # the dropped steps may overflow
                    us = np.asarray(gd_log_occupations(c, K, lr, state, run))[:length]
            occ = np.exp(us)
            state = us[-1] if host else to_device(us[-1])
        else:
            trajectory: tuple[np.ndarray, ...]
            if host:
                trajectory = host_momentum_block(c, K, lr, float(beta), state, length)
            else:
                beta_arg = to_device(np.float64(beta))
                trajectory = tuple(np.asarray(a)[:length] for a in momentum_block(c, K, lr, beta_arg, state, run))
            occ = trajectory[0]
            state = tuple(a[-1] for a in trajectory) if host else tuple(to_device(a[-1]) for a in trajectory)
        steps = np.arange(t + 1, t + length + 1)
        _fill(out, record, steps, occ)
        _cross(switch, thresholds, t + 1, occ[:, :g])
        t += length
        stats["stepped"] += length
        if optimizer == "gd" and t < num_steps and length >= 3:
            rates = np.diff(us, axis=0)
            if np.max(np.abs(rates - rates[-1])) <= RATE_TOLERANCE:
                _extrapolate(out, record, switch, thresholds, us[-1], rates[-1], t, num_steps, g)
                stats["extrapolated"] = num_steps - t
                break
        if optimizer == "momentum" and t < num_steps and not np.any(np.isnan(switch) & (thresholds > 0)):
            Kd = np.asarray(K)
            gs = (occ * Kd[None, :] if Kd.ndim == 1 else occ @ Kd.T) - np.asarray(c)[None, :]
            if np.max(np.abs(gs - gs[-1])) <= RATE_TOLERANCE * max(1.0, float(np.max(np.abs(np.asarray(c))))):
                last = np.stack([np.asarray(a[-1]) for a in trajectory], axis=1)  # (modes, 3): m, p, q
                _extrapolate_momentum(out, record, last, gs[-1], float(lr), float(beta), t)
                stats["extrapolated"] = num_steps - t
                break
    return out, switch, stats


def _fill(out, record, steps, occ) -> None:
    lo, hi = np.searchsorted(record, [steps[0], steps[-1]], side="left")
    hi = np.searchsorted(record, steps[-1], side="right")
    if hi > lo:
        out[lo:hi] = occ[record[lo:hi] - steps[0]]


def _cross(switch, thresholds, first_step, occ) -> None:
    """Set the switch step of modes that first reach their threshold within occ (rows = steps)."""
    for k in np.flatnonzero(np.isnan(switch) & (thresholds > 0)):
        hit = np.flatnonzero(occ[:, k] >= thresholds[k])
        if hit.size:
            switch[k] = first_step + hit[0]


def _extrapolate(out, record, switch, thresholds, u, rate, t, num_steps, g) -> None:
    """u(t + j) = u + j rate for the records after t and the modes still below threshold."""
    later = record > t
    out[later] = np.exp(u[None, :] + (record[later] - t)[:, None] * rate[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in np.flatnonzero(np.isnan(switch) & (thresholds > 0)):
            if rate[k] > 0:
                j = int(np.ceil((np.log(thresholds[k]) - u[k]) / rate[k]))
                if t + j <= num_steps:
                    switch[k] = t + max(j, 1)


def _momentum_matrices(g: np.ndarray, lr: float, beta: float) -> np.ndarray:
    """Per mode, the heavy-ball map of (m, p, q) for a fixed g = (K m)_k - c_k: (modes, 3, 3).

    From R = 2 g m + beta p, q+ = 4 g^2 m + 4 beta g p + beta^2 q, m+ = m - 2 lr R + lr^2 q+,
    p+ = R - lr q+ (:func:`momentum_occupations`), all linear in (m, p, q) once g is fixed.
    """
    A = np.empty((g.size, 3, 3))
    A[:, 0] = np.stack(
        [1 - 4 * lr * g + 4 * lr**2 * g**2, -2 * lr * beta + 4 * lr**2 * beta * g, np.full_like(g, lr**2 * beta**2)],
        axis=1,
    )
    A[:, 1] = np.stack([2 * g - 4 * lr * g**2, beta - 4 * lr * beta * g, np.full_like(g, -lr * beta**2)], axis=1)
    A[:, 2] = np.stack([4 * g**2, 4 * beta * g, np.full_like(g, beta**2)], axis=1)
    return A


def _extrapolate_momentum(out, record, state, g, lr, beta, t) -> None:
    """(m, p, q)(t + j) = A^j (m, p, q)(t) per mode, g settled, for the records after t."""
    squares = [_momentum_matrices(g, lr, beta)]
    v, done = state, t
    for n in np.flatnonzero(record > t):
        j, k = int(record[n]) - done, 0
        while j:
            while len(squares) <= k:
                squares.append(np.einsum("mij,mjk->mik", squares[-1], squares[-1]))
            if j & 1:
                v = np.einsum("mij,mj->mi", squares[k], v)
            j >>= 1
            k += 1
        done = int(record[n])
        out[n] = v[:, 0]


def momentum_occupations(system: LotkaVolterra, beta: float, num_steps: int) -> np.ndarray:
    r"""Heavy-ball momentum (optax.sgd(lr, momentum=beta)) on a diagonal M, exactly.

    With G = diag(g), g = K m - c, the closed state (M, P = W V^T, Q = V V^T) of
    ``nqf.theory.flow.momentum_map`` stays diagonal: per mode

        R = 2 m g + beta p,   q+ = 4 g^2 m + 4 beta g p + beta^2 q,
        m+ = m - 2 lr R + lr^2 q+,   p+ = R - lr q+.

    Returns (num_steps + 1, modes) occupations.
    """
    m0 = jnp.asarray(system.m0)
    zero = jnp.zeros_like(m0)
    ms = momentum_block(
        jnp.asarray(system.c),
        jnp.asarray(system.K),
        jnp.asarray(system.lr),
        jnp.asarray(beta),
        (m0, zero, zero),
        int(num_steps),
    )[0]
    return np.concatenate([np.asarray(m0)[None], np.asarray(ms)], axis=0)
