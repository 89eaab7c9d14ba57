"""Task ``experts``: the staircase teacher for a mixture of experts (natural architecture: moe)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .linear_teacher import LinearTeacher


@dataclass(frozen=True)
class Experts(LinearTeacher):
    """The staircase teacher y = U diag(s) V^T x, learned by a mixture of experts.

    Experts h = a sigma(v.x) as units with a softmax gate; the width must equal
    ``experts`` = E. At w = 0 the gate is uniform (g0 = 1/E), so the modes are the
    staircase's with c_k = sigma'(0) s_k / (2E) and m_k* = 2 E s_k / sigma'(0): E times
    slower escape than the plain perceptron. Mode vectors live on the [a, u, v] layout
    as (u_k, 0, v_k)/sqrt 2 (the gate block u is not excited at second order).
    """

    name: ClassVar[str] = "experts"
    inputs: int = 8
    outputs: int = 4
    experts: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    whiten: bool = True
    correlation: float = 0.0
    activation: str = "tanh"
    _counts: ClassVar[tuple[str, ...]] = ("experts", "inputs", "outputs", "samples")

    def _gate(self) -> float:
        return 1.0 / self.experts

    def _layout(self):
        # moe flattens [a (K), u (D), v (D)]
        K, D = self.outputs, self.inputs
        return 0, K + D, K + 2 * D

    def natural_architecture(self):
        return "moe", {
            "inputs": self.inputs,
            "outputs": self.outputs,
            "experts": self.experts,
            "activation": self.activation,
            "routing": "softmax",
        }
