r"""E3's settings (:class:`SingularLimitConfig`) and the constants stated in advance: the
competing LV system, the tolerances that are not config fields, the curves' horizon."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nqf.core.errors import NqfError

from .._staircase import check_staircase

COMPETITION_C = (1.0, 0.6, 0.45, 0.2, 0.5)
COMPETITION_K = (
    (0.5, 0.0, 0.0, 0.0, 0.5),
    (0.0, 1.0, 0.45, 0.0, 0.0),
    (0.0, 0.45, 0.25, 0.0, 0.0),
    (0.0, 0.0, 0.0, 0.1, 0.0),
    (0.5, 0.0, 0.0, 0.0, 1.0),
)
COMPETITION_LOSS0 = 1.7
PUSHED_OUT = 1  # index of the mode that switches on and is later pushed out (mode 2)
ROUNDING_TOLERANCE = 0.05  # relative, last mode's trained step vs the exact GD map below the floor
SUPPRESSION_LEVEL = 1e-6  # suppressed modes' final occupation / solo equilibrium
HORIZON = 1.3  # curves and training run to HORIZON x the last limit step
OFF_DIAGONAL_ROUNDING = 1e-12  # K's relative off-diagonal mass below which it is diagonal up to rounding


@dataclass(frozen=True)
class SingularLimitConfig:
    """E3's settings; see the module docstring."""

    inputs: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    data_seed: int = 0
    seed: int = 0
    width: int = 32
    lr: float = 0.05
    sigma0s: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-6, 1e-8, 1e-12, 1e-16, 1e-20, 1e-24, 1e-30, 1e-40)
    rounding_floor: float = 1e-22
    plateau_sigma0: float = 1e-16
    competition_eps: tuple[float, ...] = (10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
    curve_points: int = 300
    slope_tolerance: float = 0.15
    plateau_tolerance: float = 1e-3

    def __post_init__(self) -> None:
        check_staircase("E3", self.singular_values, self.inputs, self.outputs, self.samples)
        if self.seed < 0 or self.data_seed < 0:
            raise NqfError(f"E3: seeds must be >= 0, got seed={self.seed!r}, data_seed={self.data_seed!r}")
        if self.width < 1:
            raise NqfError(f"E3: width must be >= 1, got {self.width!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise NqfError(f"E3: lr must be a positive number, got {self.lr!r}")
        scales = self.sigma0s
        if any(not (math.isfinite(s) and 0 < s) for s in scales) or len(set(scales)) != len(scales):
            raise NqfError(f"E3: sigma0s must be distinct positive numbers, got {scales!r}")
        if any(self.width * s * s >= 0.5 * min(self.singular_values) for s in scales):
            raise NqfError("E3: every sigma0 must start the modes well below saturation (n sigma0^2 < s_min / 2)")
        above = [s for s in scales if s >= self.rounding_floor]
        if len(above) < 3:
            raise NqfError(f"E3: need at least 3 sigma0s >= rounding_floor {self.rounding_floor:g} to fit a slope")
        if self.plateau_sigma0 not in scales or self.plateau_sigma0 < self.rounding_floor:
            raise NqfError(f"E3: plateau_sigma0 {self.plateau_sigma0:g} must be one of sigma0s, >= rounding_floor")
        if len(self.competition_eps) < 3 or any(not (math.isfinite(e) and e > 2) for e in self.competition_eps):
            raise NqfError(f"E3: competition_eps needs at least 3 values > 2, got {self.competition_eps!r}")
        if self.curve_points < 20:
            raise NqfError(f"E3: curve_points must be >= 20, got {self.curve_points!r}")
        if not (self.slope_tolerance > 0 and self.plateau_tolerance > 0):
            raise NqfError("E3: tolerances must be positive")

    @classmethod
    def quick(cls) -> SingularLimitConfig:
        return cls(sigma0s=(1e-2, 1e-4, 1e-8, 1e-16, 1e-30), competition_eps=(10.0, 20.0, 40.0, 80.0, 160.0))

    @classmethod
    def full(cls) -> SingularLimitConfig:
        return cls()
