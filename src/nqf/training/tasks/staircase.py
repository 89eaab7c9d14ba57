"""Task ``staircase``: a linear teacher with a few well-separated modes (natural architecture: mlp)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .linear_teacher import LinearTeacher


@dataclass(frozen=True)
class Staircase(LinearTeacher):
    """Linear teacher with a few well-separated modes: y = U diag(s) V^T x.

    Defaults: K = 4 outputs, D = 8 inputs, s = (3, 2, 1, 0.5), N = 256 whitened samples
    (X^T X / N = I exactly). For the tanh perceptron (sigma'(0) = 1) the modes
    q_k = (u_k, v_k)/sqrt 2 have c_k = s_k / 2, fixed-point occupations m_k* = 2 s_k
    and plateau losses (1/2) sum_{j>k} s_j^2 (docs/theory.md section 3, worked case).
    ``correlation`` rho != 0 gives inputs with second moment rho^|i-j| (exact when
    whitened), so C and K no longer share an eigenbasis.
    """

    name: ClassVar[str] = "staircase"
    inputs: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    whiten: bool = True
    correlation: float = 0.0
    activation: str = "tanh"

    def natural_architecture(self):
        return "mlp", {"inputs": self.inputs, "outputs": self.outputs, "activation": self.activation}
