r"""The Lotka-Volterra reduction of the M-flow (THEORY.md section 3).

When the data matrices share an eigenbasis q_k, M = sum_k m_k q_k q_k^T stays
diagonal and gradient flow with learning rate ``lr`` (time in optimizer steps) is

    dm_k/dt = 4 lr m_k (c_k - sum_j K_kj m_j),
    L(m)    = L0 - sum_k c_k m_k + (1/2) sum_kj K_kj m_k m_j,

a Lotka-Volterra system with growth rates r_k = 4 lr c_k and interactions 4 lr K.
For the theory's symmetric positive semidefinite K (a Gram matrix), L is a Lyapunov
function (dL/dt = -4 lr sum_k m_k (c_k - (K m)_k)^2 <= 0) and the state reached from
small m(0) is the minimiser of L over m >= 0 (the saturated fixed point).

A mode's *switch-on time* is the first time m_k reaches half of its occupation at that
fixed point (THEORY.md section 5: one threshold for every model).

Numerics. The plateaus last ~ ln(1/m0) / r_k, with m0 down to 1e-60. We integrate
u = ln m,

    du_k/dt = 4 lr (c_k - sum_j K_kj e^{u_j}),

which is piecewise nearly *linear* in t (inactive modes: constant slope; active modes:
constant value), so an adaptive solver takes geometrically growing steps on a plateau
and the step count does not grow in proportion to its length. Active modes make the
system stiff (eigenvalues -4 lr K m*), hence the default L-stable implicit Kvaerno5
with a full Newton solve. For diagonal K every mode is an independent logistic curve
and ``solve_lv`` uses the exact closed form instead (fast for 10^5 modes).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._errors import NqfError

__all__ = [
    "LVSolution",
    "LotkaVolterra",
    "default_times",
    "equilibrium",
    "excess_loss",
    "fixed_point",
    "gd_occupations",
    "logistic_occupation",
    "logistic_switch_time",
    "solve_lv",
    "staircase_switch_time",
    "suggested_horizon",
    "switch_slope_continuous",
    "switch_slope_gd",
    "switch_slope_momentum",
    "switch_times",
]


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64, copy=True)
    a.setflags(write=False)
    return a


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

    c: np.ndarray
    K: np.ndarray
    m0: np.ndarray
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
        object.__setattr__(self, "c", _readonly(c))
        object.__setattr__(self, "K", _readonly(K))
        object.__setattr__(self, "m0", _readonly(m0))
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
    def interactions(self) -> np.ndarray:
        """(m, m) 4 lr K."""
        return 4.0 * self.lr * self.dense_K

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


def _check_symmetric_psd(K: np.ndarray, what: str) -> None:
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


def _stable_equilibrium(c: np.ndarray, K: np.ndarray, subset: np.ndarray) -> np.ndarray:
    """Minimiser of L over {m >= 0, m_k = 0 off ``subset``} for symmetric PSD K (an LCP).

    This is the saturated fixed point of the LV system restricted to ``subset``: on its
    support the equilibrium equations hold, off it c_k - (K m)_k <= 0. Solved exactly as
    nonnegative least squares (Lawson-Hanson active set) on K = B^T B, then polished on
    the support.
    """
    from scipy.optimize import nnls  # imported here: scipy.optimize costs 0.2 s to import

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
    x, _ = nnls(B, b, maxiter=50 * max(idx.size, 10))
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
        c, k = system.c, system.diagonal
        if np.any(k < 0):
            raise NqfError("fixed_point: K has a negative diagonal entry (not positive semidefinite)")
        if np.any((c > 0) & (k == 0)):
            raise NqfError("fixed_point: a mode with c_k > 0 and K_kk = 0 grows without bound")
        grows = c > 0
        return np.where(grows, c / np.where(grows, k, 1.0), 0.0)
    _check_symmetric_psd(system.K, "fixed_point")
    return _stable_equilibrium(system.c, system.K, np.ones(system.num_modes, dtype=bool))


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
    return jnp.exp(_logistic_log_occupation(c, K, jnp.log(jnp.asarray(m0)), lr, t))


def _logistic_log_occupation(c, K, log_m0, lr, t):
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
    """THEORY.md section 3 approximate switch-on time of the two-layer staircase.

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


def switch_slope_gd(c, lr):
    """Switch-on step per unit ln(1/sigma0) under plain GD: 1/ln(1 + 2 lr c).

    Near M = 0 the weight component along q_k grows by (1 + 2 lr c) per step, m by its square.
    """
    return 1.0 / np.log1p(2.0 * lr * np.asarray(c, dtype=np.float64))


def switch_slope_momentum(c, lr, beta):
    """Switch-on step per unit ln(1/sigma0) under heavy-ball momentum: 1/ln z.

    z is the larger root of z^2 - (1 + beta + 2 lr c) z + beta = 0, the per-step growth of
    the weight component (w+ = w + beta (w - w-) + 2 lr c w near M = 0). lr/(1 - beta)
    scaling is recovered only for 2 lr c << (1 - beta)^2.
    """
    c = np.asarray(c, dtype=np.float64)
    b = 1.0 + beta + 2.0 * lr * c
    z = 0.5 * (b + np.sqrt(b * b - 4.0 * beta))
    return 1.0 / np.log(z)


def gd_occupations(system: LotkaVolterra, num_steps: int) -> np.ndarray:
    """The exact discrete GD map on M in the shared eigenbasis, iterated in log space.

    M+ = (I - 2 lr G) M (I - 2 lr G) with G = K[M] - C diagonal gives
    m_k+ = (1 + 2 lr (c_k - (K m)_k))^2 m_k, i.e. u+ = u + 2 ln|1 + 2 lr (c - K e^u)|.

    Returns:
        (num_steps + 1, m) occupations at steps 0..num_steps.
    """
    if int(num_steps) < 0:
        raise NqfError("gd_occupations: num_steps must be >= 0")
    u0 = jnp.asarray(np.log(system.m0))  # log in float64 first: tiny m0 underflows in float32
    us = _gd_log_occupations(jnp.asarray(system.c), jnp.asarray(system.K), jnp.asarray(system.lr), u0, int(num_steps))
    return np.exp(np.concatenate([np.asarray(u0)[None], np.asarray(us)], axis=0))


# module level with arrays as arguments: compiled once per shape, not once per call
@functools.partial(jax.jit, static_argnames=("num_steps",))
def _gd_log_occupations(c, K, lr, u0, num_steps):
    def step(u, _):
        Km = K * jnp.exp(u) if K.ndim == 1 else K @ jnp.exp(u)
        g = 1.0 + 2.0 * lr * (c - Km)
        u_next = u + 2.0 * jnp.log(jnp.abs(g))
        return u_next, u_next

    return jax.lax.scan(step, u0, None, length=num_steps)[1]


# ---------------------------------------------------------------- solving


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
    ts: np.ndarray
    occupations: np.ndarray | None
    losses: np.ndarray
    excess_losses: np.ndarray | None
    num_steps: int
    num_accepted_steps: int
    method: str
    t_final: float
    _dense: Any = field(default=None, repr=False)
    _step_ts: np.ndarray | None = field(default=None, repr=False)
    _step_us: np.ndarray | None = field(default=None, repr=False)

    def log_occupation(self, t) -> np.ndarray:
        """ln m(t) at arbitrary times in [0, t_final]: (..., m)."""
        t = np.asarray(t, dtype=np.float64)
        s = self.system
        if self._dense is None:
            return np.asarray(_logistic_log_occupation(s.c, s.diagonal, np.log(s.m0), s.lr, t[..., None]))
        flat = t.reshape(-1)
        u = np.asarray(_evaluate_dense(self._dense, jnp.asarray(flat)))
        return u.reshape(t.shape + (s.num_modes,))

    def occupation(self, t) -> np.ndarray:
        """m(t) at arbitrary times in [0, t_final]: (..., m)."""
        return np.exp(self.log_occupation(t))


@eqx.filter_jit
def _evaluate_dense(sol, ts):
    return jax.vmap(sol.evaluate)(ts)


def _vector_field(t, u, args):
    c, K, lr = args
    return 4.0 * lr * (c - K @ jnp.exp(u))


@eqx.filter_jit
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
        saveat=diffrax.SaveAt(
            subs=[diffrax.SubSaveAt(ts=grid), diffrax.SubSaveAt(t0=True, steps=True)], dense=True
        ),
        stepsize_controller=controller,
        max_steps=max_steps,
        throw=False,
    )


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
    from ._singular_limit import singular_limit  # local: _singular_limit builds on this module

    limit = singular_limit(system)
    if limit.step_times.size == 0:
        return 20.0 / max(np.abs(system.growth_rates).max(), 1e-300)
    t_last = float(limit.steps().max())
    rates = system.growth_rates[limit.activation_order]
    return factor * t_last + 20.0 / float(np.abs(rates).min())


def solve_lv(
    system: LotkaVolterra,
    t_final: float,
    ts=None,
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
        ts: (T,) output times in [0, t_final]; default ``default_times(t_final)``.
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
    import diffrax
    import optimistix as optx

    t_final = float(t_final)
    if not (math.isfinite(t_final) and t_final > 0):
        raise NqfError(f"solve_lv: t_final must be positive and finite, got {t_final}")
    ts = default_times(t_final) if ts is None else np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0:
        raise NqfError("solve_lv: ts must be a non-empty vector of times")
    if ts.min() < 0 or ts.max() > t_final * (1 + 1e-12):
        raise NqfError("solve_lv: output times must lie in [0, t_final]")
    if method == "auto":
        method = "logistic" if system.is_diagonal else "kvaerno5"
    if method not in ("logistic", "kvaerno5", "tsit5"):
        raise NqfError(f"solve_lv: unknown method {method!r} (auto, logistic, kvaerno5, tsit5)")
    default_tol = 1e-8 if jnp.asarray(1.0).dtype == jnp.float64 else 1e-5
    rtol = default_tol if rtol is None else float(rtol)
    atol = default_tol if atol is None else float(atol)
    try:
        reference = fixed_point(system)
    except NqfError:
        reference = None

    if method == "logistic":
        return _solve_logistic(system, t_final, ts, reference, save_occupations, batch_size)

    if method == "kvaerno5":
        newton_tol = max(1e-2 * min(rtol, atol), 1e-14)
        solver = diffrax.Kvaerno5(
            root_finder=optx.Newton(rtol=jnp.asarray(newton_tol), atol=jnp.asarray(newton_tol))
        )
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
    us = np.asarray(sol.ys[0])
    n_saved = int(sol.stats["num_accepted_steps"]) + 1
    step_ts = np.asarray(sol.ts[1])[:n_saved]
    step_us = np.asarray(sol.ys[1])[:n_saved]
    ms = np.exp(us)
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
        _step_ts=step_ts,
        _step_us=step_us,
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
    losses, excess, ms = _logistic_evaluate(
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


# The closed form is evaluated in (time x mode) blocks: modes in chunks of about
# _LOGISTIC_MODE_CHUNK (their per-mode constants, 8 x 32 KiB, stay in cache while the
# block's times reuse them) and at most _LOGISTIC_BLOCK_ELEMENTS elements per block (2 MiB
# per complex intermediate), whatever the number of modes and output times.
_LOGISTIC_MODE_CHUNK = 4096
_LOGISTIC_BLOCK_ELEMENTS = 1 << 17


def _regular_occupation(t, r, m0, rho, sigma):
    r"""m(t) at times t (tc,) of modes with c > 0, K > 0 and m0 <= m*, shape (tc, modes).

    From the per-mode r = 4 lr c, m0, rho = m0 / m* = m0 K / c in (0, 1] and sigma = 1 - rho,

        m(t) = m0 / (rho + sigma e^{-x}),   x = r t,

    ``logistic_occupation``'s 1/m = e^{-x}/m0 + (1 - e^{-x})/m* multiplied by m0. Both terms
    of the denominator are >= 0 (no cancellation) and it lies in [rho, 1]: one exp and one
    division per element, m(0) = m0 exactly, and m = m0/rho once e^{-x} is below rounding.
    """
    return m0 / (rho + sigma * jnp.exp(-(r * t[:, None])))


def _general_log_occupation(lr, t, c, k, log_m0):
    """ln m(t) at times t (tc,) of any mode with K >= 0, shape (tc, modes): the log-space
    ``logistic_occupation`` (c <= 0, K = 0, m0 > m*, extreme ranges)."""
    return _logistic_log_occupation(c, k, log_m0, lr, t[:, None])


def _logistic_evaluate(c, k, m0, lr, m_ref, ts, batch_size, save_occupations):
    """Losses minus loss0, excess losses and optionally the (T, m) occupations of
    uncoupled logistic modes at times ``ts`` (float64 numpy).

    Modes with c > 0, K > 0 and m0 <= m* inside the float range (the theory's case) take
    the one-exp form ``_regular_occupation``; every other mode the log-space form of
    ``logistic_occupation``. The per-mode loss and excess-loss terms m (K m / 2 - c) and
    delta (K delta / 2 - w) are summed block by block (``_logistic_map``).
    """
    c, k, m0, m_ref = (np.asarray(a, dtype=np.float64) for a in (c, k, m0, m_ref))
    ts = np.asarray(ts, dtype=np.float64)
    num_modes, num_times = c.size, ts.size
    r = 4.0 * lr * c  # the association of _logistic_log_occupation's x = 4 lr c t
    # the float range of the device arrays (float32 without jax_enable_x64): rho >= rho_min
    # makes every e^{-x} that still moves rho + sigma e^{-x} (> eps rho) a normal float
    # (XLA flushes subnormals to 0)
    tiny, rho_min = (1e-300, 1e-250) if jnp.asarray(1.0).dtype == jnp.float64 else (1e-30, 1e-25)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        rho = m0 * k / c
        regular = (c > 0) & (k > 0) & (r >= tiny) & (m0 >= tiny) & (m0 <= 1.0 / tiny)
        regular &= np.isfinite(rho) & (rho >= rho_min) & (rho <= 1.0)
    weights = (0.5 * k, c, m_ref, c - k * m_ref)  # K/2, c, m_ref, w
    reg, gen = np.flatnonzero(regular), np.flatnonzero(~regular)
    # per kind: the per-mode constants of its occupation and their padding values (padding
    # modes have m = 1 and zero weights: they add exactly 0)
    kinds = (
        (reg, (r, m0, rho, 1.0 - rho), (0.0, 1.0, 1.0, 0.0)),
        (gen, (c, k, np.log(m0)), (0.0, 0.0, 0.0)),
    )
    args, widths = [], []
    for idx, consts, pads in kinds:
        if idx.size == 0:
            args.append(None)
            continue
        chunks = -(-idx.size // _LOGISTIC_MODE_CHUNK)
        width = -(-idx.size // chunks)  # balanced chunks: less than one chunk of padding
        arrays = []
        for a, v in zip(consts + weights, pads + (0.0,) * 4):
            padded = np.full(chunks * width, v)
            padded[: idx.size] = a[idx]
            arrays.append(jnp.asarray(padded.reshape(chunks, width)))
        args.append(tuple(arrays))
        widths.append(width)
    time_chunk = max(1, min(batch_size, num_times, _LOGISTIC_BLOCK_ELEMENTS // max(widths)))
    time_chunks = -(-num_times // time_chunk)
    padded_ts = np.zeros(time_chunks * time_chunk)  # t = 0 pads: valid, dropped below
    padded_ts[:num_times] = ts
    losses, excess, blocks = _logistic_map(
        args[0], args[1], jnp.asarray(lr),
        jnp.asarray(padded_ts.reshape(time_chunks, time_chunk)), save_occupations,
    )
    losses = np.asarray(losses).reshape(-1)[:num_times]
    excess = np.asarray(excess).reshape(-1)[:num_times]
    if not save_occupations:
        return losses, excess, None
    parts = [
        (idx, np.asarray(b).reshape(time_chunks * time_chunk, -1)[:num_times, : idx.size])
        for (idx, _, _), b in zip(kinds, blocks) if b is not None
    ]
    if gen.size:  # ln m of these modes: exp here keeps subnormal m (XLA flushes them to 0)
        parts[-1] = (gen, np.exp(parts[-1][1]))
    if len(parts) == 1:
        return losses, excess, np.ascontiguousarray(parts[0][1])
    ms = np.empty((num_times, num_modes))
    for idx, part in parts:
        ms[:, idx] = part
    return losses, excess, ms


@functools.partial(jax.jit, static_argnames=("save_occupations",))
def _logistic_map(regular_args, general_args, lr, ts, save_occupations):
    """Losses minus loss0 and excess losses at ts (time chunks, time chunk), and with
    ``save_occupations`` the occupations of each kind of mode (of the general kind their
    logarithms), (time chunks, time chunk, chunks x width) or None.

    ``regular_args`` / ``general_args``: (chunks, width) arrays, the per-mode constants of
    ``_regular_occupation`` / ``_general_log_occupation`` then K/2, c, m_ref, w; None when no
    mode is of that kind. A map over the time chunks (rows of ts) of a scan over the mode
    chunks: memory is one block, (time chunk x width), whatever the sizes.
    """

    def kind(t, args, occupation, log_space):
        def step(acc, chunk):
            *consts, half_k, c, m_ref, w = chunk
            saved = occupation(t, *consts)
            m = jnp.exp(saved) if log_space else saved
            delta = m - m_ref
            # both sums in one pass over the block: a complex sum adds the real parts
            # (loss terms) and the imaginary parts (excess terms) separately
            terms = jax.lax.complex(m * (half_k * m - c), delta * (half_k * delta - w))
            return acc + jnp.sum(terms, axis=1), (saved if save_occupations else None)

        acc, ms = jax.lax.scan(step, jnp.zeros_like(jax.lax.complex(t, t)), args)
        if save_occupations:  # (chunks, tc, width) -> (tc, chunks x width)
            ms = jnp.moveaxis(ms, 0, 1).reshape(t.size, -1)
        return acc, ms

    def block(t):
        acc = jnp.zeros_like(jax.lax.complex(t, t))
        ms = []
        for args, occupation, log_space in (
            (regular_args, _regular_occupation, False),
            (general_args, functools.partial(_general_log_occupation, lr), True),
        ):
            if args is None:
                ms.append(None)
                continue
            part, m = kind(t, args, occupation, log_space)
            acc = acc + part
            ms.append(m)
        return jnp.real(acc), jnp.imag(acc), tuple(ms)

    return jax.lax.map(block, ts)


# ---------------------------------------------------------------- switch times


@eqx.filter_jit
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


def switch_times(x, *, reference=None, t_final=None) -> np.ndarray:
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
    positive = reference > 0
    with np.errstate(divide="ignore"):
        thresholds = np.where(positive, np.log(np.where(positive, 0.5 * reference, 1.0)), np.inf)

    if sol._dense is None:  # diagonal closed form
        k = system.diagonal
        m_star = np.where(k > 0, system.c / np.where(k > 0, k, 1.0), np.nan)
        if np.allclose(m_star[positive], reference[positive], rtol=1e-12, atol=0):
            out = np.asarray(logistic_switch_time(system.c, k, system.m0, system.lr), dtype=np.float64)
        else:
            raise NqfError("switch_times: a custom reference needs an ODE solution (method='kvaerno5')")
        out = np.where(positive & (out <= sol.t_final), out, np.nan)
        return out

    step_ts, step_us = sol._step_ts, sol._step_us
    crossed = step_us >= thresholds[None, :]
    first = np.argmax(crossed, axis=0)
    reached = crossed.any(axis=0) & positive
    out = np.full(system.num_modes, np.nan)
    at_start = reached & (first == 0)
    out[at_start] = 0.0
    need = reached & (first > 0)
    if need.any():
        lo = np.where(need, step_ts[np.maximum(first - 1, 0)], 0.0)
        hi = np.where(need, step_ts[first], 0.0)
        targets = jnp.asarray(np.where(need, thresholds, 0.0))
        roots = np.asarray(_bisect_crossings(sol._dense, jnp.asarray(lo), jnp.asarray(hi), targets))
        out[need] = roots[need]
    return out


# ---------------------------------------------------------------- switch times of the flow, in one program


def _flow_switch_core(c, K, lr, u0, t_final, thresholds, rtol, atol, newton_tol, *, max_steps):
    """Switch-on times of the LV gradient flow (Kvaerno5 in u = ln m, as ``solve_lv``) and whether
    the solve succeeded, as one pure-array program: the solve, the first accepted step past each
    threshold, and the bisection in the dense output (as ``switch_times`` on an LVSolution)."""
    import diffrax  # imported here: a warm nqf predict calls the stored program instead
    import optimistix as optx

    solver = diffrax.Kvaerno5(root_finder=optx.Newton(rtol=newton_tol, atol=newton_tol))
    controller = diffrax.PIDController(rtol=rtol, atol=atol)
    # the output grid is only t_final: switch times need the accepted steps and the dense output
    sol = _solve_log_ode(c, K, lr, u0, t_final, t_final[None], solver, controller, max_steps)
    step_ts, step_us = sol.ts[1], sol.ys[1]
    valid = jnp.arange(step_ts.shape[0]) < sol.stats["num_accepted_steps"] + 1
    crossed = (step_us >= thresholds[None, :]) & valid[:, None]
    first = jnp.argmax(crossed, axis=0)
    reached = jnp.any(crossed, axis=0) & jnp.isfinite(thresholds)
    need = reached & (first > 0)
    lo = jnp.where(need, step_ts[jnp.maximum(first - 1, 0)], 0.0)
    hi = jnp.where(need, step_ts[first], 0.0)
    roots = _bisect_crossings(sol, lo, hi, jnp.where(need, thresholds, 0.0))
    out = jnp.where(reached & (first == 0), 0.0, jnp.where(need, roots, jnp.nan))
    return out, sol.result == diffrax.RESULTS.successful


_flow_switch_program = jax.jit(_flow_switch_core, static_argnames=("max_steps",))


def flow_switch_times(system: LotkaVolterra, t_final: float, reference) -> np.ndarray:
    """``switch_times(solve_lv(system, t_final), reference=reference)``, in one compiled program
    that later processes reuse without tracing (``nqf._exported``) when K is not diagonal."""
    from ._exported import call_exported

    t_final = float(t_final)
    if system.is_diagonal or not (math.isfinite(t_final) and t_final > 0):
        return switch_times(solve_lv(system, t_final), reference=reference)
    double = jnp.asarray(1.0).dtype == jnp.float64
    tol = 1e-8 if double else 1e-5
    reference = np.asarray(reference, dtype=np.float64)
    positive = reference > 0
    with np.errstate(divide="ignore"):
        thresholds = np.where(positive, np.log(np.where(positive, 0.5 * reference, 1.0)), np.inf)
    args = tuple(
        jnp.asarray(a)
        for a in (
            system.c, system.dense_K, system.lr, np.log(system.m0), t_final, thresholds, tol, tol,
            max(1e-2 * tol, 1e-14),
        )
    )
    out, ok = call_exported(_flow_switch_program, *args, max_steps=4096)
    if not bool(ok):
        raise NqfError("solve_lv: the ODE solver failed; raise max_steps (now 4096) or loosen rtol/atol")
    return np.asarray(out, dtype=np.float64)
