"""Task ``digits``: scikit-learn's bundled 8x8 digits (natural architecture: mlp)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nqf.core.errors import NqfError

from .base import Task


@dataclass(frozen=True)
class Digits(Task):
    """scikit-learn's bundled 8x8 digits (1797 x 64, no download), 10 one-hot targets.

    Preprocessing: pixels / 16 (to [0, 1]); with ``standardize`` each pixel is then
    centred and scaled to unit variance over the samples used (pixels that are constant
    are set to 0); one-hot targets, with ``center_targets`` minus 1/10 so each row sums
    to 0 (the bias-free layer cannot fit a constant). ``samples`` < 1797 takes a
    random subset (from the key); no closed-form spectrum.
    """

    name: ClassVar[str] = "digits"
    samples: int | None = None
    standardize: bool = True
    center_targets: bool = True

    def _check_options(self):
        if self.samples is not None:
            self._check_counts("samples")
            if self.samples > 1797:
                raise NqfError(f"task {self.name}: the digits data set has 1797 samples, asked for {self.samples}")

    def _draw(self, rng):
        from sklearn.datasets import load_digits

        data = load_digits()
        X = np.asarray(data.data, dtype=np.float64) / 16.0
        labels = np.asarray(data.target)
        if self.samples is not None and self.samples < len(labels):
            pick = np.sort(rng.choice(len(labels), self.samples, replace=False))
            X, labels = X[pick], labels[pick]
        if self.standardize:
            std = X.std(axis=0)
            X = np.where(std > 0, (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0), 0.0)
        Y = np.eye(10)[labels]
        if self.center_targets:
            Y = Y - 0.1
        return X, Y

    def natural_architecture(self):
        return "mlp", {"inputs": 64, "outputs": 10, "activation": "tanh"}
