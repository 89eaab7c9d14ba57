r"""E4's settings (:class:`PowerLawConfig`) and the constants of its fits."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nqf.core.errors import NqfError

CONFIDENCE = 0.95
RESIDUAL_LIMIT = 0.05  # fit_power_law's default max_relative_residual
MODELS = {"quadratic": "quadratic model", "network": "network"}


@dataclass(frozen=True)
class PowerLawConfig:
    """E4's settings; see the module docstring."""

    alphas: tuple[float, ...] = (1.0, 1.5, 2.0)
    lv_modes: int = 100_000
    lv_m0: float = 1e-12
    lv_lr: float = 0.05
    lv_window_modes: tuple[int, int] = (10, 1000)
    lv_points: int = 1500
    train_alpha: float = 1.5
    train_modes: int = 64
    train_scale: float = 1.0
    train_samples: int = 64
    train_window_modes: tuple[int, int] = (4, 25)
    train_models: tuple[str, ...] = ("quadratic", "network")
    train_width: int = 128
    train_sigma0: float = 5e-5
    train_lr: float = 0.5
    data_seed: int = 0
    seed: int = 0
    trained_tolerance: float = 0.05

    def __post_init__(self) -> None:
        if not self.alphas or any(not (math.isfinite(a) and a > 0.5) for a in self.alphas):
            raise NqfError(f"E4: alphas must be numbers > 1/2 (a summable loss), got {self.alphas!r}")
        if len(set(self.alphas)) != len(self.alphas):
            raise NqfError(f"E4: alphas must be distinct, got {self.alphas!r}")
        lo, hi = self.lv_window_modes
        if not (1 <= lo < hi <= self.lv_modes):
            raise NqfError(f"E4: lv_window_modes must satisfy 1 <= lo < hi <= lv_modes, got {self.lv_window_modes!r}")
        if not (0 < self.lv_m0 < 1e-2):
            raise NqfError(f"E4: lv_m0 must lie in (0, 1e-2), got {self.lv_m0!r}")
        if not (self.lv_lr > 0 and self.train_lr > 0 and self.train_scale > 0):
            raise NqfError("E4: learning rates and train_scale must be positive")
        if self.lv_points < 100:
            raise NqfError(f"E4: lv_points must be >= 100, got {self.lv_points!r}")
        lo, hi = self.train_window_modes
        if not (1 <= lo < hi <= self.train_modes):
            raise NqfError(f"E4: train_window_modes must satisfy 1 <= lo < hi <= train_modes, got {(lo, hi)!r}")
        if not self.train_models or any(m not in MODELS for m in self.train_models):
            raise NqfError(f"E4: train_models must be among {', '.join(MODELS)}, got {self.train_models!r}")
        if len(set(self.train_models)) != len(self.train_models):
            raise NqfError(f"E4: train_models must be distinct, got {self.train_models!r}")
        if self.train_samples < self.train_modes:
            raise NqfError(f"E4: whitening needs train_samples >= train_modes ({self.train_modes})")
        if self.train_width < 1 or not (0 < self.train_sigma0 < 1):
            raise NqfError("E4: train_width must be >= 1 and train_sigma0 in (0, 1)")
        if self.train_lr * self.train_scale >= 1.0:
            raise NqfError("E4: GD on mode 1 is unstable for train_lr * train_scale >= 1 (|1 - 4 lr c_1| >= 1)")
        if self.train_width * self.train_sigma0**2 >= 0.1 * 2 * self.train_scale * self.train_modes**-self.train_alpha:
            raise NqfError("E4: train_sigma0 too large: the last mode would start near saturation")
        if self.seed < 0 or self.data_seed < 0:
            raise NqfError("E4: seeds must be >= 0")
        if not self.trained_tolerance > 0:
            raise NqfError("E4: trained_tolerance must be positive")

    @classmethod
    def quick(cls) -> PowerLawConfig:
        return cls(lv_modes=10_000)

    @classmethod
    def full(cls) -> PowerLawConfig:
        return cls()
