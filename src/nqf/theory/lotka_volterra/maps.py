r"""The optimizer's own discrete map on the Lotka-Volterra occupations, at a cost sublinear in T.

On a diagonal M every mode keeps its own direction: the factor's row k and each buffer's row k
stay parallel, so a mode is a carry of scalars (its amplitude a_k, m_k = a_k^2, and one scalar
per buffer) stepped by the optimizer's own update (``AbstractClosedOptimizer.flow_step``) with
the gradient 2 g_k a_k, g = K m - c. The map is iterated in log occupations, u = ln m, with
the buffers as ratios r = b / a (so tiny m0 never underflows):

    s, r' = flow_step(2 g, (1, r)),   u+ = u + 2 ln|s|,   r+ = r' / s.

GD: u+ = u + 2 ln|1 + 2 lr (c - K e^u)|. Once every mode is switched on and g has stopped
changing (to ``RATE_TOLERANCE`` over a whole block), each mode's step is a fixed k x k matrix
T_k (k = 1 + buffers; the step applied to the unit carries) and the rest of the horizon is
x(t + j) = T_k^j x(t) exactly up to the drift of g (:func:`lv_map_records` extrapolates there;
with a one-block carry, GD's, also before the last switch-on: a mode below its threshold then
crosses at u + 2 j ln|T_k| = ln threshold).

Switch-on steps are found exactly along the way: the first step with m_k >= threshold_k.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqf.core.programs import bucket_length, to_device
from nqf.optimizers import AbstractClosedOptimizer, closed_optimizer
from nqf.theory.lotka_volterra.system import LotkaVolterra

BLOCK = 4096
# Largest change of a mode's g = (K m - c)_k over a block (relative to max(1, |c|)) that still
# counts as settled.
RATE_TOLERANCE = 1e-13


def lv_step(optimizer: AbstractClosedOptimizer, c, K, lr, beta, state):
    """One step of ``optimizer``'s LV map from state (u (m,), ratios (buffers tuple of (m,))):
    arithmetic and exp/log of whatever array module the state is (numpy or jax)."""
    u, ratios = state
    xp = jnp if isinstance(u, jax.Array) else np
    m = xp.exp(u)
    g = (K * m if K.ndim == 1 else K @ m) - c
    out = optimizer.flow_step(2.0 * g, (xp.ones_like(u), *ratios), lr, beta)
    s = out[0]
    return u + 2.0 * xp.log(xp.abs(s)), tuple(b / s for b in out[1:])


@functools.partial(jax.jit, static_argnames=("optimizer", "length"))
def lv_block(optimizer: AbstractClosedOptimizer, c, K, lr, beta, state, length):
    """``length`` steps of :func:`lv_step`: the (length, modes) trajectories of u and of each ratio."""

    def step(state, _):
        new = lv_step(optimizer, c, K, lr, beta, state)
        return new, new

    return jax.lax.scan(step, state, None, length=length)[1]


def host_lv_block(optimizer: AbstractClosedOptimizer, c, K, lr, beta, state, length: int):
    """:func:`lv_block` in numpy (nothing compiled): the same trajectories."""
    c, K = np.asarray(c), np.asarray(K)
    state = (np.array(state[0], dtype=np.float64), tuple(np.array(r, dtype=np.float64) for r in state[1]))
    us = np.empty((length, state[0].size))
    ratios = np.empty((len(state[1]), length, state[0].size))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        for t in range(length):
            state = lv_step(optimizer, c, K, lr, beta, state)
            us[t] = state[0]
            for i, r in enumerate(state[1]):
                ratios[i, t] = r
    return us, tuple(ratios)


def lv_map_records(
    system: LotkaVolterra,
    num_steps: int,
    record: np.ndarray,
    thresholds: np.ndarray,
    optimizer: str | AbstractClosedOptimizer = "gd",
    beta: float | None = None,
    engine: str = "compiled",
) -> tuple[np.ndarray, np.ndarray, dict]:
    """The LV discrete map of ``optimizer`` (``beta`` its momentum, None: its default) from system.m0.

    Returns (occupations at the steps ``record`` (R, m), switch-on steps (g,) for the g
    ``thresholds`` (NaN: not reached by num_steps), {"stepped", "extrapolated"}).
    """
    opt = closed_optimizer(optimizer)
    beta = opt.beta_of(beta)
    host = engine == "numpy"  # the same map in numpy: nothing compiled
    put: Any = (lambda a: a) if host else to_device
    c, K, lr, beta_arg = put(system.c), put(system.K), put(np.float64(system.lr)), put(np.float64(beta))
    thresholds = np.asarray(thresholds, dtype=np.float64)
    g, m = thresholds.size, system.num_modes
    record = np.asarray(record, dtype=np.int64)
    out = np.empty((record.size, m))
    switch = np.full(g, np.nan)
    m0 = np.asarray(system.m0, dtype=np.float64)
    if record.size and record[0] == 0:
        out[0] = m0
    _cross(switch, thresholds, 0, m0[None, :g])
    with np.errstate(divide="ignore"):
        u0 = np.log(m0)  # in float64 first: tiny m0 underflows in float32
    state: Any = (put(u0), tuple(put(np.zeros(m)) for _ in range(opt.buffers)))
    t, stats = 0, {"stepped": 0, "extrapolated": 0}
    Kd, cd = np.asarray(system.K), np.asarray(system.c)
    while t < num_steps:
        length = min(BLOCK, num_steps - t)
        if host:
            us, ratios = host_lv_block(opt, c, K, lr, beta_arg, state, length)
        else:
            # a bucketed block (another horizon reuses the program); the steps past ``length`` are dropped
            run = bucket_length(length, cap=BLOCK)
            with np.errstate(over="ignore"):  # the dropped steps may overflow
                us_d, ratios_d = lv_block(opt, c, K, lr, beta_arg, state, run)
                us, ratios = np.asarray(us_d)[:length], tuple(np.asarray(r)[:length] for r in ratios_d)
        occ = np.exp(us)
        state = (put(us[-1]), tuple(put(r[-1]) for r in ratios))
        steps = np.arange(t + 1, t + length + 1)
        _fill(out, record, steps, occ)
        _cross(switch, thresholds, t + 1, occ[:, :g])
        t += length
        stats["stepped"] += length
        if t >= num_steps or length < 3:
            continue
        unswitched = bool(np.any(np.isnan(switch) & (thresholds > 0)))
        if unswitched and opt.buffers:
            continue  # a mode below its threshold crosses at a step only the one-block map solves
        gs = (occ * Kd[None, :] if Kd.ndim == 1 else occ @ Kd.T) - cd[None, :]
        if np.max(np.abs(gs - gs[-1])) <= RATE_TOLERANCE * max(1.0, float(np.max(np.abs(cd)))):
            T = _mode_matrices(opt, gs[-1], float(system.lr), beta)
            x = np.stack([np.ones(m), *(r[-1] for r in ratios)], axis=1)  # (modes, k)
            _extrapolate(out, record, switch, thresholds, us[-1], x, T, t, num_steps)
            stats["extrapolated"] = num_steps - t
            break
    return out, switch, stats


def _mode_matrices(optimizer: AbstractClosedOptimizer, g: np.ndarray, lr: float, beta: float) -> np.ndarray:
    """Per mode, the optimizer's step on its carry of scalars for a fixed g: (modes, k, k), column j
    the step of the unit carry e_j (the step is linear in the carry once g is fixed)."""
    k = 1 + optimizer.buffers
    T = np.empty((g.size, k, k))
    for j in range(k):
        unit = tuple(np.full(g.size, float(i == j)) for i in range(k))
        T[:, :, j] = np.stack(optimizer.flow_step(2.0 * g * unit[0], unit, lr, beta), axis=1)
    return T


def _fill(out, record, steps, occ) -> None:
    lo = np.searchsorted(record, steps[0], side="left")
    hi = np.searchsorted(record, steps[-1], side="right")
    if hi > lo:
        out[lo:hi] = occ[record[lo:hi] - steps[0]]


def _cross(switch, thresholds, first_step, occ) -> None:
    """Set the switch step of modes that first reach their threshold within occ (rows = steps)."""
    for k in np.flatnonzero(np.isnan(switch) & (thresholds > 0)):
        hit = np.flatnonzero(occ[:, k] >= thresholds[k])
        if hit.size:
            switch[k] = first_step + hit[0]


def _extrapolate(out, record, switch, thresholds, u, x, T, t, num_steps) -> None:
    """x(t + j) = T^j x(t) per mode (x = (1, ratios), scale e^(u/2)) for the records after t;
    with a one-block carry (T scalar) also the switch steps of the modes still below threshold."""
    later = np.flatnonzero(record > t)
    if T.shape[1] == 1:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rate = 2.0 * np.log(np.abs(T[:, 0, 0]))
            out[later] = np.exp(u[None, :] + (record[later] - t)[:, None] * rate[None, :])
            for k in np.flatnonzero(np.isnan(switch) & (thresholds > 0)):
                if rate[k] > 0:
                    j = int(np.ceil((np.log(thresholds[k]) - u[k]) / rate[k]))
                    if t + j <= num_steps:
                        switch[k] = t + max(j, 1)
        return
    squares = [T]
    v, done = x, int(t)
    for n in later:
        j, level = int(record[n]) - done, 0
        done = int(record[n])
        while j:
            while len(squares) <= level:
                squares.append(np.einsum("mij,mjk->mik", squares[-1], squares[-1]))
            if j & 1:
                v = np.einsum("mij,mj->mi", squares[level], v)
            j >>= 1
            level += 1
        with np.errstate(over="ignore", under="ignore"):
            out[n] = np.exp(u) * v[:, 0] ** 2


def lv_occupations(
    system: LotkaVolterra, num_steps: int, optimizer: str | AbstractClosedOptimizer = "gd", beta: float | None = None
) -> np.ndarray:
    """The LV map of ``optimizer`` on a diagonal M from system.m0, every step: (num_steps + 1, modes)
    occupations (module docstring)."""
    opt = closed_optimizer(optimizer)
    beta = opt.beta_of(beta)
    m0 = np.asarray(system.m0, dtype=np.float64)
    with np.errstate(divide="ignore"):
        u0 = jnp.asarray(np.log(m0))
    state = (u0, tuple(jnp.zeros_like(u0) for _ in range(opt.buffers)))
    us = lv_block(
        opt,
        jnp.asarray(system.c),
        jnp.asarray(system.K),
        jnp.asarray(system.lr),
        jnp.asarray(beta),
        state,
        int(num_steps),
    )[0]
    return np.concatenate([m0[None], np.exp(np.asarray(us))], axis=0)
