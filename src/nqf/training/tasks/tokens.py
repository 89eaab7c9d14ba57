"""Task ``tokens``: token sequences for softmax attention (natural architecture: attention)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nqf.core.errors import NqfError

from .base import Task, check_float, svd_teacher, symmetric_power, task_rng


@dataclass(frozen=True)
class Tokens(Task):
    """Token sequences for softmax attention: y = T (xbar + q r), r = x_last - xbar decorrelated from xbar.

    x_t ~ N(0, I_D) i.i.d. tokens (T of them); the whole stack is transformed linearly
    so that the mean token xbar has sample second moment exactly I. The teacher
    T = U diag(s) V^T is the staircase's. At w = 0 attention is uniform and the head is
    a perceptron on xbar (docs/theory.md section 1), so the leading-order modes are the
    staircase's: c_k = s_k / 2, each repeated value_dim times (one copy per value
    channel). The second part (``query_weight`` q, default 0) depends on the last
    token beyond the mean; it is made exactly uncorrelated with xbar in the sample, so
    the quadratic form cannot see it: it stays in the loss (a plateau of
    (1/2) mean |q T r|^2) until the scores (fourth order in the weights) learn to
    attend to the query.
    """

    name: ClassVar[str] = "tokens"
    tokens: int = 8
    dim: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    query_weight: float = 0.0
    key_dim: int = 4
    value_dim: int = 4

    def _check_options(self):
        self._check_values("singular_values")
        self._check_counts("tokens", "dim", "outputs", "samples", "key_dim", "value_dim")
        check_float(self.name, "query_weight", self.query_weight)
        r = len(self.singular_values)
        if r > min(self.dim, self.outputs):
            raise NqfError(f"task {self.name}: {r} singular values need dim and outputs >= {r}")
        if self.samples < self.dim:
            raise NqfError(f"task {self.name}: whitening the mean token needs samples >= dim ({self.dim})")

    def teacher(self, key=0):
        """(U (K, r), s (r,), V (D, r)) with T = U diag(s) V^T."""
        return self._teacher(task_rng(key))

    def _teacher(self, rng):
        return svd_teacher(rng, self.outputs, self.dim, self.singular_values)

    def _draw(self, rng):
        U, s, V = self._teacher(rng)
        Xt = rng.standard_normal((self.samples, self.tokens, self.dim))
        xbar = Xt.mean(axis=1)
        Xt = Xt @ symmetric_power(xbar.T @ xbar / self.samples, -0.5)
        xbar = Xt.mean(axis=1)
        r = Xt[:, -1] - xbar
        r = r - xbar @ np.linalg.solve(xbar.T @ xbar, xbar.T @ r)  # exactly uncorrelated with xbar
        teacher = V @ np.diag(s) @ U.T  # x -> T x as a right-multiplication
        return Xt, (xbar + self.query_weight * r) @ teacher

    def spectrum(self, key=0) -> np.ndarray:
        return np.repeat(0.5 * np.sort(self.singular_values)[::-1], self.value_dim)

    def natural_architecture(self):
        return "attention", {
            "tokens": self.tokens,
            "dim": self.dim,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "outputs": self.outputs,
            "readout": "last",
        }
