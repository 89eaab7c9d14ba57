r"""Plateaus as a singular limit of the Lotka-Volterra flow (docs/theory.md section 3).

With eps = ln(1/m0), rescaled time s = t / eps and u_k = ln(m_k) / eps, the LV flow
dm_k/dt = 4 lr m_k (c_k - (K m)_k) becomes, as eps -> infinity, piecewise linear:

- modes with u_k < 0 have m_k = e^{eps u_k} -> 0 and move at constant speed
  v_k = 4 lr (c_k - sum_{j active} K_kj m_j*);
- the modes at u = 0 relax (in time O(1/eps) of s) to the stable equilibrium m* of
  the LV system restricted to them: the minimiser of L over m >= 0 supported on
  them (for the theory's symmetric PSD K). A mode at u = 0 with m_k* = 0 has
  v_k <= 0; if v_k < 0 it is *suppressed* and leaves (u_k decreases again);
- a mode activates when u_k reaches 0.

Between events everything is linear, so the limit is computed exactly, event by
event. Per-mode initial occupations enter as u_k(0) = ln(m0_k) / eps. The finite-init
LV switch times satisfy t_k / eps = s_k + O(1/eps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nqf.core.errors import NqfError
from nqf.theory.lotka_volterra.system import (
    LotkaVolterra,
    check_symmetric_psd,
    diagonal_fixed_point,
    read_only_array,
    stable_equilibrium,
)

if TYPE_CHECKING:  # jaxtyping imports JAX; annotations only, so this module stays JAX-free
    from jaxtyping import ArrayLike, Bool, Float, Int

__all__ = ["SingularLimit", "plateau_losses", "singular_limit"]


@dataclass(frozen=True, eq=False)
class SingularLimit:
    """The eps -> infinity limit of an LV system: event times in rescaled time s = t/eps.

    Attributes:
        eps: the eps used to rescale (ln(1/m0); for per-mode m0, minus the mean of ln m0).
        step_times: (n,) s at which each activation happens, ascending.
        activation_order: (n,) the mode activated at each step (a mode suppressed and
            later re-activated appears twice).
        plateau_losses: (n,) the loss on the plateau after each step (the loss at the
            stable equilibrium of the modes at u = 0 then, suppressions included).
        events: tuple of (s, mode, "on" | "off") in time order ("off": suppressed).
        activation_times: (m,) first activation s per mode (NaN: never activates).
        switch_times: (m,) first s at which m_k(s) >= m_k*/2, m* the final fixed point
            (NaN where m_k* = 0): the limit of the finite-init switch time / eps.
        fixed_point: (m,) the final equilibrium (every mode with u < 0 has v <= 0).
        suppressed: modes that would grow alone (c_k > 0) but end at m_k* = 0.
        final_speeds: (m,) v_k at the end (<= 0 off the support).
        initial_loss: L(0) = loss0.
    """

    eps: float
    step_times: Float[np.ndarray, " n"]
    activation_order: Int[np.ndarray, " n"]
    plateau_losses: Float[np.ndarray, " n"]
    events: tuple
    activation_times: Float[np.ndarray, " m"]
    switch_times: Float[np.ndarray, " m"]
    fixed_point: Float[np.ndarray, " m"]
    suppressed: tuple
    final_speeds: Float[np.ndarray, " m"]
    initial_loss: float

    def steps(self, eps: float | None = None) -> np.ndarray:
        """Step times in optimizer steps, t = s * eps (default: this limit's eps)."""
        return self.step_times * (self.eps if eps is None else float(eps))

    def switch_steps(self, eps: float | None = None) -> np.ndarray:
        """Per-mode switch-on times in optimizer steps, s_k * eps."""
        return self.switch_times * (self.eps if eps is None else float(eps))


def _limit(
    system: LotkaVolterra, eps, steps, events, activation, switch, fixed_point, suppressed, speeds
) -> SingularLimit:
    """The SingularLimit of ``system``, its arrays stored read-only; steps: (step times, activated
    modes, plateau losses) of the activations, in order."""
    step_times, order, losses = steps
    return SingularLimit(
        eps=eps,
        step_times=read_only_array(step_times),
        activation_order=read_only_array(order, dtype=int),
        plateau_losses=read_only_array(losses),
        events=tuple(events),
        activation_times=read_only_array(activation),
        switch_times=read_only_array(switch),
        fixed_point=read_only_array(fixed_point),
        suppressed=suppressed,
        final_speeds=read_only_array(speeds),
        initial_loss=system.loss0,
    )


def singular_limit(
    system: LotkaVolterra, eps: float | None = None, never: Bool[ArrayLike, " m"] | None = None
) -> SingularLimit:
    """The exact event-driven singular limit of ``system`` (see module docstring).

    Args:
        system: LotkaVolterra with symmetric positive semidefinite K (the theory's K).
        eps: rescaling, default ``system.eps`` = -mean(ln m0) over the modes not in
            ``never``. Modes start at u_k = min(ln(m0_k) / eps, 0).
        never: optional (m,) bool, modes whose initial occupation is exactly zero (they
            stay at m_k = 0: u_k = -inf, never activated, never counted as suppressed).
    Returns:
        SingularLimit.
    Raises:
        NqfError: K not symmetric PSD, or the loss is unbounded below on the modes that
            activate (c outside the range of K there).
    """
    never = np.zeros(system.num_modes, dtype=bool) if never is None else np.asarray(never, dtype=bool)
    if never.shape != (system.num_modes,):
        raise NqfError(f"singular_limit: never must have shape ({system.num_modes},), got {never.shape}")
    eps = limit_eps(system, never) if eps is None else float(eps)
    if not (np.isfinite(eps) and eps > 0):
        raise NqfError(
            f"singular_limit: the vanishing-init limit needs a small init, eps = -mean ln m_k(0) > 0 (the modes "
            f"starting below 1 on average); got eps = {eps:.4g}"
        )
    if system.is_diagonal:
        return _diagonal_limit(system, eps, never)
    check_symmetric_psd(system.K, "singular_limit")
    return _event_limit(system, eps, never)


def limit_eps(system: LotkaVolterra, never: Bool[ArrayLike, " m"] | None = None) -> float:
    """The default eps of :func:`singular_limit`: -mean(ln m0) over the modes not in ``never``
    (``system.eps`` when every mode is). The limit exists only for eps > 0: m0 below 1 on average."""
    live = np.ones(system.num_modes, dtype=bool) if never is None else ~np.asarray(never, dtype=bool)
    return float(-np.mean(np.log(system.m0[live]))) if live.any() else system.eps


def no_limit(system: LotkaVolterra) -> SingularLimit:
    """What stands for the limit of a system whose init is not small (``limit_eps`` <= 0, where
    :func:`singular_limit` refuses): eps NaN, no events, NaN times and fixed point; its
    initial loss is the system's. ``nqf.predict`` gives it, with a note, and the rest of its
    prediction (M-flow, LV), which does not rest on a small init."""
    nan, empty = np.full(system.num_modes, np.nan), np.zeros(0)
    return _limit(system, math.nan, (empty, empty, empty), (), nan, nan, nan, (), nan)


def _diagonal_limit(system: LotkaVolterra, eps: float, never: np.ndarray) -> SingularLimit:
    """Uncoupled modes: mode k activates at s_k = -u_k(0) / r_k when c_k > 0 (and m0_k > 0)."""
    c, k = system.c, system.diagonal
    rates = system.growth_rates
    m_star = diagonal_fixed_point(system, "singular_limit")
    u0 = np.minimum(np.log(system.m0) / eps, 0.0)
    grows = (c > 0) & ~never
    m_star[never] = 0.0
    act = np.full(c.size, np.nan)
    act[grows] = -u0[grows] / rates[grows]
    order = np.flatnonzero(grows)
    order = order[np.argsort(act[order], kind="stable")]
    losses = system.loss0 - np.cumsum(0.5 * c[order] ** 2 / k[order])
    speeds = np.where(grows, 0.0, rates)
    events = [(float(act[j]), int(j), "on") for j in order]
    return _limit(system, eps, (act[order], order, losses), events, act, act, m_star, (), speeds)


def _event_limit(system: LotkaVolterra, eps: float, never: np.ndarray) -> SingularLimit:
    """Coupled modes: the limit event by event (module docstring), from u_k(0) = min(ln m0_k / eps, 0)."""
    c, K, lr = system.c, system.K, system.lr
    m = c.size
    scale_v = 4.0 * lr * max(np.abs(c).max(), 1e-300)
    tol_v = 1e-12 * scale_v
    tol_u = 1e-12
    tol_m = 1e-12

    u = np.minimum(np.log(system.m0) / eps, 0.0)
    u[never] = -np.inf  # exactly zero: never arrives (v * dt stays finite)
    at_zero = u >= -tol_u
    u[at_zero] = 0.0
    s = 0.0
    m_eq = stable_equilibrium(c, K, at_zero)
    history = [(0.0, m_eq.copy())]  # piecewise-constant equilibrium occupations
    events = [(0.0, int(j), "on") for j in np.flatnonzero(m_eq > tol_m)]
    losses = [float(system.loss(m_eq))] * len(events)  # the plateau after each "on" event

    max_events = 10 * m + 100
    for _ in range(max_events):
        v = 4.0 * lr * (c - K @ m_eq)
        # Modes at u = 0 with m* = 0 and v < 0 are pushed out (suppressed) and start falling.
        leaving = at_zero & (m_eq <= tol_m) & (v < -tol_v)
        at_zero = at_zero & ~leaving
        moving = ~at_zero
        arriving_candidates = moving & (v > tol_v)
        if not arriving_candidates.any():
            break
        dt_each = np.where(arriving_candidates, -u / np.where(arriving_candidates, v, 1.0), np.inf)
        dt = dt_each.min()
        if not np.isfinite(dt):  # only modes at u = -inf could still grow: nothing more happens
            break
        arriving = arriving_candidates & (dt_each <= dt * (1 + 1e-12) + 1e-15)
        u = np.where(moving, u + v * dt, u)
        u[arriving] = 0.0
        s += dt
        at_zero = at_zero | arriving
        m_new = stable_equilibrium(c, K, at_zero)
        on = np.flatnonzero((m_eq <= tol_m) & (m_new > tol_m))
        events += [(s, int(j), "on") for j in on]
        events += [(s, int(j), "off") for j in np.flatnonzero((m_eq > tol_m) & (m_new <= tol_m))]
        losses += [float(system.loss(m_new))] * on.size
        m_eq = m_new
        history.append((s, m_eq.copy()))
    else:
        raise NqfError("singular_limit: too many events (cycling active sets?)")

    # the final limit, from the equilibrium after the last event (entries <= tol_m count as 0)
    # and history, [(s, equilibrium)] after each event
    v = 4.0 * lr * (c - K @ m_eq)
    m_final = np.where(m_eq > tol_m, m_eq, 0.0)
    step_times = [s_ev for s_ev, _, kind in events if kind == "on"]
    order = [j for _, j, kind in events if kind == "on"]
    activation = np.full(m, np.nan)
    for s_ev, mode in zip(step_times, order, strict=True):
        if np.isnan(activation[mode]):
            activation[mode] = s_ev
    switch = np.full(m, np.nan)
    for j in np.flatnonzero(m_final > 0):
        for s_h, m_h in history:
            if m_h[j] >= 0.5 * m_final[j]:
                switch[j] = s_h
                break
    suppressed = tuple(int(j) for j in np.flatnonzero((c > 0) & (m_final == 0) & ~never))
    return _limit(system, eps, (step_times, order, losses), events, activation, switch, m_final, suppressed, v)


def plateau_losses(system: LotkaVolterra) -> tuple[np.ndarray, np.ndarray]:
    """Loss level on each plateau, in switch order (from the singular limit).

    After each successive activation the modes at u = 0 sit at their stable equilibrium
    m*; the plateau loss is L(m*) = L0 - c.m*/2 (using K m* = c on the support).

    Returns:
        (order, losses): (n,) activated modes and (n,) the loss after each activation.
    """
    limit = singular_limit(system)
    return np.asarray(limit.activation_order), np.asarray(limit.plateau_losses)
