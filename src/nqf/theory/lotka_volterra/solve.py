r"""Solving the Lotka-Volterra system over time: the log-space ODE (implicit Kvaerno5 with a
full Newton solve, see :mod:`nqf.theory.lotka_volterra.system` for the numerics), the closed form for
diagonal K, the default horizon from the singular limit, and switch-on times read off a
solution or a loss curve.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from nqf.core.errors import NqfError
from nqf.core.programs import bucket_length, to_device
from nqf.theory.lotka_volterra.kvaerno import MAX_NUMPY_MODES, kvaerno_switch_times, kvaerno_switch_times_batch
from nqf.theory.lotka_volterra.logistic import logistic_evaluate
from nqf.theory.lotka_volterra.system import (
    LotkaVolterra,
    excess_loss,
    fixed_point,
    logistic_log_occupation,
    logistic_switch_time,
)
from nqf.theory.singular_limit import singular_limit

__all__ = ["LVSolution", "default_times", "flow_switch_times", "solve_lv", "suggested_horizon", "switch_times"]


@dataclass(frozen=True, eq=False)
class LVSolution:
    """A solved LV trajectory.

    Attributes:
        system: the LotkaVolterra solved.
        ts: (T,) output times (optimizer steps).
        occupations: (T, m) m(t), or None when not saved.
        losses: (T,) L(m(t)).
        excess_losses: (T,) L(m(t)) - L(m*) computed without cancellation, or None when
            the fixed point is not defined (K not symmetric PSD).
        num_steps: solver steps taken (accepted + rejected); 0 for the closed form.
        num_accepted_steps: accepted solver steps; 0 for the closed form.
        method: "kvaerno5", "tsit5" or "logistic" (closed form, diagonal K).
        t_final: the horizon.
    """

    system: LotkaVolterra
    ts: Float[np.ndarray, " T"]
    occupations: Float[np.ndarray, "T m"] | None
    losses: Float[np.ndarray, " T"]
    excess_losses: Float[np.ndarray, " T"] | None
    num_steps: int
    num_accepted_steps: int
    method: str
    t_final: float
    _dense: Any = field(default=None, repr=False)  # diffrax's solution (ODE methods): dense output, accepted steps

    def log_occupation(self, t) -> np.ndarray:
        """ln m(t) at arbitrary times in [0, t_final]: (..., m)."""
        t = np.asarray(t, dtype=np.float64)
        s = self.system
        if self._dense is None:
            return np.asarray(logistic_log_occupation(s.c, s.diagonal, np.log(s.m0), s.lr, t[..., None]))
        flat = t.reshape(-1)
        # padded (with its last time) to a power of two: queries of other sizes reuse the program
        padded = np.full(bucket_length(flat.size, floor=16), flat[-1] if flat.size else 0.0)
        padded[: flat.size] = flat
        u = np.asarray(_evaluate_dense(self._dense, to_device(padded)))[: flat.size]
        return u.reshape(t.shape + (s.num_modes,))

    def occupation(self, t) -> np.ndarray:
        """m(t) at arbitrary times in [0, t_final]: (..., m)."""
        return np.exp(self.log_occupation(t))


def _lazy_filter_jit(fn):
    """``equinox.filter_jit(fn)``, built on the first call: importing equinox costs ~0.15 s, which a
    prediction that never reaches diffrax (the numpy engine, the numpy Kvaerno) should not pay."""
    compiled = None

    @functools.wraps(fn)
    def call(*args, **kwargs):
        nonlocal compiled
        if compiled is None:
            import equinox as eqx

            compiled = eqx.filter_jit(fn)
        return compiled(*args, **kwargs)

    return call


@_lazy_filter_jit
def _evaluate_dense(sol, ts):
    return jax.vmap(sol.evaluate)(ts)


def _vector_field(t, u, args):
    c, K, lr = args
    return 4.0 * lr * (c - K @ jnp.exp(u))


@_lazy_filter_jit
def _solve_log_ode(c, K, lr, u0, t_final, grid, solver, controller, max_steps):
    import diffrax

    return diffrax.diffeqsolve(
        diffrax.ODETerm(_vector_field),
        solver,
        t0=0.0,
        t1=t_final,
        dt0=None,
        y0=u0,
        args=(c, K, lr),
        saveat=diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=grid), diffrax.SubSaveAt(t0=True, steps=True)], dense=True),
        stepsize_controller=controller,
        max_steps=max_steps,
        throw=False,
    )


def _default_tolerance() -> float:
    """The default rtol = atol of the solves (on u = ln m): 1e-8 in float64, 1e-5 in float32."""
    return 1e-8 if jnp.result_type(float) == jnp.float64 else 1e-5


def _kvaerno5(newton_tol):
    """diffrax's Kvaerno5 with a full Newton solve to ``newton_tol`` (an array: under filter_jit a
    float would be static and recompile)."""
    import diffrax
    import optimistix as optx

    return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=newton_tol, atol=newton_tol))


def default_times(t_final: float, num: int = 512) -> np.ndarray:
    """Output grid: ``num`` linear points on [0, t_final] merged with ``num - 1`` log-spaced
    points on [1e-6 t_final, t_final) (the log grid resolves early times and power laws).

    Always 2 num - 1 points (a fixed shape: the compiled solver is reused across horizons).
    """
    lin = np.linspace(0.0, t_final, num)
    log = np.geomspace(1e-6 * t_final, t_final, num)[:-1]
    return np.sort(np.concatenate([lin, log]))


def suggested_horizon(system: LotkaVolterra, factor: float = 1.5) -> float:
    """A horizon that covers every switch: ``factor`` x the last activation time of the
    singular limit (in steps) plus 20 relaxation times 1/min(r of the modes that switch)."""

    limit = singular_limit(system)
    if limit.step_times.size == 0:
        return 20.0 / max(np.abs(system.growth_rates).max(), 1e-300)
    t_last = float(limit.steps().max())
    rates = system.growth_rates[limit.activation_order]
    return factor * t_last + 20.0 / float(np.abs(rates).min())


def solve_lv(
    system: LotkaVolterra,
    t_final: float,
    ts: Float[ArrayLike, " T"] | None = None,
    *,
    method: str = "auto",
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int = 4096,
    save_occupations: bool = True,
    batch_size: int = 64,
) -> LVSolution:
    """Solve the LV system on [0, t_final] (time in optimizer steps).

    Args:
        system: the LotkaVolterra.
        t_final: horizon > 0.
        ts: (T,) output times in [0, t_final], strictly increasing; default ``default_times(t_final)``.
        method: "auto" (closed form for diagonal K, else "kvaerno5"), "logistic" (diagonal K
            only), "kvaerno5" (L-stable implicit, full Newton; for stiff systems up to a few
            hundred modes) or "tsit5" (explicit; step count grows with plateau length when
            active modes are stiff).
        rtol, atol: error tolerances on u = ln m (atol is the relative error of m); default
            1e-8 in float64 (jax_enable_x64), 1e-5 in float32.
        max_steps: solver step budget (also sizes the dense-output buffers).
        save_occupations: keep the (T, m) occupation array (turn off for 10^5 modes).
        batch_size: at most this many time points per block of the closed form (whose
            blocks also hold at most 2^17 time x mode elements: memory is bounded).

    Returns:
        LVSolution with times, occupations, losses, excess losses and the solver step count.
    """
    t_final, ts = _check_times(t_final, ts)
    if method == "auto":
        method = "logistic" if system.is_diagonal else "kvaerno5"
    if method not in ("logistic", "kvaerno5", "tsit5"):
        raise NqfError(f"solve_lv: unknown method {method!r} (auto, logistic, kvaerno5, tsit5)")
    default_tol = _default_tolerance()
    rtol = default_tol if rtol is None else float(rtol)
    atol = default_tol if atol is None else float(atol)
    try:
        reference = fixed_point(system)
    except NqfError:
        reference = None

    if method == "logistic":
        return _solve_logistic(system, t_final, ts, reference, save_occupations, batch_size)
    return _solve_ode(system, t_final, ts, reference, method, rtol, atol, max_steps, save_occupations)


def _check_times(t_final, ts) -> tuple[float, np.ndarray]:
    """(t_final as a float, the output times (T,)): t_final positive and finite, ts (default
    ``default_times(t_final)``) a non-empty, finite, strictly increasing vector within [0, t_final]."""
    t_final = float(t_final)
    if not (math.isfinite(t_final) and t_final > 0):
        raise NqfError(f"solve_lv: t_final must be positive and finite, got {t_final}")
    ts = default_times(t_final) if ts is None else np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0:
        raise NqfError("solve_lv: ts must be a non-empty vector of times")
    if not np.all(np.isfinite(ts)):
        raise NqfError("solve_lv: output times ts must be finite")
    if ts.min() < 0 or ts.max() > t_final * (1 + 1e-12):
        raise NqfError("solve_lv: output times must lie in [0, t_final]")
    if ts.size > 1 and not np.all(np.diff(ts) > 0):
        k = int(np.argmin(np.diff(ts) > 0))
        raise NqfError(f"solve_lv: output times ts must be strictly increasing, got {ts[k]:g} then {ts[k + 1]:g}")
    return t_final, ts


def _solve_ode(system, t_final, ts, reference, method, rtol, atol, max_steps, save_occupations) -> LVSolution:
    """The log-space ODE solved by ``method`` ("kvaerno5" or "tsit5") with the checked inputs of
    :func:`solve_lv`; reference: the fixed point for the excess losses, or None."""
    import diffrax

    if method == "kvaerno5":
        solver: diffrax.AbstractSolver = _kvaerno5(jnp.asarray(max(1e-2 * min(rtol, atol), 1e-14)))
    else:
        solver = diffrax.Tsit5()
    # Arrays, not Python floats: under filter_jit floats are static and would recompile.
    controller = diffrax.PIDController(rtol=jnp.asarray(rtol), atol=jnp.asarray(atol))
    if system.K.ndim == 1 and system.num_modes > 4096:
        raise NqfError("solve_lv: the ODE path builds an m x m K; use method='logistic' for large diagonal K")
    sol = _solve_log_ode(
        jnp.asarray(system.c),
        jnp.asarray(system.dense_K),
        jnp.asarray(system.lr),
        jnp.asarray(np.log(system.m0)),  # log in float64 first: tiny m0 underflows in float32
        jnp.asarray(t_final),
        jnp.asarray(ts),
        solver,
        controller,
        int(max_steps),
    )
    if not diffrax.is_successful(sol.result):
        raise NqfError(
            f"solve_lv: the ODE solver failed ({sol.result}); raise max_steps (now {max_steps}) or loosen rtol/atol"
        )
    ms = np.exp(np.asarray(sol.ys[0]))
    return LVSolution(
        system=system,
        ts=ts,
        occupations=ms if save_occupations else None,
        losses=system.loss(ms),
        excess_losses=None if reference is None else excess_loss(system, ms, reference),
        num_steps=int(sol.stats["num_steps"]),
        num_accepted_steps=int(sol.stats["num_accepted_steps"]),
        method=method,
        t_final=t_final,
        _dense=sol,
    )


def _solve_logistic(system, t_final, ts, reference, save_occupations, batch_size):
    if not system.is_diagonal:
        raise NqfError("solve_lv: method 'logistic' needs a diagonal K")
    k = system.diagonal
    if np.any(k < 0):
        raise NqfError("solve_lv: the logistic closed form needs K_kk >= 0 (negative K_kk blows up)")
    if int(batch_size) < 1:
        raise NqfError(f"solve_lv: batch_size must be a positive integer, got {batch_size}")
    m_ref = np.zeros_like(k) if reference is None else reference
    losses, excess, ms = logistic_evaluate(
        system.c, k, system.m0, system.lr, m_ref, ts, int(batch_size), save_occupations
    )
    return LVSolution(
        system=system,
        ts=ts,
        occupations=ms,
        losses=system.loss0 + losses,
        excess_losses=None if reference is None else excess,
        num_steps=0,
        num_accepted_steps=0,
        method="logistic",
        t_final=t_final,
    )


# ---------------------------------------------------------------- switch times


def _log_thresholds(reference) -> np.ndarray:
    """ln(m_k*/2) for reference m* (m,); inf where m_k* <= 0 (no switch-on asked)."""
    reference = np.asarray(reference, dtype=np.float64)
    positive = reference > 0
    with np.errstate(divide="ignore"):
        return np.where(positive, np.log(np.where(positive, 0.5 * reference, 1.0)), np.inf)


def _bisect_crossings(sol, lo, hi, thresholds, iterations: int = 64):
    """Per mode k, bisect u_k(t) = thresholds_k on [lo_k, hi_k] in the dense output."""
    modes = jnp.arange(thresholds.size)

    def body(_, bracket):
        a, b = bracket
        mid = 0.5 * (a + b)
        u = jax.vmap(lambda t, k: sol.evaluate(t)[k])(mid, modes)
        above = u >= thresholds
        return jnp.where(above, a, mid), jnp.where(above, mid, b)

    a, b = jax.lax.fori_loop(0, iterations, body, (lo, hi))
    return 0.5 * (a + b)


def _crossing_times(sol, thresholds):
    """First t with u_k(t) >= thresholds_k, (m,), in a solve saved as ``_solve_log_ode`` saves it
    (``sol.ts[1]``, ``sol.ys[1]``: t = 0 and the accepted steps, padded past them): the first
    saved step at or above the threshold, then bisection back to the step before it in the dense
    output. 0 where u_k(0) is already there; NaN where not reached or thresholds_k is not finite."""
    step_ts, step_us = sol.ts[1], sol.ys[1]
    valid = jnp.arange(step_ts.shape[0]) < sol.stats["num_accepted_steps"] + 1
    crossed = (step_us >= thresholds[None, :]) & valid[:, None]
    first = jnp.argmax(crossed, axis=0)
    reached = jnp.any(crossed, axis=0) & jnp.isfinite(thresholds)
    need = reached & (first > 0)
    lo = jnp.where(need, step_ts[jnp.maximum(first - 1, 0)], 0.0)
    hi = jnp.where(need, step_ts[first], 0.0)
    roots = _bisect_crossings(sol, lo, hi, jnp.where(need, thresholds, 0.0))
    return jnp.where(reached & (first == 0), 0.0, jnp.where(need, roots, jnp.nan))


# switch_times compiles it alone (the solve is done already); _flow_switch_core traces it into the solve's program
_dense_crossing_times = _lazy_filter_jit(_crossing_times)


def switch_times(
    x, *, reference: Float[ArrayLike, " m"] | None = None, t_final: float | None = None
) -> Float[np.ndarray, " m"]:
    """Switch-on time of each mode: the first t with m_k(t) >= m_k*/2.

    m* is the stable fixed point (``fixed_point``) or ``reference``; for a K that is not
    symmetric PSD it defaults to the solution's final occupations. NaN where m_k* = 0
    (suppressed or decaying modes) or where the threshold is not reached by the horizon.

    Args:
        x: an LVSolution (root found in its dense output by bisection, so the answer is as
            accurate as the solver's interpolant), or a LotkaVolterra (diagonal K: exact
            closed form; otherwise solved to ``t_final``, default ``suggested_horizon``).
    Returns:
        (m,) switch times in optimizer steps.
    """
    if isinstance(x, LotkaVolterra):
        system = x
        if system.is_diagonal and reference is None:
            k = system.diagonal
            return np.asarray(logistic_switch_time(system.c, k, system.m0, system.lr), dtype=np.float64)
        horizon = suggested_horizon(system) if t_final is None else float(t_final)
        x = solve_lv(system, horizon, method="kvaerno5")
    if not isinstance(x, LVSolution):
        raise NqfError("switch_times: expected an LVSolution or a LotkaVolterra")
    sol = x
    system = sol.system
    if reference is None:
        try:
            reference = fixed_point(system)
        except NqfError:
            reference = sol.occupation(sol.t_final)
    reference = np.asarray(reference, dtype=np.float64)

    if sol._dense is None:  # diagonal closed form
        positive = reference > 0
        k = system.diagonal
        m_star = np.where(k > 0, system.c / np.where(k > 0, k, 1.0), np.nan)
        if not np.allclose(m_star[positive], reference[positive], rtol=1e-12, atol=0):
            raise NqfError("switch_times: a custom reference needs an ODE solution (method='kvaerno5')")
        out = np.asarray(logistic_switch_time(system.c, k, system.m0, system.lr), dtype=np.float64)
        return np.where(positive & (out <= sol.t_final), out, np.nan)
    times = _dense_crossing_times(sol._dense, jnp.asarray(_log_thresholds(reference)))
    return np.asarray(times, dtype=np.float64)


# ---------------------------------------------------------------- switch times of the flow, in one program


def _flow_switch_core(c, K, lr, u0, t_final, thresholds, rtol, atol, newton_tol, *, max_steps):
    """Switch-on times of the LV gradient flow (Kvaerno5 in u = ln m, as ``solve_lv``) and whether
    the solve succeeded, as one pure-array program: the solve, the first accepted step past each
    threshold, and the bisection in the dense output (as ``switch_times`` on an LVSolution)."""
    import diffrax  # imported here: a warm nqf predict calls the stored program instead

    controller = diffrax.PIDController(rtol=rtol, atol=atol)
    # the output grid is only t_final: switch times need the accepted steps and the dense output
    sol = _solve_log_ode(c, K, lr, u0, t_final, t_final[None], _kvaerno5(newton_tol), controller, max_steps)
    return _crossing_times(sol, thresholds), sol.result == diffrax.RESULTS.successful


_flow_switch_program = jax.jit(_flow_switch_core, static_argnames=("max_steps",))


def flow_switch_times_batch(system: LotkaVolterra, m0s, t_final: float, reference) -> np.ndarray:
    """``flow_switch_times`` of ``system`` with each row of m0s (B, m) as its initial occupations:
    (B, m), the systems sharing c, K and lr. Up to ``MAX_NUMPY_MODES`` coupled modes the B
    solves run as one vectorised numpy Kvaerno5 (``kvaerno_switch_times_batch``: each row the
    scalar solve's steps, bit for bit); a diagonal system, or more modes, row by row."""
    m0s = np.atleast_2d(np.asarray(m0s, dtype=np.float64))
    t_final = float(t_final)
    numpy_solve = not system.is_diagonal and math.isfinite(t_final) and t_final > 0
    if not numpy_solve or system.num_modes > MAX_NUMPY_MODES:
        return np.stack([flow_switch_times(replace(system, m0=row), t_final, reference) for row in m0s])
    tol = _default_tolerance()
    times, _ = kvaerno_switch_times_batch(
        system.c, system.dense_K, system.lr, np.log(m0s), t_final, _log_thresholds(reference), rtol=tol, atol=tol
    )
    return times


def flow_switch_times(system: LotkaVolterra, t_final: float, reference, method: str = "auto") -> np.ndarray:
    """``switch_times(solve_lv(system, t_final), reference=reference)``: the LV gradient flow's
    switch-on times (m,), NaN where not reached by ``t_final``.

    Diagonal K: the exact logistic times. Otherwise the same Kvaerno5 solve to the same
    tolerance, by ``method``: "numpy" (``nqf.theory.lotka_volterra.kvaerno``: nothing to trace or
    compile), "compiled" (diffrax, one program that later processes reuse without tracing,
    ``nqf.core.exported``), or "auto": numpy up to ``MAX_NUMPY_MODES`` modes, else compiled.
    The two agree to the solver's tolerance (about 1e-7 relative), not to rounding.
    """
    from nqf.core.exported import call_exported

    t_final = float(t_final)
    if system.is_diagonal or not (math.isfinite(t_final) and t_final > 0):
        return switch_times(solve_lv(system, t_final), reference=reference)
    if method not in ("auto", "numpy", "compiled"):
        raise NqfError(f"flow_switch_times: unknown method {method!r} (auto, numpy, compiled)")
    tol, thresholds = _default_tolerance(), _log_thresholds(reference)
    if method == "numpy" or (method == "auto" and system.num_modes <= MAX_NUMPY_MODES):
        times, _ = kvaerno_switch_times(
            system.c, system.dense_K, system.lr, np.log(system.m0), t_final, thresholds, rtol=tol, atol=tol
        )
        return times
    args = tuple(
        jnp.asarray(a)
        for a in (
            system.c,
            system.dense_K,
            system.lr,
            np.log(system.m0),
            t_final,
            thresholds,
            tol,
            tol,
            max(1e-2 * tol, 1e-14),
        )
    )
    out, ok = call_exported(_flow_switch_program, *args, max_steps=4096)
    if not bool(ok):
        raise NqfError("solve_lv: the ODE solver failed; raise max_steps (now 4096) or loosen rtol/atol")
    return np.asarray(out, dtype=np.float64)
