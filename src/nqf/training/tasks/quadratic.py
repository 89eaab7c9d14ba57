"""Task ``quadratic``: a quadratic teacher y = x^T Q x (natural architecture: mlp-fixed, square)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nqf.core.errors import NqfError

from .base import Task, random_orthogonal, task_rng


@dataclass(frozen=True)
class Quadratic(Task):
    """Quadratic teacher y = x^T Q x, Q = R diag(lambda) R^T (R Haar-random), x ~ N(0, I_D).

    For fixed-readout units with sigma''(0) = 1 (``square``: z^2/2) A(x) = x x^T / 2 and
    the model is f = x^T M x / 2, fitted by M* = 2 Q. Population moments (Gaussian x,
    Isserlis): C = E[y A] = Q + Tr(Q)/2 I and K[P_j] = (2 P_j + I)/4, so in Q's
    eigenbasis c_k = lambda_k + Tr(Q)/2 (every direction, also those with lambda = 0,
    starts growing at rate Tr(Q)/2), K_kj = (2 delta_kj + 1)/4, m_k* = 2 lambda_k.
    The sample moments differ from these by O(1/sqrt N). y is not centred.
    """

    name: ClassVar[str] = "quadratic"
    inputs: int = 8
    eigenvalues: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 2048

    def _check_options(self):
        self._check_values("eigenvalues")
        self._check_counts("inputs", "samples")
        if len(self.eigenvalues) > self.inputs:
            raise NqfError(
                f"task {self.name}: {len(self.eigenvalues)} eigenvalues need inputs >= that, got {self.inputs}"
            )

    def teacher(self, key=0) -> np.ndarray:
        """Q (D, D), float64 NumPy."""
        return self._teacher(task_rng(key))

    def _teacher(self, rng):
        R = random_orthogonal(rng, self.inputs)[:, : len(self.eigenvalues)]
        return (R * np.asarray(self.eigenvalues)) @ R.T

    def _draw(self, rng):
        Q = self._teacher(rng)
        X = rng.standard_normal((self.samples, self.inputs))
        Y = np.einsum("ni,ij,nj->n", X, Q, X)[:, None]
        return X, Y

    def spectrum(self, key=0) -> np.ndarray:
        """Population c_k = lambda_k + Tr(Q)/2 (lambda padded with zeros to D), decreasing."""
        lam = np.zeros(self.inputs)
        lam[: len(self.eigenvalues)] = self.eigenvalues
        return np.sort(lam + 0.5 * lam.sum())[::-1]

    def fixed_point_occupations(self) -> np.ndarray:
        """m_k* = 2 lambda_k on Q's eigenvectors (population)."""
        return 2.0 * np.asarray(self.eigenvalues)

    def natural_architecture(self):
        return "mlp-fixed", {"inputs": self.inputs, "activation": "square"}
