r"""The Lotka-Volterra reduction of the M-flow (docs/theory.md section 3).

When the data matrices share an eigenbasis q_k, M = sum_k m_k q_k q_k^T stays
diagonal and gradient flow with learning rate ``lr`` (time in optimizer steps) is

    dm_k/dt = 4 lr m_k (c_k - sum_j K_kj m_j),
    L(m)    = L0 - sum_k c_k m_k + (1/2) sum_kj K_kj m_k m_j,

a Lotka-Volterra system with growth rates r_k = 4 lr c_k and interactions 4 lr K.
For the theory's symmetric positive semidefinite K (a Gram matrix), L is a Lyapunov
function (dL/dt = -4 lr sum_k m_k (c_k - (K m)_k)^2 <= 0) and the state reached from
small m(0) is the minimiser of L over m >= 0 (the saturated fixed point).

A mode's *switch-on time* is the first time m_k reaches half of its occupation at that
fixed point (docs/theory.md section 5: one threshold for every model).

Numerics. The plateaus last ~ ln(1/m0) / r_k, with m0 down to 1e-60. We integrate
u = ln m,

    du_k/dt = 4 lr (c_k - sum_j K_kj e^{u_j}),

which is piecewise nearly *linear* in t (inactive modes: constant slope; active modes:
constant value), so an adaptive solver takes geometrically growing steps on a plateau
and the step count does not grow in proportion to its length. Active modes make the
system stiff (eigenvalues -4 lr K m*), hence the default L-stable implicit Kvaerno5
with a full Newton solve. For diagonal K every mode is an independent logistic curve
and ``solve_lv`` uses the exact closed form instead (fast for 10^5 modes).

This module holds the system, its equilibria and the closed forms; solving it over time
is :mod:`nqf.theory.lotka_volterra.solve`, and the singular limit m0 -> 0 is :mod:`nqf.theory.singular_limit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import no_type_check

import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from nqf.core.errors import NqfError

__all__ = [
    "LotkaVolterra",
    "equilibrium",
    "excess_loss",
    "fixed_point",
    "logistic_occupation",
    "logistic_switch_time",
    "staircase_switch_time",
    "switch_slope_continuous",
]


def read_only_array(a, dtype=np.float64) -> np.ndarray:
    """A read-only copy of ``a`` as ``dtype``: the stored fields of the LV results."""
    a = np.array(a, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


# The fields are annotated as stored (read-only float64 arrays, m0 spread over the modes); the
# constructor also takes lists and scalars (converted in __post_init__), which no array annotation
# of the fields admits: jaxtyping's test-time checks (tests/conftest.py) skip this class.
@no_type_check
@dataclass(frozen=True, eq=False)
class LotkaVolterra:
    """An LV system dm/dt = 4 lr m (c - K m), loss L0 - c.m + m.K.m/2.

    Args:
        c: (m,) growth coefficients (eigenvalues of C in the shared basis).
        K: (m, m) interaction matrix (K_kj = E[(q_k^T A q_k)(q_j^T A q_j)]), or (m,) for a
            diagonal K (stored as its diagonal: 10^5 uncoupled modes without an m x m array).
        m0: (m,) or scalar initial occupations, all > 0 (random init: ~ n sigma0^2).
        lr: learning rate (time is measured in optimizer steps).
        loss0: the loss at m = 0.

    Arrays are stored as read-only float64 numpy arrays; equality and hash are by value.
    """

    c: Float[np.ndarray, " m"]
    K: Float[np.ndarray, "m m"] | Float[np.ndarray, " m"]
    m0: Float[np.ndarray, " m"]
    lr: float
    loss0: float = 0.0

    def __post_init__(self):
        c = np.asarray(self.c, dtype=np.float64)
        K = np.asarray(self.K, dtype=np.float64)
        if c.ndim != 1 or c.size == 0:
            raise NqfError(f"LotkaVolterra: c must be a non-empty vector, got shape {c.shape}")
        m = c.size
        if K.shape not in ((m, m), (m,)):
            raise NqfError(
                f"LotkaVolterra: K must have shape ({m}, {m}) or ({m},) (diagonal) to match c, got {K.shape}"
            )
        m0 = np.asarray(self.m0, dtype=np.float64)
        if m0.ndim == 0:
            m0 = np.full(m, float(m0))
        if m0.shape != (m,):
            raise NqfError(f"LotkaVolterra: m0 must be a scalar or have shape ({m},), got {m0.shape}")
        for name, a in (("c", c), ("K", K), ("m0", m0)):
            if not np.all(np.isfinite(a)):
                raise NqfError(f"LotkaVolterra: {name} has non-finite entries")
        if not np.all(m0 > 0):
            raise NqfError("LotkaVolterra: initial occupations m0 must be > 0 (log-space integration)")
        lr = float(self.lr)
        if not (math.isfinite(lr) and lr > 0):
            raise NqfError(f"LotkaVolterra: lr must be a positive finite number, got {self.lr}")
        loss0 = float(self.loss0)
        if not math.isfinite(loss0):
            raise NqfError("LotkaVolterra: loss0 must be finite")
        object.__setattr__(self, "c", read_only_array(c))
        object.__setattr__(self, "K", read_only_array(K))
        object.__setattr__(self, "m0", read_only_array(m0))
        object.__setattr__(self, "lr", lr)
        object.__setattr__(self, "loss0", loss0)

    def _key(self):
        return (self.c.tobytes(), self.K.tobytes(), self.m0.tobytes(), self.lr, self.loss0)

    def __eq__(self, other):
        return isinstance(other, LotkaVolterra) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    @property
    def num_modes(self) -> int:
        return self.c.size

    @property
    def growth_rates(self) -> np.ndarray:
        """(m,) r_k = 4 lr c_k."""
        return 4.0 * self.lr * self.c

    @property
    def dense_K(self) -> np.ndarray:
        """(m, m) K as a matrix (built from the diagonal when K was given as a vector)."""
        return np.diag(self.K) if self.K.ndim == 1 else self.K

    @property
    def diagonal(self) -> np.ndarray:
        """(m,) the diagonal of K."""
        return self.K if self.K.ndim == 1 else np.diag(self.K)

    @property
    def is_diagonal(self) -> bool:
        return self.K.ndim == 1 or bool(np.all(self.K == np.diag(np.diag(self.K))))

    def apply_K(self, m) -> np.ndarray:
        """(K m) for m of shape (..., modes)."""
        m = np.asarray(m, dtype=np.float64)
        return m * self.K if self.K.ndim == 1 else m @ self.K.T

    @property
    def eps(self) -> float:
        """ln(1/m0), averaged over modes in log space (the singular-limit parameter)."""
        return float(-np.mean(np.log(self.m0)))

    def loss(self, m):
        """L(m) = L0 - c.m + m.K.m/2 for m of shape (..., modes)."""
        m = np.asarray(m, dtype=np.float64)
        return self.loss0 - m @ self.c + 0.5 * np.sum(m * self.apply_K(m), axis=-1)


# ---------------------------------------------------------------- equilibria


def _active_mask(active, m: int) -> np.ndarray:
    a = np.asarray(active)
    if a.dtype == bool:
        if a.shape != (m,):
            raise NqfError(f"active mask must have shape ({m},), got {a.shape}")
        return a.copy()
    mask = np.zeros(m, dtype=bool)
    idx = a.astype(int).ravel()
    if idx.size and (idx.min() < 0 or idx.max() >= m):
        raise NqfError(f"active modes must lie in [0, {m}), got {idx.tolist()}")
    mask[idx] = True
    return mask


def equilibrium(c, K, active) -> np.ndarray:
    """The LV equilibrium with the given active set.

    m_A solves K_AA m_A = c_A, m_k = 0 off A. Signs are not checked: a negative entry
    means A is not a feasible active set (that mode would be suppressed).

    Args:
        c: (m,) growth coefficients; K: (m, m) or (m,) diagonal; active: (m,) bool mask or indices.
    Returns:
        (m,) occupations.
    Raises:
        NqfError: if K_AA is singular and K_AA m = c_A has no solution.
    """
    c = np.asarray(c, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    if K.ndim == 1:
        K = np.diag(K)
    mask = _active_mask(active, c.size)
    out = np.zeros(c.size)
    if not mask.any():
        return out
    KA = K[np.ix_(mask, mask)]
    cA = c[mask]
    sol, *_ = np.linalg.lstsq(KA, cA, rcond=None)
    scale = max(np.abs(cA).max(), np.abs(KA).max() * np.abs(sol).max(), 1e-300)
    if np.abs(KA @ sol - cA).max() > 1e-9 * scale:
        raise NqfError("equilibrium: K restricted to the active modes is singular and K_AA m = c_A has no solution")
    out[mask] = sol
    return out


def check_symmetric_psd(K: np.ndarray, what: str) -> None:
    scale = max(np.abs(K).max(), 1e-300)
    if np.abs(K - K.T).max() > 1e-10 * scale:
        raise NqfError(
            f"{what}: K is not symmetric; the theory's K is a Gram matrix (symmetric PSD), and for a "
            "general K the fixed point reached depends on the path (use solve_lv and its end state)"
        )
    w = np.linalg.eigvalsh(0.5 * (K + K.T))
    if w.min() < -1e-10 * scale:
        raise NqfError(
            f"{what}: K is not positive semidefinite (min eigenvalue {w.min():.3g}); multiple stable fixed "
            "points may exist and the one reached depends on the path (use solve_lv and its end state)"
        )


def nonnegative_least_squares(A: np.ndarray, b: np.ndarray, max_iterations: int) -> np.ndarray:
    """argmin_{x >= 0} |A x - b|_2 for A (r, n), b (r,): Lawson and Hanson's active-set method
    (Solving Least Squares Problems, 1974, ch. 23), as ``scipy.optimize.nnls`` (whose import
    alone costs 0.6 s of a first prediction). Exact up to rounding: the solution is the
    least-squares solution on its support, found in finitely many steps.

    Raises NqfError when ``max_iterations`` passes without convergence.
    """
    r, n = A.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tolerance = 10 * max(r, n) * np.finfo(np.float64).eps * max(np.abs(A).sum(axis=0).max(), 1e-300)
    tolerance *= max(np.abs(b).max(), 1e-300)
    iterations = 0
    while True:
        gradient = A.T @ (b - A @ x)  # the dual: KKT holds when it is <= 0 off the support
        free = ~passive & (gradient > tolerance)
        if not free.any():
            return x
        passive[np.flatnonzero(free)[np.argmax(gradient[free])]] = True
        while True:
            iterations += 1
            if iterations > max_iterations:
                raise NqfError(f"LV fixed point: nonnegative least squares did not converge in {max_iterations} steps")
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            # step from x toward z until the first passive coordinate reaches 0, and drop it
            blocking = passive & (z <= 0)
            alpha = np.min(x[blocking] / (x[blocking] - z[blocking]))
            x = x + alpha * (z - x)
            passive &= x > tolerance
            x[~passive] = 0.0


def stable_equilibrium(c: np.ndarray, K: np.ndarray, subset: np.ndarray) -> np.ndarray:
    """Minimiser of L over {m >= 0, m_k = 0 off ``subset``} for symmetric PSD K (an LCP).

    This is the saturated fixed point of the LV system restricted to ``subset``: on its
    support the equilibrium equations hold, off it c_k - (K m)_k <= 0. Solved exactly as
    nonnegative least squares (Lawson-Hanson active set) on K = B^T B, then polished on
    the support.
    """
    m = c.size
    out = np.zeros(m)
    idx = np.flatnonzero(subset)
    if idx.size == 0:
        return out
    Ks = 0.5 * (K[np.ix_(idx, idx)] + K[np.ix_(idx, idx)].T)
    cs = c[idx]
    w, V = np.linalg.eigh(Ks)
    scale = max(np.abs(w).max(), 1e-300)
    keep = w > 1e-12 * scale
    Vk = V[:, keep]
    c_null = cs - Vk @ (Vk.T @ cs)
    if np.abs(c_null).max() > 1e-9 * max(np.abs(cs).max(), 1e-300):
        raise NqfError(
            "LV fixed point: c has a component in the null space of K on the modes considered; the loss is "
            "degenerate or unbounded below there"
        )
    sq = np.sqrt(w[keep])
    B = sq[:, None] * Vk.T  # (r, n): B^T B = K_s
    b = (Vk.T @ cs) / sq  # B^T b = c_s
    x = nonnegative_least_squares(B, b, max_iterations=50 * max(idx.size, 10))
    support = x > 1e-12 * max(x.max(), 1e-300)
    # Polish on the support: the exact equilibrium of the active set, if feasible.
    if support.any():
        xs = np.zeros(idx.size)
        sol, *_ = np.linalg.lstsq(Ks[np.ix_(support, support)], cs[support], rcond=None)
        xs[support] = sol
        if np.all(sol > 0):
            x = xs
        else:
            x = np.where(support, x, 0.0)
    out[idx] = x
    return out


def fixed_point(system: LotkaVolterra) -> np.ndarray:
    """The stable (saturated) fixed point reached from small m(0): argmin_{m >= 0} L(m).

    Requires symmetric positive semidefinite K (the theory's Gram matrix); for K positive
    definite it is unique. Modes suppressed by others have m_k = 0 there.

    Returns:
        (m,) occupations.
    """
    if system.is_diagonal:
        return diagonal_fixed_point(system, "fixed_point")
    check_symmetric_psd(system.K, "fixed_point")
    return stable_equilibrium(system.c, system.K, np.ones(system.num_modes, dtype=bool))


def diagonal_fixed_point(system: LotkaVolterra, what: str) -> np.ndarray:
    """The fixed point of uncoupled modes, m_k* = c_k / K_kk where c_k > 0, else 0 (m,); NqfError
    (its message led by ``what``) where K_kk < 0 or a growing mode has K_kk = 0."""
    c, k = system.c, system.diagonal
    if np.any(k < 0):
        raise NqfError(f"{what}: K has a negative diagonal entry (not positive semidefinite)")
    if np.any((c > 0) & (k == 0)):
        raise NqfError(f"{what}: a mode with c_k > 0 and K_kk = 0 grows without bound")
    grows = c > 0
    return np.where(grows, c / np.where(grows, k, 1.0), 0.0)


def excess_loss(system: LotkaVolterra, m, reference=None) -> np.ndarray:
    """L(m) - L(m*) without cancellation, m* the fixed point (or ``reference``).

    With delta = m - m* and w = c - K m*: L(m) - L(m*) = delta.K.delta/2 - w.delta.
    At a saturated fixed point w = 0 on the support and w <= 0 with delta >= 0 off it, so
    both terms are >= 0 and the excess loss is computed to relative precision even when it
    is 1e-12 of the loss.

    Args:
        m: (..., modes) occupations.
    Returns:
        (...) excess losses.
    """
    ref = fixed_point(system) if reference is None else np.asarray(reference, dtype=np.float64)
    w = system.c - system.apply_K(ref)
    delta = np.asarray(m, dtype=np.float64) - ref
    return 0.5 * np.sum(delta * system.apply_K(delta), axis=-1) - delta @ w


# ---------------------------------------------------------------- closed forms


def logistic_occupation(c, K, m0, lr, t):
    """Exact occupation of uncoupled modes dm/dt = 4 lr m (c - K m), elementwise.

    m(t) = m* / (1 + (m*/m0 - 1) e^{-rt}), r = 4 lr c, m* = c / K, written as

        1/m(t) = e^{-rt} / m0 + 4 lr K t phi(rt),   phi(x) = (1 - e^{-x}) / x,

    which also covers c <= 0 (phi(0) = 1: m0 / (1 + 4 lr K m0 t)) and K = 0 (m0 e^{rt}).
    Evaluated as ln m = -logaddexp(-rt - ln m0, ln(4 lr K t) + ln phi(rt)) so that
    m0 = 1e-60 and e^{rt} far beyond the float range stay exact. Requires K >= 0.
    All arguments broadcast; jax.numpy (vmappable, jit-able).

    Returns:
        m(t), broadcast shape.
    """
    return jnp.exp(logistic_log_occupation(c, K, jnp.log(jnp.asarray(m0)), lr, t))


def logistic_log_occupation(c, K, log_m0, lr, t):
    """ln m(t) of ``logistic_occupation`` from ln m0 (m0 = 1e-60 underflows in float32; ln m0 does not)."""
    c, K, log_m0, lr, t = (jnp.asarray(a) for a in (c, K, log_m0, lr, t))
    x = 4.0 * lr * c * t
    small = jnp.abs(x) < 1e-3
    xs = jnp.where(small, 1.0, x)
    # ln phi(x) without cancellation: for x > 0, log1p(-e^{-x}) - ln x; for x < 0 the
    # genuine -x growth of 1/m (a decaying mode) plus log1p(-e^{x}) - ln(-x).
    ln_phi_pos = jnp.log1p(-jnp.exp(-jnp.abs(xs))) - jnp.log(jnp.abs(xs))
    ln_phi = jnp.where(
        small,
        -x / 2 + x * x / 24 - x**4 / 2880,
        jnp.where(xs > 0, ln_phi_pos, -xs + ln_phi_pos),
    )
    # -inf at t = 0 or K = 0; the safe argument keeps derivatives finite there
    grows = (K * t) > 0
    growth_term = jnp.where(grows, jnp.log(4.0 * lr * jnp.where(grows, K * t, 1.0)) + ln_phi, -jnp.inf)
    return -jnp.logaddexp(-x - log_m0, growth_term)


def logistic_switch_time(c, K, m0, lr):
    """Exact half-time of a single uncoupled mode: m(t) = m*/2, m* = c/K.

    t = ln(m*/m0 - 1) / (4 lr c)  (0 if m0 >= m*/2; NaN if c <= 0 or K <= 0, where
    there is no positive fixed point). Elementwise numpy.
    """
    c, K, m0 = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (c, K, m0)))
    ok = (c > 0) & (K > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        m_star = np.where(ok, c / np.where(K > 0, K, 1.0), 1.0)
        ratio = m0 / m_star
        log_term = -np.log(ratio) + np.log1p(-np.minimum(ratio, 0.5))  # ln(m*/m0 - 1)
        t = np.where(ratio >= 0.5, 0.0, log_term / (4.0 * lr * np.where(ok, c, 1.0)))
    out = np.where(ok, t, np.nan)
    return out if out.ndim else float(out)


def staircase_switch_time(s, m0, lr):
    """docs/theory.md section 3 approximate switch-on time of the two-layer staircase.

    With c_k = s_k/2 and K_kk = 1/4 each mode is logistic, dm/dt = lr m (2 s - m), and
    t_k ~= ln(2 s_k / m_k(0)) / (2 lr s_k)  (drops the -1 of the exact ln(2s/m0 - 1)).
    """
    s = np.asarray(s, dtype=np.float64)
    return np.log(2.0 * s / np.asarray(m0, dtype=np.float64)) / (2.0 * lr * s)


def switch_slope_continuous(c, lr):
    """Switch-on time per unit ln(1/sigma0) under gradient flow: 1/(2 lr c).

    m grows like e^{4 lr c t} and m0 ~ sigma0^2, so ln(1/m0) = 2 ln(1/sigma0) + const.
    """
    return 1.0 / (2.0 * lr * np.asarray(c, dtype=np.float64))
