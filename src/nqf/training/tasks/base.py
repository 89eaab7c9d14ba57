"""The task base class and the helpers the tasks share.

Seeds and keys to NumPy generators, Haar-random orthogonal matrices, exact whitening,
and the option checks (one ``NqfError`` line each).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.core.arguments import check_seed
from nqf.core.errors import NqfError
from nqf.core.precision import resolve_dtype

# -- helpers ---------------------------------------------------------------------------


def task_rng(key) -> np.random.Generator:
    """A NumPy generator from an int seed (``check_seed``: an integer in [0, 2^32 - 1]) or a JAX
    PRNG key (typed, or raw non-negative integer words); a float, a bool or a negative number is
    no seed."""
    if np.ndim(key) == 0:  # a scalar: a seed, checked, never truncated (1.5 is no seed 1)
        if not isinstance(key, jax.Array) or not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            return np.random.default_rng(check_seed("seed", key))
    try:
        arr = jnp.asarray(key)
        if jnp.issubdtype(arr.dtype, jax.dtypes.prng_key):
            arr = jax.random.key_data(arr)
        words = np.asarray(arr)
    except (TypeError, ValueError):
        words = None
    if words is None or words.dtype.kind not in "iu" or (words.size and words.min() < 0):
        raise NqfError(f"key must be an int seed or a JAX PRNG key, got {type(key).__name__}")
    return np.random.default_rng(words.astype(np.uint64).ravel().tolist())


def random_orthogonal(rng: np.random.Generator, size: int) -> np.ndarray:
    """Haar-random orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    q, r = np.linalg.qr(rng.standard_normal((size, size)))
    return q * np.sign(np.diag(r))


def svd_teacher(rng: np.random.Generator, outputs: int, inputs: int, s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(U (K, r), s (r,), V (D, r)) of a teacher T = U diag(s) V^T: U drawn first, then V."""
    s = np.asarray(s, dtype=np.float64)
    return random_orthogonal(rng, outputs)[:, : len(s)], s, random_orthogonal(rng, inputs)[:, : len(s)]


def symmetric_power(S: np.ndarray, power: float) -> np.ndarray:
    """S^power for a symmetric positive definite S."""
    vals, vecs = np.linalg.eigh(S)
    return (vecs * vals**power) @ vecs.T


def whiten_to(Z: np.ndarray, target: np.ndarray | None) -> np.ndarray:
    """Z (N, D) mapped linearly so that its sample second moment is exactly ``target`` (I when None)."""
    S = Z.T @ Z / Z.shape[0]
    X = Z @ symmetric_power(S, -0.5)
    return X if target is None else X @ symmetric_power(target, 0.5)


def check_float(task: str, option: str, value, low: float = -math.inf, high: float = math.inf, open_: bool = False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise NqfError(f"task {task}: option {option} must be a number, got {value!r}") from None
    ok = (low < v < high) if open_ else (low <= v <= high)
    if not math.isfinite(v) or not ok:
        bounds = f"({low}, {high})" if open_ else f"[{low}, {high}]"
        raise NqfError(f"task {task}: option {option} must lie in {bounds}, got {value!r}")


# -- the base class --------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """Base class: a frozen task configuration (subclasses add the options as fields)."""

    name: ClassVar[str] = ""

    def __post_init__(self):
        """The checks every task shares (its boolean options), then the task's own (:meth:`_check_options`)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # a boolean option: True or False (or a NumPy bool); the string "false", 0 or None is refused
            if isinstance(f.default, bool):
                if not isinstance(value, (bool, np.bool_)):
                    raise NqfError(f"task {self.name}: option {f.name} must be true or false, got {value!r}")
                object.__setattr__(self, f.name, bool(value))
        self._check_options()

    def _check_options(self) -> None:
        """The task's own option checks (one NqfError line each); subclasses override it."""

    def _check_counts(self, *options: str) -> None:
        """Each of ``options`` a positive integer, checked in this order."""
        for option in options:
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise NqfError(f"task {self.name}: option {option} must be a positive integer, got {value!r}")

    def _check_values(self, option: str) -> None:
        """``option`` a non-empty list of positive finite numbers, kept as a tuple of floats."""
        values = getattr(self, option)
        try:
            out = tuple(float(v) for v in values)
        except (TypeError, ValueError):
            raise NqfError(f"task {self.name}: option {option} must be a list of numbers, got {values!r}") from None
        if not out or any(not math.isfinite(v) or v <= 0 for v in out):
            raise NqfError(f"task {self.name}: option {option} must be positive finite numbers, got {values!r}")
        object.__setattr__(self, option, out)

    def _draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def generate(self, key=0, dtype=None) -> tuple[jax.Array, jax.Array]:
        """Draw the data set: X (N, *input_shape), Y (N, K), both of ``dtype``."""
        dt = resolve_dtype(dtype)  # fail before drawing
        X, Y = self._draw(task_rng(key))
        return jnp.asarray(np.asarray(X, np.float64), dtype=dt), jnp.asarray(np.asarray(Y, np.float64), dtype=dt)

    def natural_architecture(self) -> tuple[str, dict[str, Any]]:
        """(registry name, options) of the architecture this task is made for."""
        raise NotImplementedError

    def architecture(self) -> Architecture:
        """The natural architecture, built from the registry."""
        from nqf.architectures import get_architecture

        name, options = self.natural_architecture()
        return get_architecture(name, **options)

    def spectrum(self, key=0) -> np.ndarray | None:
        """Positive eigenvalues c_k of C = E[y A(x)] for the natural architecture (decreasing), or None."""
        return None

    def options(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
