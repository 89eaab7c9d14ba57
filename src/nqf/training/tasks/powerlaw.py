"""Task ``powerlaw``: a linear teacher with power-law singular values (natural architecture: mlp)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import check_float
from .linear_teacher import LinearTeacher


@dataclass(frozen=True)
class PowerLaw(LinearTeacher):
    """Linear teacher with many modes, s_k = scale * k^-alpha for k = 1..modes.

    For the tanh perceptron c_k = s_k / 2 ~ k^-alpha and K is diagonal (K_kk = 1/4), so
    the loss decays as a power law in the singular limit (docs/theory.md section 4,
    gamma = 0: L - L_inf ~ (t/eps)^-(2 - 1/alpha)).
    """

    name: ClassVar[str] = "powerlaw"
    modes: int = 32
    alpha: float = 1.0
    scale: float = 1.0
    inputs: int = 32
    outputs: int = 32
    samples: int = 512
    whiten: bool = True
    correlation: float = 0.0
    activation: str = "tanh"

    def _check_options(self):
        self._check_counts("modes")
        check_float(self.name, "alpha", self.alpha, 0.0, math.inf, open_=True)
        check_float(self.name, "scale", self.scale, 0.0, math.inf, open_=True)
        self._check_linear()

    def _singular_values(self):
        return self.scale * np.arange(1, self.modes + 1, dtype=np.float64) ** (-self.alpha)

    def natural_architecture(self):
        return "mlp", {"inputs": self.inputs, "outputs": self.outputs, "activation": self.activation}
