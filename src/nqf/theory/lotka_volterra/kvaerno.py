r"""Switch-on times of the Lotka-Volterra gradient flow without compiling anything: Kvaerno's
5/4 ESDIRK in plain numpy, for systems of up to a few hundred modes.

The flow in log occupations u = ln m (:mod:`nqf.theory.lotka_volterra.system`),

    du/dt = f(u) = 4 lr (c - K e^u),     Jacobian  J(u) = -4 lr K diag(e^u),

is the one :func:`nqf.theory.lotka_volterra.solve.solve_lv` integrates with diffrax's ``Kvaerno5``. For the
handful of modes a prediction has, tracing and compiling that solve costs seconds while its
arithmetic is a few thousand m x m products (measured on the README's staircase without the
network's prediction, fresh processes, the 2-core Intel Xeon: the first ``predict`` takes
0.47 s with this module against 4.5-4.9 s with diffrax's compiled solve, 3.8 s when the
compilation cache holds it; a second call 0.11 s against 0.25 s). This module takes the same
method, tableau and error control in numpy:

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

:func:`kvaerno_switch_times_batch` integrates B such systems that share c and K and differ in
lr (B,), u0 (B, m) and the thresholds (a grid over learning rates and initial scales): each row
keeps its own adaptive state and takes exactly the scalar solver's steps, while the arithmetic
runs on stacks of rows, so the Python cost of a step (about 20 chord iterations of ten numpy
calls) is paid once per sweep of the batch rather than once per system. Its rows are the
scalar solver's results to the last bit: :func:`kvaerno_switch_times` is the batch of one, and
no row's arithmetic depends on the others (``_matvec``, ``_pow``).
"""

from __future__ import annotations

import numpy as np

from nqf.core.errors import NqfError

__all__ = ["MAX_NUMPY_MODES", "kvaerno_switch_times", "kvaerno_switch_times_batch"]

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
# The chord matrices of a batch are (rows, m, m): the rows are solved in chunks of at most this
# many matrix entries (64 MiB of float64), so 1000 systems of 256 modes do not hold 0.5 GiB at once.
# Rows are independent, so the chunking changes no number.
_CHUNK_ENTRIES = 2**23


def _rms(x: np.ndarray) -> np.ndarray:
    """The RMS over the last axis (over the modes), one value per row.

    np.mean's arithmetic (the same pairwise sum, then one division by m) without its Python
    wrapper, which costs as much as the sum at a few modes; it runs at every chord iteration."""
    return np.sqrt(np.add.reduce(np.square(x), axis=-1) / x.shape[-1])


def _pow(x: np.ndarray, p: float) -> np.ndarray:
    """x ** p elementwise with Python's float power (the C library's pow).

    numpy's power has SIMD paths (AVX-512) that differ from pow in the last bit (measured: 5% of
    1e5 step factors); the step-size factors go through pow, as the scalar solver's Python floats
    did, so that a row's steps do not depend on which path numpy takes for how many rows. It
    runs once per row and step, not per stage."""
    return np.array([v**p for v in x.tolist()], dtype=np.float64).reshape(x.shape)


def _matvec(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A @ x row by row: A (m, m) or (n, m, m), x (n, m) -> (n, m).

    As a stack of matrix-vector products numpy calls BLAS gemv once per row, so row i is
    exactly ``A[i] @ x[i]`` whatever the other rows are. The single product x @ K.T (gemm)
    accumulates in another order: its rows differ from gemv's in the last bit, and at m = 64
    from gemm's own rows at another n (measured, OpenBLAS 0.3.31), so a row's steps would depend
    on how many neighbours it has. The stack costs 7 us for 100 rows of 12 modes against 2.4 us
    for gemm. A single row (the scalar solver) takes the plain product: the same gemv without
    the stack's overhead."""
    if x.shape[0] == 1:
        return ((A if A.ndim == 2 else A[0]) @ x[0])[None]
    return np.matmul(A, np.ascontiguousarray(x)[..., None])[..., 0]


def _hermite(u0, f0, u1, f1, h, s):
    """The cubic Hermite interpolant of one step at fraction s in [0, 1] (elementwise)."""
    s2, s3 = s * s, s * s * s
    return (2 * s3 - 3 * s2 + 1) * u0 + (s3 - 2 * s2 + s) * h * f0 + (-2 * s3 + 3 * s2) * u1 + (s3 - s2) * h * f1


# numpy on this solver's own steps (nothing to compile); solve.py's jnp twin bisects diffrax's dense output in a jit
def _bisect(u0, f0, u1, f1, h, threshold, iterations: int = 64) -> np.ndarray:
    """The fractions s of the steps at which the Hermite interpolants reach ``threshold``
    (each is below at s = 0 and at or above at s = 1), all arguments (n,) -> (n,).

    Each crossing stops on its own, once its bracket is 4 ulp wide, and is frozen from then on
    (np.where keeps its bracket; its interpolant is still evaluated, which costs less than
    gathering the others, as they nearly all stop at the same iteration)."""
    lo, hi = np.zeros(u0.shape), np.ones(u0.shape)
    active = np.ones(u0.shape, dtype=bool)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = _hermite(u0, f0, u1, f1, h, mid) >= threshold
        hi = np.where(active & above, mid, hi)
        lo = np.where(active & ~above, mid, lo)
        # np.spacing of a positive float is math.ulp of it: the gap to the next float up
        active &= ~(hi - lo <= 4 * np.spacing(hi))
        if not active.any():
            break
    return 0.5 * (lo + hi)


class _Flow:
    """The right-hand side f(u) = 4 lr (c - K e^u) of the rows of a batch (shared c and K)."""

    def __init__(self, c: np.ndarray, K: np.ndarray):
        self.c, self.K = c, K

    def __call__(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """f at x (n, m) for rows with 4 lr = scale, a column (n, 1)."""
        return scale * (self.c - _matvec(self.K, np.exp(x)))


def kvaerno_switch_times_batch(
    c: np.ndarray,
    K: np.ndarray,
    lr: float | np.ndarray,
    u0: np.ndarray,
    t_final: float,
    thresholds: np.ndarray,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    max_steps: int = 4096,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """First times t in [0, t_final] at which u_bk(t) >= thresholds_bk, for B flows that share
    c and K: du_b/dt = 4 lr_b (c - K e^{u_b}), u_b(0) = u0_b; times (B, m).

    Row b is :func:`kvaerno_switch_times` of system b, the same numbers to the last bit (the
    scalar solver is this one on a batch of one): each row keeps its own adaptive state (t, step
    size, accepted or rejected, its chord iterations, its pending modes) and takes the scalar
    solver's sequence of steps, while the numpy work runs on the stack of rows still integrating:
    the chord matrices (B, m, m) inverted as one stack, K e^u and the chord solves as stacks of
    matrix-vector products (one gemv per row, so that no row depends on its neighbours). Rows
    done, or whose chord iteration of the current stage has converged, are left as they are; a
    row whose iteration fails halves its own step; the loop runs until every row is done.

    Args:
        c: (m,) growth coefficients; K: (m, m) interactions, shared by the rows.
        lr: (B,) learning rates (time in steps), or one for all rows.
        u0: (B, m) ln m(0) of each row.
        t_final: the horizon, one for all rows.
        thresholds: (m,) or (B, m) in log occupations (inf: never asked).
        rtol, atol: the tolerances on u (atol is the relative error of m).
        max_steps: each row's step budget (accepted + rejected).

    Returns:
        (times (B, m), NaN where the threshold is not reached by t_final, 0 where u0 is already
        at or above it; stats: ``steps`` and ``accepted``, (B,) integer counts per row).

    Raises NqfError on shapes that do not fit together, and, naming the row, when a row's step
    budget runs out or its step fails to converge at the smallest step size; the row raising is
    the first to fail in the batch's sweep (the lowest index among rows failing at the same
    sweep), which need not be the lowest-index row that would fail.
    """
    caller = "kvaerno_switch_times_batch"
    flow, scale, u, thresholds = _inputs(caller, c, K, lr, u0, thresholds, batch=True)
    t_final = _horizon(caller, t_final)
    rows, m = u.shape
    times = np.full((rows, m), np.nan)
    steps = np.zeros(rows, dtype=np.int64)
    accepted = np.zeros(rows, dtype=np.int64)
    chunk = max(1, _CHUNK_ENTRIES // max(m * m, 1))
    for start in range(0, rows, chunk):
        part = slice(start, start + chunk)
        times[part], steps[part], accepted[part] = _solve(
            flow, scale[part], u[part], t_final, thresholds[part], rtol, atol, max_steps, (start, rows)
        )
    return times, {"steps": steps, "accepted": accepted}


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

    One row of :func:`kvaerno_switch_times_batch` (the same code, a batch of one).

    Args:
        c: (m,) growth coefficients; K: (m, m) interactions; lr: the learning rate (time in
            steps); u0: (m,) ln m(0); thresholds: (m,) in log occupations (inf: never asked).
        rtol, atol: the tolerances on u (atol is the relative error of m).
        max_steps: the solver's step budget (accepted + rejected).

    Returns:
        (times (m,), NaN where the threshold is not reached by t_final; stats with the
        solver's ``steps`` and ``accepted`` counts).

    Raises NqfError on shapes that do not fit together, when the step budget runs out or a
    step fails to converge at the smallest step size.
    """
    caller = "kvaerno_switch_times"
    flow, scale, u, thresholds = _inputs(caller, c, K, lr, u0, thresholds, batch=False)
    times, steps, accepted = _solve(flow, scale, u, _horizon(caller, t_final), thresholds, rtol, atol, max_steps, None)
    return times[0], {"steps": int(steps[0]), "accepted": int(accepted[0])}


def _inputs(caller: str, c, K, lr, u0, thresholds, batch: bool):
    """The checked inputs as float64 arrays: (the flow, 4 lr (B,), u0 (B, m), thresholds (B, m));
    a batch of one for the scalar solver."""
    c = np.asarray(c, dtype=np.float64)
    # C order: the chord and field products go through BLAS with one layout in every call
    K = np.ascontiguousarray(K, dtype=np.float64)
    u = np.array(u0, dtype=np.float64)  # a copy: the solver writes its rows
    lr = np.asarray(lr, dtype=np.float64)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if c.ndim != 1:
        raise NqfError(f"{caller}: c must be 1-D (m,), got shape {c.shape}")
    m = c.size
    if K.shape != (m, m):
        raise NqfError(f"{caller}: K must be ({m}, {m}) for the {m} modes of c, got shape {K.shape}")
    if batch:
        if u.ndim != 2 or u.shape[1] != m:
            raise NqfError(f"{caller}: u0 must be (B, {m}) for the {m} modes of c, got shape {u.shape}")
    elif u.shape != (m,):
        raise NqfError(f"{caller}: u0 must be ({m},) for the {m} modes of c, got shape {u.shape}")
    u = u.reshape(-1, m)
    rows = u.shape[0]
    if lr.ndim != 0 and not (batch and lr.shape == (rows,)):
        want = f"one number or ({rows},), one per row of u0" if batch else "one number"
        raise NqfError(f"{caller}: lr must be {want}, got shape {lr.shape}")
    if thresholds.shape != (m,) and not (batch and thresholds.shape == (rows, m)):
        want = f"({m},) or ({rows}, {m})" if batch else f"({m},)"
        raise NqfError(f"{caller}: thresholds must be {want}, got shape {thresholds.shape}")
    scale = np.broadcast_to(4.0 * lr, (rows,))
    return _Flow(c, K), scale, u, np.broadcast_to(thresholds, (rows, m))


def _horizon(caller: str, t_final) -> float:
    if np.ndim(t_final) != 0:
        raise NqfError(f"{caller}: t_final must be one number, got shape {np.shape(t_final)}")
    return float(t_final)


def _solve(flow: _Flow, scale, u, t_final: float, thresholds, rtol, atol, max_steps, batch):
    """The batch loop over rows (n, m): (times (n, m), steps (n,), accepted (n,)).

    The state of the rows still being integrated (t, h, u, f = flow(u), pending modes, ...) is
    kept compact, in row order, and a row leaves it when it is done (nothing pending, or t at
    the horizon), so a sweep steps every row it holds once, without gathers. Every row present
    takes one step per sweep, so a row's step count is the number of sweeps before it left.

    ``batch``: (index of the first row, rows in the whole batch) for the error messages, or None
    for the scalar solver (whose messages name no row)."""
    n, m = u.shape

    def which(i: int) -> str:
        return "" if batch is None else f" on row {batch[0] + i} of {batch[1]}"

    asked = np.isfinite(thresholds)
    reached = asked & (u >= thresholds)
    out = np.full((n, m), np.nan)
    out[reached] = 0.0
    steps = np.zeros(n, dtype=np.int64)
    accepted_out = np.zeros(n, dtype=np.int64)
    rows = np.arange(n)  # which rows the compact state holds
    pending = asked & ~reached
    thresholds = np.ascontiguousarray(thresholds)
    t, accepted = np.zeros(n), np.zeros(n, dtype=np.int64)
    newton_tol = max(1e-2 * min(rtol, atol), 1e-14)
    h_min = 1e-12 * max(t_final, 1.0)
    sweeps = 0
    # a rejected trial step may overflow e^u; a zero error estimate divides by zero (its factor is
    # the largest, chosen by np.where)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        f = flow(u, scale[:, None])
        h = _initial_step(flow, scale, u, f, rtol, atol)
        while True:
            running = pending.any(axis=1) & (t < t_final)
            if not running.all():
                gone = rows[~running]
                steps[gone], accepted_out[gone] = sweeps, accepted[~running]
                rows, t, h, u, f = rows[running], t[running], h[running], u[running], f[running]
                pending, thresholds, scale, accepted = (
                    pending[running],
                    thresholds[running],
                    scale[running],
                    accepted[running],
                )
                if rows.size == 0:
                    break
            if sweeps >= max_steps:  # every row held has taken max_steps steps
                raise NqfError(
                    f"solve_lv: the ODE solver failed{which(rows[0])} (max steps {max_steps} reached); "
                    "raise max_steps or loosen rtol/atol"
                )
            sweeps += 1
            room = t_final - t
            h = np.where(room < h, room, h)  # min(h, t_final - t) with Python's min rule
            ok, u1, err = _step(flow, scale, u, f, h, newton_tol)
            error = _rms(err / (atol + rtol * np.maximum(np.abs(u), np.abs(u1))))  # NaN where not ok
            keep = error < 1.0
            factor = np.where(error > 0, _SAFETY * _pow(1.0 / error, 1.0 / _ERROR_ORDER), _FACTOR_MAX)
            # min(max(factor, low), high) with Python's tie and NaN rules
            low = np.where(keep, 1.0, _FACTOR_MIN)
            high = np.where(keep, _FACTOR_MAX, _SAFETY)
            factor = np.where(low > factor, low, factor)
            factor = np.where(high < factor, high, factor)
            if ok.all():
                h_next = h * factor
            else:  # the chord iteration did not converge: a smaller step for those rows
                h_next = np.where(ok, h * factor, h * 0.5)
                small = np.flatnonzero(~ok & (h_next < h_min))
                if small.size:
                    raise NqfError(
                        f"solve_lv: the ODE solver failed{which(rows[small[0]])} (Newton did not converge at "
                        "the smallest step)"
                    )
            accepted += keep
            if keep.all():  # every row moves on: whole arrays
                f1 = flow(u1, scale[:, None])
                crossed = pending & (u1 >= thresholds)
                if crossed.any():
                    i, k = np.nonzero(crossed)
                    s = _bisect(u[i, k], f[i, k], u1[i, k], f1[i, k], h[i], thresholds[i, k])
                    out[rows[i], k] = t[i] + h[i] * s
                    pending = pending & ~crossed
                t, u, f = t + h, u1, f1
            elif keep.any():
                j = np.flatnonzero(keep)
                uj, hj, tj = u1[j], h[j], t[j]
                f1 = flow(uj, scale[j, None])
                crossed = pending[j] & (uj >= thresholds[j])
                if crossed.any():
                    i, k = np.nonzero(crossed)
                    s = _bisect(u[j[i], k], f[j[i], k], uj[i, k], f1[i, k], hj[i], thresholds[j[i], k])
                    out[rows[j[i]], k] = tj[i] + hj[i] * s
                    pending[j] = pending[j] & ~crossed
                t[j], u[j], f[j] = tj + hj, uj, f1
            h = h_next
    steps[rows], accepted_out[rows] = sweeps, accepted
    return out, steps, accepted_out


def _initial_step(flow: _Flow, scale, u, f, rtol, atol) -> np.ndarray:
    """Hairer's initial step (Solving ODEs I, II.4), as diffrax's PIDController picks it, per
    row (n,); the branches as np.where with Python's min/max rules."""
    s = atol + np.abs(u) * rtol
    d0, d1 = _rms(u / s), _rms(f / s)
    h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
    d2 = _rms((flow(u + h0[:, None] * f, scale[:, None]) - f) / s) / h0
    big = np.where(d2 > d1, d2, d1)
    tiny = h0 * 1e-3
    h1 = np.where(big <= 1e-15, np.where(tiny > 1e-6, tiny, 1e-6), _pow(0.01 / big, 1.0 / _ERROR_ORDER))
    return np.where(h1 < 100 * h0, h1, 100 * h0)


def _invert(chord: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The inverses of the stack (n, m, m) and which exist (n,); one singular matrix does not
    stop the others (its row's step fails and is retried smaller)."""
    try:
        return np.linalg.inv(chord), np.ones(chord.shape[0], dtype=bool)
    except np.linalg.LinAlgError:
        inverse, ok = np.full_like(chord, np.nan), np.ones(chord.shape[0], dtype=bool)
        for i in range(chord.shape[0]):
            try:
                inverse[i] = np.linalg.inv(chord[i])
            except np.linalg.LinAlgError:
                ok[i] = False
        return inverse, ok


def _step(flow: _Flow, scale, u, f, h, newton_tol):
    """One Kvaerno5 step of size h (n,) from (u, f = flow(u)) (n, m), per row: (ok (n,), u1 (n, m),
    the error estimate (n, m)); u1 and the estimate are NaN in the rows that are not ok.

    A row whose chord iteration does not converge within the iterations, or ends non-finite,
    leaves the step at that stage; the others go on."""
    m = u.shape[1]
    hg = h * _GAMMA
    # the chord matrices I - h gamma J(u), frozen for the step
    inverse, ok = _invert(np.eye(m) + (hg * scale)[:, None, None] * flow.K * np.exp(u)[:, None, :])
    live = np.flatnonzero(ok)  # the rows still in the step
    if not ok.all():
        u, f, h, hg, scale, inverse = u[ok], f[ok], h[ok], hg[ok], scale[ok], inverse[ok]
    # columns (rows, 1), made once a step: the stages broadcast them against (rows, m)
    h, hg, scale = h[:, None], hg[:, None], scale[:, None]
    ks = [f]
    z = u
    for row in _A:
        base = u + h * sum(a * k for a, k in zip(row, ks, strict=True))
        z = base + hg * ks[-1]  # predictor: the last stage's slope
        # The chord iteration on the rows still moving: their working copies are compacted when
        # some converge (those are written back and frozen), so no sweep gathers from all rows.
        rows = z.shape[0]
        todo = np.arange(rows)
        zw, bw, gw, sw, iw = z, base, hg, scale, inverse
        for _ in range(_NEWTON_ITERATIONS):
            dz = _matvec(iw, zw - bw - gw * flow(zw, sw))
            zw = zw - dz
            # "< 1", as the scalar test: a NaN update counts as not converged
            converged = _rms(dz / (newton_tol + newton_tol * np.abs(zw))) < 1.0
            if todo.size == rows:
                z = zw
            else:
                z[todo] = zw
            done = np.count_nonzero(converged)  # cheaper than .all() and .any(), which wrap in Python
            if done == converged.size:
                todo = todo[:0]
                break
            if done:
                moving = ~converged
                todo, zw, bw, gw, sw, iw = todo[moving], zw[moving], bw[moving], gw[moving], sw[moving], iw[moving]
        if todo.size or not np.isfinite(z).all():
            good = np.isfinite(z).all(axis=1)
            good[todo] = False
            live, u, h, hg, scale, inverse = live[good], u[good], h[good], hg[good], scale[good], inverse[good]
            z, base, ks = z[good], base[good], [k[good] for k in ks]
        ks.append((z - base) / hg)
    err = h * sum(b * k for b, k in zip(_B_ERROR, ks, strict=True))
    if live.size == ok.size:
        return ok, z, err
    # NaN rows for the rows that left: their error estimate is NaN, so they are not accepted
    u1, error = np.full((ok.size, m), np.nan), np.full((ok.size, m), np.nan)
    u1[live], error[live] = z, err
    ok = np.zeros(ok.shape, dtype=bool)
    ok[live] = True
    return ok, u1, error
