"""Task ``fourier``: stationary signals for circular convolution (natural architecture: conv1d)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nqf.core.errors import NqfError

from .base import Task, check_float, symmetric_power, whiten_to


@dataclass(frozen=True)
class Fourier(Task):
    """Translation-invariant signals for circular convolution with a per-position readout.

    x in R^L is Gaussian and stationary: its second moment is the circulant Sigma with
    eigenvalues P(f) = (1 + |f|)^-alpha, |f| = min(f, L - f) (cos/sin pairs share P).
    With ``exact`` the sample second moment is made exactly Sigma. The target is
    y = x_0, so E[y x_m] = Sigma_m0 and the coupling of conv1d (kernel = L, circular,
    readout per position) is the circular Hankel matrix C_{pj} = sigma'(0)/2 Sigma_{(p+j) mod L, 0}
    whose singular values are sigma'(0) P(f) / 2: the modes are the Fourier
    frequencies, with c_f = sigma'(0) P(f) / 2 (docs/theory.md section 1, convolution).
    """

    name: ClassVar[str] = "fourier"
    length: int = 16
    alpha: float = 1.0
    samples: int = 1024
    exact: bool = True
    activation: str = "tanh"

    def _check_options(self):
        self._check_counts("length", "samples")
        check_float(self.name, "alpha", self.alpha, 0.0, math.inf)
        if self.exact and self.samples < self.length:
            raise NqfError(f"task {self.name}: exact covariance needs samples >= length ({self.length})")

    def power_spectrum(self) -> np.ndarray:
        """P(f) for f = 0..L-1 (frequency order)."""
        f = np.arange(self.length)
        return (1.0 + np.minimum(f, self.length - f)) ** (-self.alpha)

    def covariance(self) -> np.ndarray:
        """The circulant Sigma_ij = c((i - j) mod L), c = inverse DFT of P."""
        c = np.real(np.fft.ifft(self.power_spectrum()))
        idx = np.arange(self.length)
        return c[(idx[:, None] - idx[None, :]) % self.length]

    def _draw(self, rng):
        Z = rng.standard_normal((self.samples, self.length))
        Sigma = self.covariance()
        X = whiten_to(Z, Sigma) if self.exact else Z @ symmetric_power(Sigma, 0.5)
        return X, X[:, :1].copy()

    def spectrum(self, key=0) -> np.ndarray:
        from nqf.architectures.activations import activation_derivatives

        slope = activation_derivatives(self.activation)[0]
        return np.sort(0.5 * slope * self.power_spectrum())[::-1]

    def natural_architecture(self):
        return "conv1d", {
            "length": self.length,
            "kernel": self.length,
            "padding": "circular",
            "readout": "position",
            "outputs": 1,
            "activation": self.activation,
        }
