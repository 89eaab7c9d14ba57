"""The measurements a comparison reads off a run: plateau losses, relative errors, the
closure window (the definitions are in ``nqf.comparison.compare``'s docstring)."""

from __future__ import annotations

import math

import numpy as np

from nqf.core.measure import measured_plateau_losses as measured_plateau_losses  # defined there, re-exported
from nqf.core.measure import switch_steps


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
