r"""Power laws from many Lotka-Volterra modes (docs/theory.md section 4).

With c_k ~ k^-alpha and diagonal K_kk ~ k^-gamma, mode k switches on at
t_k ~ eps / (4 lr c_k) ~ k^alpha and leaves c_k^2 / (2 K_kk) in the loss until then, so

    L(t) - L_inf ~ (t / eps)^-beta,      beta = (2 alpha - gamma - 1) / alpha

in the limit eps = ln(1/m0) -> infinity. At finite init ln(m_k*/m_k(0)) = eps - alpha ln k
(for K = I) shrinks with k, later modes come relatively early and the exponent is steeper:

    beta_eff ~= beta / (1 - 1 / (eps - alpha ln k*)),

k* the mode switching at the time considered (d ln t_k / d ln k = alpha (1 - 1/(eps - alpha ln k))).

``fit_power_law`` fits ln(L - L_inf) against ln t on points evenly spaced in ln t inside a
window, with a confidence interval that accounts for the residuals' autocorrelation,
and says whether a power law describes the curve at all (and why not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nqf.core.errors import NqfError
from nqf.theory.lotka_volterra.system import LotkaVolterra

if TYPE_CHECKING:  # jaxtyping imports JAX; annotations only, so this module stays JAX-free
    from jaxtyping import ArrayLike, Float

__all__ = [
    "PowerLawFit",
    "finite_init_exponent",
    "fit_power_law",
    "local_exponent",
    "power_law_system",
    "predicted_exponent",
    "window_exponent",
]


def predicted_exponent(alpha, gamma=0.0):
    """Asymptotic (eps -> infinity) loss exponent beta = (2 alpha - gamma - 1) / alpha."""
    alpha = np.asarray(alpha, dtype=np.float64)
    if np.any(alpha <= 0):
        raise NqfError("predicted_exponent: alpha must be > 0")
    out = (2.0 * alpha - np.asarray(gamma, dtype=np.float64) - 1.0) / alpha
    return float(out) if out.ndim == 0 else out


def finite_init_exponent(alpha, gamma, eps, k_star):
    """Finite-init exponent beta / (1 - 1 / (eps - alpha ln k*)) (docs/theory.md section 4).

    Derived for K_kk = 1 (then ln(m_k*/m_k(0)) = eps - alpha ln k); for gamma != 0 the
    log-occupation gap is eps - (alpha - gamma) ln k and this formula is only indicative.
    """
    beta = predicted_exponent(alpha, gamma)
    gap = np.asarray(eps, dtype=np.float64) - np.asarray(alpha, dtype=np.float64) * np.log(k_star)
    if np.any(gap <= 1):
        raise NqfError("finite_init_exponent: eps - alpha ln k* must exceed 1 (mode k* starts near saturation)")
    out = beta / (1.0 - 1.0 / gap)
    return float(out) if np.ndim(out) == 0 else out


def power_law_system(
    num_modes: int, alpha: float, gamma: float = 0.0, m0: float = 1e-12, lr: float = 0.05, loss0: float = 0.0
) -> LotkaVolterra:
    """LV system with c_k = k^-alpha, diagonal K_kk = k^-gamma (k = 1..num_modes), K stored as a vector."""
    if int(num_modes) < 1:
        raise NqfError("power_law_system: num_modes must be >= 1")
    k = np.arange(1, int(num_modes) + 1, dtype=np.float64)
    m0s = np.asarray(m0, dtype=np.float64)  # a scalar: LotkaVolterra spreads it over the modes
    return LotkaVolterra(c=k ** (-float(alpha)), K=k ** (-float(gamma)), m0=m0s, lr=lr, loss0=loss0)


def _excess(loss, loss_inf) -> np.ndarray:
    return np.asarray(loss, dtype=np.float64) - float(loss_inf)


def local_exponent(t, loss, loss_inf=0.0) -> np.ndarray:
    """-d ln(L - L_inf) / d ln t at each sample (central differences; t > 0, L > L_inf)."""
    t = np.asarray(t, dtype=np.float64)
    e = _excess(loss, loss_inf)
    if np.any(t <= 0) or np.any(e <= 0):
        raise NqfError("local_exponent: needs t > 0 and loss > loss_inf at every sample")
    return -np.gradient(np.log(e), np.log(t))


def _log_interp(t, e, x):
    """ln e at ln t = x, linear in (ln t, ln e)."""
    return np.interp(x, np.log(t), np.log(e))


def _positive_part(t, loss, loss_inf) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(t, dtype=np.float64)
    e = _excess(loss, loss_inf)
    if t.shape != e.shape or t.ndim != 1:
        raise NqfError("fit_power_law: t and loss must be vectors of the same length")
    order = np.argsort(t)
    t, e = t[order], e[order]
    keep = t > 0
    return t[keep], e[keep]


def window_exponent(t, loss, loss_inf=0.0, window=None) -> float:
    """Mean local exponent over a window: -[ln E(t_hi) - ln E(t_lo)] / ln(t_hi / t_lo).

    E = L - L_inf, interpolated linearly in (ln t, ln E). The exponent of the curve itself
    between the window ends (what a fit estimates, without the fit).
    """
    t, e = _positive_part(t, loss, loss_inf)
    lo, hi = _resolve_window(t, e, window)
    inside = (t >= lo) & (t <= hi)
    if np.any(e[inside] <= 0):
        raise NqfError("window_exponent: loss <= loss_inf inside the window")
    x0, x1 = math.log(lo), math.log(hi)
    return float(-(_log_interp(t, e, x1) - _log_interp(t, e, x0)) / (x1 - x0))


def _resolve_window(t, e, window, floor: float = 0.0):
    if window is None:
        return _auto_window(t, e, floor)
    lo, hi = float(window[0]), float(window[1])
    if not (0 < lo < hi):
        raise NqfError(f"fit_power_law: window must satisfy 0 < t_lo < t_hi, got {window}")
    if lo < t.min() or hi > t.max():
        raise NqfError(f"fit_power_law: window [{lo:.4g}, {hi:.4g}] is outside the data [{t.min():.4g}, {t.max():.4g}]")
    return lo, hi


def _auto_window(t, e, floor: float = 0.0):
    """From the first time E <= E_first / 100 (past the initial plateau) to the last time
    E >= 100 max(E_min, floor) (before the finite-size cutoff; ``floor``: the excess loss's
    rounding level, so that the end is not read in rounding noise)."""
    pos = e > 0
    if pos.sum() < 3:
        raise NqfError("fit_power_law: fewer than 3 samples with loss > loss_inf")
    e_first, e_min = e[pos][0], max(float(e[pos].min()), floor)
    start = np.flatnonzero(pos & (e <= e_first / 100.0))
    stop = np.flatnonzero(pos & (e >= 100.0 * e_min))
    if start.size == 0 or stop.size == 0 or t[stop[-1]] <= t[start[0]]:
        raise NqfError("fit_power_law: no automatic window (the excess loss spans < 4 decades); pass window=")
    return float(t[start[0]]), float(t[stop[-1]])


@dataclass(frozen=True)
class PowerLawFit:
    """Least-squares power law L - L_inf = A t^-exponent on a window.

    Attributes:
        exponent: fitted beta; ci: (lo, hi) its confidence interval.
        prefactor: A.
        window: (t_lo, t_hi); decades: log10(t_hi / t_lo).
        num_points: points used (evenly spaced in ln t); effective_points: after the
            AR(1) autocorrelation correction, n (1 - rho) / (1 + rho), at least 3.
        residual_autocorrelation: lag-1 autocorrelation rho of the residuals.
        max_residual: max |residual| of ln(L - L_inf); relative_residual: that divided by
            the range of ln(L - L_inf) over the window.
        exponent_drift: |change of the local exponent across the window| from a quadratic fit
            in ln t, divided by max(|exponent|, 0.1).
        is_power_law: the verdict; reason: why.
    """

    exponent: float
    ci: tuple[float, float]
    prefactor: float
    window: tuple[float, float]
    decades: float
    num_points: int
    effective_points: float
    residual_autocorrelation: float
    max_residual: float
    relative_residual: float
    exponent_drift: float
    is_power_law: bool
    reason: str


_ROUNDING_ULPS = 1e4


def fit_power_law(
    t: Float[ArrayLike, " T"],
    loss: Float[ArrayLike, " T"],
    loss_inf: float = 0.0,
    window: tuple[float, float] | None = None,
    *,
    num_points: int = 64,
    confidence: float = 0.95,
    min_decades: float = 1.0,
    max_relative_residual: float = 0.05,
    max_drift: float = 0.2,
) -> PowerLawFit:
    """Fit L(t) - L_inf ~ A t^-beta on a window and judge whether it is a power law.

    Method: ln(L - L_inf) is interpolated (linearly in ln t) at ``num_points`` points evenly
    spaced in ln t over the window and fitted by least squares to a + b ln t, beta = -b.
    A deterministic curve's residuals are not independent: the slope's standard error is
    inflated by sqrt((1 + rho) / (1 - rho)) (rho = lag-1 residual autocorrelation) and the
    interval uses a t-distribution with effective_points - 2 degrees of freedom, so a
    smooth but curved or stepped curve gets an honest (wide) interval.

    Verdict: a power law if the window spans >= ``min_decades`` decades of t, the largest
    residual is <= ``max_relative_residual`` of the range of ln(L - L_inf) (steps/plateaus
    fail this) and the local exponent drifts across the window by <= ``max_drift``
    relative (curvature, e.g. an exponential decay, fails this).

    Args:
        t: (T,) times; loss: (T,) losses; loss_inf: asymptotic loss (L - L_inf > 0 in window).
        window: (t_lo, t_hi) or None for automatic (see ``_auto_window``).
    Returns:
        PowerLawFit.
    """
    if int(num_points) < 8:
        raise NqfError("fit_power_law: num_points must be >= 8")
    if not (0 < confidence < 1):
        raise NqfError("fit_power_law: confidence must lie in (0, 1)")
    t, e = _positive_part(t, loss, loss_inf)
    if t.size < 3:
        raise NqfError("fit_power_law: need at least 3 samples with t > 0")
    # L - L_inf of curves computed in float64 is noise below about 1e4 u max|L| (a long flow's
    # accumulated rounding): an automatic window ends above that, not where rounding puts E_min
    scale = max(float(np.max(np.abs(np.asarray(loss, dtype=np.float64)))), abs(float(loss_inf)))
    lo, hi = _resolve_window(t, e, window, _ROUNDING_ULPS * np.finfo(np.float64).eps * scale)
    n = int(num_points)
    x, y = _window_points(t, e, lo, hi, n)
    line = _line_fit(x, y, confidence)
    shape = _shape(x, y, line["resid"], lo, hi)
    ok, reason = _verdict(shape, min_decades, max_relative_residual, max_drift)
    return PowerLawFit(
        exponent=float(line["beta"]),
        ci=(float(line["ci"][0]), float(line["ci"][1])),
        prefactor=float(math.exp(line["intercept"])),
        window=(lo, hi),
        decades=shape["decades"],
        num_points=n,
        effective_points=float(line["n_eff"]),
        residual_autocorrelation=line["rho"],
        max_residual=shape["max_res"],
        relative_residual=shape["rel_res"],
        exponent_drift=float(shape["drift"]),
        is_power_law=ok,
        reason=reason,
    )


def _window_points(t, e, lo: float, hi: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): n points x evenly spaced in ln t over [lo, hi] and y = ln(L - L_inf) there,
    interpolated linearly in (ln t, ln E) from the samples (t, e) (T,); NqfError where E <= 0."""
    inside = (t >= lo) & (t <= hi)
    # the samples bracketing the window are used by the interpolation too
    first = max(np.flatnonzero(t >= lo)[0] - 1, 0)
    last = min(np.flatnonzero(t <= hi)[-1] + 1, t.size - 1)
    if np.any(e[first : last + 1] <= 0) or np.any(e[inside] <= 0):
        raise NqfError("fit_power_law: loss <= loss_inf inside the window; check loss_inf")
    x = np.linspace(math.log(lo), math.log(hi), n)
    y = _log_interp(t[first : last + 1], e[first : last + 1], x)
    return x, y


def _line_fit(x: np.ndarray, y: np.ndarray, confidence: float) -> dict:
    """Least squares y = intercept + slope x, beta = -slope, with the ``confidence`` interval of
    beta widened for the residuals' lag-1 autocorrelation rho (``fit_power_law``'s docstring).

    Returns {"beta", "ci", "intercept", "resid" (n,), "rho", "n_eff"}.
    """
    # Student's t quantile from scipy.special (0.1 s of import where scipy.stats's t.ppf, the same
    # function, took 0.9-1.7 s in a fresh process without bytecode)
    from scipy.special import stdtrit

    n = x.size
    xc = x - x.mean()
    sxx = xc @ xc
    slope = (xc @ (y - y.mean())) / sxx
    intercept = y.mean() - slope * x.mean()
    resid = y - (intercept + slope * x)
    rss = resid @ resid
    sigma2 = rss / (n - 2)
    se = math.sqrt(sigma2 / sxx)
    rho = float((resid[:-1] @ resid[1:]) / rss) if rss > 0 else 0.0
    rho_pos = min(max(rho, 0.0), 0.999999)
    n_eff = max(n * (1.0 - rho_pos) / (1.0 + rho_pos), 3.0)
    se_adj = se * math.sqrt(n / n_eff)
    tcrit = float(stdtrit(max(n_eff - 2.0, 1.0), 0.5 + 0.5 * confidence))
    beta = -slope
    ci = (beta - tcrit * se_adj, beta + tcrit * se_adj)
    return {"beta": beta, "ci": ci, "intercept": intercept, "resid": resid, "rho": rho, "n_eff": n_eff}


def _shape(x: np.ndarray, y: np.ndarray, resid: np.ndarray, lo: float, hi: float) -> dict:
    """How far the points (x, y) are from a straight line: {"drift" (of the local exponent, from a
    quadratic fit, relative), "max_res", "rel_res" (largest |residual|, also over the range of y),
    "decades" (of the window [lo, hi]), "local" (n,) (the local exponent), "monotone" (whether it
    moves one way: a bend, not steps)}."""
    # curvature: local slope b1 + 2 b2 (x - xbar) of a quadratic fit
    b2, b1, b0 = np.polyfit(x - x.mean(), y, 2)
    span = x[-1] - x[0]
    drift = abs(2.0 * b2 * span) / max(abs(b1), 0.1)
    y_range = float(y.max() - y.min())
    max_res = float(np.abs(resid).max())
    rel_res = max_res / y_range if y_range > 0 else math.inf
    decades = math.log10(hi / lo)
    # Is the departure a monotone bend (curvature) or an oscillation of the local exponent
    # (steps and plateaus)? Compare the net change of the local exponent with its total variation.
    local = -np.gradient(y, x)
    total_variation = float(np.abs(np.diff(local)).sum())
    monotone = total_variation == 0 or abs(local[-1] - local[0]) >= 0.8 * total_variation
    return {
        "drift": drift,
        "max_res": max_res,
        "rel_res": rel_res,
        "decades": decades,
        "local": local,
        "monotone": monotone,
    }


def _verdict(shape: dict, min_decades: float, max_relative_residual: float, max_drift: float) -> tuple[bool, str]:
    """(is a power law, why) from :func:`_shape`'s numbers and ``fit_power_law``'s limits."""
    decades, drift, rel_res, local = shape["decades"], shape["drift"], shape["rel_res"], shape["local"]
    problems = []
    if decades < min_decades:
        problems.append(f"window spans only {decades:.2f} decades of t (< {min_decades})")
    if drift > max_drift or rel_res > max_relative_residual:
        detail = (
            f"residuals reach {100 * rel_res:.1f}% of the ln-loss range (limit {100 * max_relative_residual:.0f}%), "
            f"exponent drift {100 * drift:.0f}% (limit {100 * max_drift:.0f}%)"
        )
        if shape["monotone"]:
            problems.append(
                f"curved on log-log axes (e.g. exponential decay): the local exponent moves monotonically from "
                f"{local[0]:.3g} to {local[-1]:.3g}; {detail}"
            )
        else:
            problems.append(
                f"steps or plateaus: the local exponent oscillates between {local.min():.3g} and {local.max():.3g}; "
                f"{detail}"
            )
    if problems:
        return False, "not a power law: " + "; ".join(problems)
    return (
        True,
        f"power law: straight on log-log axes over {decades:.2f} decades, residuals <= {100 * rel_res:.1f}% "
        f"of the ln-loss range, local exponent drift {100 * drift:.0f}%",
    )
