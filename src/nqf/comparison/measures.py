"""The measurements a comparison reads off a run: plateau losses, relative errors, the
closure window (the definitions are in ``nqf.comparison.compare``'s docstring)."""

from __future__ import annotations

import math

import numpy as np

from nqf.core.measure import switch_steps


def measured_plateau_losses(steps, loss, switch, horizon: float) -> np.ndarray:
    """Loss on the plateau after each switch: loss at sqrt(t_k t_next) (module docstring).

    steps: (R,) record steps; loss: (R,); switch: (g,) switch steps (NaN: never).
    t_next is the earliest switch step > t_k of any mode, else ``horizon``; t_k is floored
    at 1 (a log-time midpoint). The loss is linearly interpolated between records.
    Returns (g,), NaN where t_k is NaN or the loss there is not finite.
    """
    steps = np.asarray(steps, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    switch = np.asarray(switch, dtype=np.float64)
    out = np.full(switch.shape, np.nan)
    for k, t in enumerate(switch):
        if not math.isfinite(t):
            continue
        later = switch[np.isfinite(switch) & (switch > t)]
        t_next = float(later.min()) if later.size else float(horizon)
        at = math.sqrt(max(t, 1.0) * max(t_next, 1.0))
        out[k] = np.interp(at, steps, loss)
    return out


def relative(measured: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """(measured - reference) / reference elementwise; NaN / inf where the reference is 0 or NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(measured, dtype=np.float64) - reference) / reference


def closure_until(record_steps, occupations, m_star: np.ndarray, fraction: float, steps: int) -> int:
    """First step at which every mode of a run (occupations (R, g)) reached fraction * m_k*; else ``steps``."""
    reached = switch_steps(record_steps, occupations, fraction * m_star)
    if not np.all(np.isfinite(reached)):
        return int(steps)
    return int(min(steps, max(1, math.ceil(float(np.max(reached))))))
