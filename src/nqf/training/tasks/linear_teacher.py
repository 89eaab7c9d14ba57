"""The linear teacher y = T x shared by the staircase, powerlaw and experts tasks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from nqf.core.errors import NqfError

from .base import Task, check_float, svd_teacher, symmetric_power, task_rng, whiten_to


@dataclass(frozen=True)
class LinearTeacher(Task):
    """y = T x with T = U diag(s) V^T (U: K x r, V: D x r Haar-random orthonormal columns).

    Inputs are Gaussian; with ``whiten`` the sample second moment is made exactly
    Sigma (Sigma = I unless ``correlation`` rho != 0, then Sigma_ij = rho^|i-j|). The
    teacher is drawn first from the key, then the inputs, so the teacher does not
    depend on the number of samples.
    """

    if TYPE_CHECKING:  # options every subclass declares as dataclass fields, with their defaults
        inputs: int
        outputs: int
        samples: int
        whiten: bool
        correlation: float
        activation: str
        singular_values: tuple[float, ...] = ()  # all but powerlaw (its own _singular_values)

    _counts: ClassVar[tuple[str, ...]] = ("inputs", "outputs", "samples")  # positive integers, checked in order

    def _singular_values(self) -> np.ndarray:
        return np.asarray(self.singular_values, dtype=np.float64)

    def _check_options(self):
        self._check_values("singular_values")
        self._check_linear()

    def _check_linear(self):
        self._check_counts(*self._counts)
        check_float(self.name, "correlation", self.correlation, -1.0, 1.0, open_=True)
        D, K, r = self.inputs, self.outputs, len(self._singular_values())
        if r > min(D, K):
            raise NqfError(f"task {self.name}: {r} singular values need inputs and outputs >= {r} (got {D}, {K})")
        if self.whiten and self.samples < D:
            raise NqfError(f"task {self.name}: whitening needs samples >= inputs ({D}), got {self.samples}")

    def input_covariance(self) -> np.ndarray:
        """Sigma: rho^|i-j|, or I when rho = 0."""
        if self.correlation == 0:
            return np.eye(self.inputs)
        idx = np.arange(self.inputs)
        return self.correlation ** np.abs(idx[:, None] - idx[None, :])

    def teacher(self, key=0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U (K, r), s (r,), V (D, r)) with T = U diag(s) V^T, float64 NumPy."""
        return self._teacher(task_rng(key))

    def _teacher(self, rng):
        return svd_teacher(rng, self.outputs, self.inputs, self._singular_values())

    def _draw(self, rng):
        U, s, V = self._teacher(rng)
        Z = rng.standard_normal((self.samples, self.inputs))
        Sigma = self.input_covariance()
        if self.whiten:
            X = whiten_to(Z, None if self.correlation == 0 else Sigma)
        else:
            X = Z @ symmetric_power(Sigma, 0.5)
        Y = X @ (V * s) @ U.T  # rows y_n = T x_n
        return X, Y

    def _slope(self) -> float:
        from nqf.architectures.activations import activation_derivatives

        return activation_derivatives(self.activation)[0]

    def _gate(self) -> float:
        return 1.0

    def spectrum(self, key=0) -> np.ndarray:
        """c_k = g0 sigma'(0)/2 times the singular values of E[y x^T] = T Sigma.

        For uncorrelated whitened inputs these are g0 sigma'(0) s_k / 2, exact for the
        sample; with correlated inputs they depend on the teacher (``key``) and C no
        longer shares its eigenbasis with K.
        """
        coeff = 0.5 * self._gate() * self._slope()
        if self.correlation == 0:
            return coeff * np.sort(self._singular_values())[::-1]
        U, s, V = self.teacher(key)
        return coeff * np.linalg.svd((U * s) @ V.T @ self.input_covariance(), compute_uv=False)[: len(s)]

    def fixed_point_occupations(self) -> np.ndarray:
        """m_k* = 2 s_k / (g0 sigma'(0)): the occupation at which the quadratic model fits mode k.

        With q_k = (u_k, v_k)/sqrt 2 the model's map is g0 sigma'(0) sum_k m_k u_k v_k^T / 2.
        """
        return 2.0 * np.asarray(self._singular_values()) / (self._gate() * self._slope())

    def plateau_losses(self) -> np.ndarray | None:
        """L_j = (1/2) sum_{k>j} s_k^2 for j = 0..r: the loss with the first j modes learned.

        Exact for the sample when the inputs are whitened and uncorrelated; None otherwise.
        """
        if not self.whiten or self.correlation != 0:
            return None
        s2 = np.asarray(self._singular_values()) ** 2
        return 0.5 * np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])

    def _layout(self) -> tuple[int, int, int]:
        """(offset of the readout block a, offset of the input-weight block v, d)."""
        D, K = self.inputs, self.outputs
        return 0, K, K + D

    def mode_basis(self, key=0) -> np.ndarray:
        """The growing modes q_k = (u_k, v_k)/sqrt 2 in the natural architecture's W layout, (d, r)."""
        U, s, V = self.teacher(key)
        a0, v0, d = self._layout()
        K, D = self.outputs, self.inputs
        Q = np.zeros((d, len(s)))
        Q[a0 : a0 + K] = U / math.sqrt(2)
        Q[v0 : v0 + D] = V / math.sqrt(2)
        return Q
