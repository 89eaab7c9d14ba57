r"""Switch-on times of the Lotka-Volterra gradient flow without compiling anything: Kvaerno's
5/4 ESDIRK in plain numpy, for systems of up to a few hundred modes.

The flow in log occupations u = ln m (:mod:`nqf.theory.lotka_volterra`),

    du/dt = f(u) = 4 lr (c - K e^u),     Jacobian  J(u) = -4 lr K diag(e^u),

is the one :func:`nqf.theory.lv_solve.solve_lv` integrates with diffrax's ``Kvaerno5``. For the
handful of modes a prediction has, tracing and compiling that solve costs seconds (3.5 s of a
7 s first ``predict`` on the staircase) while its arithmetic is a few thousand m x m
products. This module takes the same method, tableau and error control in numpy:

- Kvaerno's 7-stage ESDIRK (A-L stable, stiffly accurate, order 5 with an embedded order 4;
  Kvaerno, BIT 44 (2004) 489-502; the coefficients as in diffrax), each implicit stage
  solved by a chord Newton iteration with J frozen at the step's start (as diffrax's
  VeryChord) and the exact Jacobian above;
- the step accepted when the RMS of err / (atol + rtol max(|u0|, |u1|)) is below 1, the next
  step scaled by 0.9 err^(-1/6) within [0.2, 10] (diffrax's PIDController with its defaults:
  an integral controller of error order 6); the first step by Hairer's rule, as diffrax;
- the switch-on time of mode k, the first t with u_k(t) >= ln(m_k*/2), found as diffrax's
  route does: the first accepted step at which u_k is above the threshold, then bisection in
  the cubic Hermite interpolant of that step (diffrax's dense output for Kvaerno5).

Both solve the same ODE to the same tolerance (rtol = atol = 1e-8 on u), so they agree to
the solver's accuracy, not to rounding. Measured on coupled staircase systems (8 modes,
m0 = 1e-3, 1e-12, 1e-60) and a random 12-mode one: the two agree to 4e-8 - 5e-7 relative,
and each is as far from a tight solve (rtol = atol = 1e-12) as the other (1.5e-8 - 8e-7);
``tests/test_lv_kvaerno.py`` checks them against each other, the tight solve, and the exact
logistic times of a diagonal system. The integration stops as soon as every
mode with a threshold has crossed it, or at the horizon.
"""

from __future__ import annotations

import math

import numpy as np

from nqf.core.errors import NqfError

__all__ = ["MAX_NUMPY_MODES", "kvaerno_switch_times"]

# Above this many modes the m x m Newton solves in Python cost more than compiling the solve once.
MAX_NUMPY_MODES = 256

_GAMMA = 0.26
# Rows 2..7 of the explicit part of the tableau (stage i uses a[i][j] k_j for j < i).
_A = (
    (0.26,),
    (0.13, 0.84033320996790809),
    (0.22371961478320505, 0.47675532319799699, -0.06470895363112615),
    (0.16648564323248321, 0.10450018841591720, 0.03631482272098715, -0.13090704451073998),
    (0.13855640231268224, 0.0, -0.04245337201752043, 0.02446657898003141, 0.61943039072480676),
    (
        0.13659751177640291,
        0.0,
        -0.05496908796538376,
        -0.04118626728321046,
        0.62993304899016403,
        0.06962479448202728,
    ),
)
# b_sol is the last row (stiffly accurate); b_error = b_sol - the row of stage 6 (with its gamma).
_B_ERROR = np.array([a - b for a, b in zip(_A[5], _A[4] + (_GAMMA,), strict=True)] + [_GAMMA])
_ERROR_ORDER = 6.0
_SAFETY, _FACTOR_MIN, _FACTOR_MAX = 0.9, 0.2, 10.0
_NEWTON_ITERATIONS = 10


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


def _hermite(u0, f0, u1, f1, h, s):
    """The cubic Hermite interpolant of one step at fraction s in [0, 1] (per mode)."""
    s2, s3 = s * s, s * s * s
    return (2 * s3 - 3 * s2 + 1) * u0 + (s3 - 2 * s2 + s) * h * f0 + (-2 * s3 + 3 * s2) * u1 + (s3 - s2) * h * f1


def kvaerno_switch_times(
    c: np.ndarray,
    K: np.ndarray,
    lr: float,
    u0: np.ndarray,
    t_final: float,
    thresholds: np.ndarray,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    max_steps: int = 4096,
) -> tuple[np.ndarray, dict[str, int]]:
    """First times t in [0, t_final] at which u_k(t) = ln m_k(t) >= thresholds_k, (m,).

    Args:
        c: (m,) growth coefficients; K: (m, m) interactions; lr: the learning rate (time in
            steps); u0: (m,) ln m(0); thresholds: (m,) in log occupations (inf: never asked).
        rtol, atol: the tolerances on u (atol is the relative error of m).
        max_steps: the solver's step budget (accepted + rejected).

    Returns:
        (times (m,), NaN where the threshold is not reached by t_final; stats with the
        solver's ``steps`` and ``accepted`` counts).

    Raises NqfError when the step budget runs out or a step fails to converge at the
    smallest step size.
    """
    c = np.asarray(c, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    u = np.array(u0, dtype=np.float64)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    scale_f = 4.0 * float(lr)
    m = c.size
    eye = np.eye(m)

    def field(x):
        return scale_f * (c - K @ np.exp(x))

    out = np.full(m, np.nan)
    out[np.isfinite(thresholds) & (u >= thresholds)] = 0.0
    pending = np.isfinite(thresholds) & np.isnan(out)
    t, f = 0.0, field(u)
    h = _initial_step(field, u, f, rtol, atol)
    newton_tol = max(1e-2 * min(rtol, atol), 1e-14)
    steps = accepted = 0
    with np.errstate(over="ignore", invalid="ignore"):  # a rejected trial step may overflow e^u
        while pending.any() and t < t_final:
            if steps >= max_steps:
                raise NqfError(
                    f"solve_lv: the ODE solver failed (max steps {max_steps} reached); raise max_steps or loosen "
                    "rtol/atol"
                )
            steps += 1
            h = min(h, t_final - t)
            step = _step(field, K, scale_f, eye, u, f, h, newton_tol)
            if step is None:  # the chord iteration did not converge: a smaller step
                h *= 0.5
                if h < 1e-12 * max(t_final, 1.0):
                    raise NqfError("solve_lv: the ODE solver failed (Newton did not converge at the smallest step)")
                continue
            u1, err = step
            error = _rms(err / (atol + rtol * np.maximum(np.abs(u), np.abs(u1))))
            keep = error < 1.0
            factor = _SAFETY * (1.0 / error) ** (1.0 / _ERROR_ORDER) if error > 0 else _FACTOR_MAX
            factor = min(max(factor, 1.0 if keep else _FACTOR_MIN), _FACTOR_MAX if keep else _SAFETY)
            if keep:
                accepted += 1
                f1 = field(u1)
                crossed = pending & (u1 >= thresholds)
                for k in np.flatnonzero(crossed):
                    out[k] = t + h * _bisect(u[k], f[k], u1[k], f1[k], h, thresholds[k])
                pending &= ~crossed
                t, u, f = t + h, u1, f1
            h *= factor
    return out, {"steps": steps, "accepted": accepted}


def _initial_step(field, u, f, rtol, atol) -> float:
    """Hairer's initial step (Solving ODEs I, II.4), as diffrax's PIDController picks it."""
    scale = atol + np.abs(u) * rtol
    d0, d1 = _rms(u / scale), _rms(f / scale)
    h0 = 1e-6 if (d0 < 1e-5 or d1 < 1e-5) else 0.01 * d0 / d1
    d2 = _rms((field(u + h0 * f) - f) / scale) / h0
    big = max(d1, d2)
    h1 = max(1e-6, h0 * 1e-3) if big <= 1e-15 else (0.01 / big) ** (1.0 / _ERROR_ORDER)
    return min(100 * h0, h1)


def _step(field, K, scale_f, eye, u, f, h, newton_tol):
    """One Kvaerno5 step of size h from (u, f = field(u)): (u1, error estimate), or None when a
    stage's chord iteration does not converge."""
    hg = h * _GAMMA
    # the chord matrix I - h gamma J(u), frozen for the step
    inverse = np.linalg.inv(eye + hg * scale_f * K * np.exp(u)[None, :])
    ks = [f]
    z = u
    for row in _A:
        base = u + h * sum(a * k for a, k in zip(row, ks, strict=True))
        z = base + hg * ks[-1]  # predictor: the last stage's slope
        for _ in range(_NEWTON_ITERATIONS):
            residual = z - base - hg * field(z)
            dz = inverse @ residual
            z = z - dz
            if _rms(dz / (newton_tol + newton_tol * np.abs(z))) < 1.0:
                break
        else:
            return None
        if not np.all(np.isfinite(z)):
            return None
        ks.append((z - base) / hg)
    err = h * sum(b * k for b, k in zip(_B_ERROR, ks, strict=True))
    return z, err


def _bisect(u0, f0, u1, f1, h, threshold, iterations: int = 64) -> float:
    """The fraction s of the step at which the Hermite interpolant of u_k reaches ``threshold``
    (it is below at s = 0 and at or above at s = 1)."""
    lo, hi = 0.0, 1.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if _hermite(u0, f0, u1, f1, h, mid) >= threshold:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 4 * math.ulp(hi):
            break
    return 0.5 * (lo + hi)
