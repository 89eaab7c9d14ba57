"""Task ``npz``: the user's own arrays X, Y from an .npz file (natural architecture: mlp when X is 2-D)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nqf.core.errors import NqfError

from .base import Task


@dataclass(frozen=True)
class Npz(Task):
    """The user's own data: arrays ``X`` (N, *input_shape) and ``Y`` (N,) or (N, K) in an .npz file.

    Samples come first in both. Missing file or keys, mismatched sample counts,
    non-numeric or non-finite values raise NqfError. The key is not used.
    """

    name: ClassVar[str] = "npz"
    path: str = ""

    def _check_options(self):
        if not isinstance(self.path, (str, os.PathLike)) or not str(self.path):
            raise NqfError("task npz: option path (the .npz file with arrays X and Y) is required")

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        """X, Y as float64 NumPy arrays (Y always 2-D), validated (``nqf.theory.data_matrices.build.read_npz``).

        Entries must be real (integers, booleans or floats), finite and at most
        ``MAX_ABS_ENTRY`` (1e30) in magnitude; the messages name the file and the array.
        """
        from nqf.theory.data_matrices.build import check_sample_arrays, read_npz

        path = str(self.path)
        arrays = read_npz(path, ("X", "Y"), owner="task npz: ")
        X, Y = arrays["X"], arrays["Y"]
        where = f"task npz: {path}"
        check_sample_arrays(where, X, Y)
        X, Y = X.astype(np.float64), Y.astype(np.float64)
        if Y.ndim == 1:
            Y = Y[:, None]
        if X.ndim < 2:
            raise NqfError(f"{where}: X must be (N, *input_shape), got shape {X.shape}")
        if Y.ndim != 2:
            raise NqfError(f"{where}: Y must be (N,) or (N, K), got shape {Y.shape}")
        if min(X.shape[1:]) == 0 or Y.shape[1] == 0:
            raise NqfError(f"{where}: X {X.shape} and Y {Y.shape} must have at least one number per sample")
        return X, Y

    def _draw(self, rng):
        return self.load()

    def natural_architecture(self):
        X, Y = self.load()
        if X.ndim != 2:
            raise NqfError(f"task npz: no natural architecture for inputs of shape {X.shape[1:]}; choose one")
        return "mlp", {"inputs": X.shape[1], "outputs": Y.shape[1], "activation": "tanh"}
