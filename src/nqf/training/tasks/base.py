"""The task base class and the helpers the tasks share.

Seeds and keys to NumPy generators, Haar-random orthogonal matrices, exact whitening,
the cast to the requested dtype, and the option checks (one ``NqfError`` line each).
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
from nqf.core.errors import NqfError
from nqf.core.precision import resolve_dtype

# -- helpers ---------------------------------------------------------------------------


def _rng(key) -> np.random.Generator:
    """A NumPy generator from an int seed or a JAX PRNG key (typed or raw uint32)."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if key < 0:
            raise NqfError(f"seed must be >= 0, got {key}")
        return np.random.default_rng(int(key))
    try:
        arr = jnp.asarray(key)
        if jnp.issubdtype(arr.dtype, jax.dtypes.prng_key):
            arr = jax.random.key_data(arr)
        words = np.asarray(arr).astype(np.uint64).ravel().tolist()
    except (TypeError, ValueError):
        raise NqfError(f"key must be an int seed or a JAX PRNG key, got {type(key).__name__}") from None
    return np.random.default_rng(words)


def _orthogonal(rng: np.random.Generator, size: int) -> np.ndarray:
    """Haar-random orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    q, r = np.linalg.qr(rng.standard_normal((size, size)))
    return q * np.sign(np.diag(r))


def _sym_power(S: np.ndarray, power: float) -> np.ndarray:
    """S^power for a symmetric positive definite S."""
    vals, vecs = np.linalg.eigh(S)
    return (vecs * vals**power) @ vecs.T


def _whiten_to(Z: np.ndarray, target: np.ndarray | None) -> np.ndarray:
    """Z (N, D) mapped linearly so that its sample second moment is exactly ``target`` (I when None)."""
    S = Z.T @ Z / Z.shape[0]
    X = Z @ _sym_power(S, -0.5)
    return X if target is None else X @ _sym_power(target, 0.5)


def _toeplitz_correlation(D: int, rho: float) -> np.ndarray:
    idx = np.arange(D)
    return rho ** np.abs(idx[:, None] - idx[None, :])


def _cast(dtype, *arrays: np.ndarray) -> tuple[jax.Array, ...]:
    dt = resolve_dtype(dtype)
    return tuple(jnp.asarray(np.asarray(a, dtype=np.float64), dtype=dt) for a in arrays)


def _positive_int(task: str, option: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise NqfError(f"task {task}: option {option} must be a positive integer, got {value!r}")
    return int(value)


def _positive_values(task: str, option: str, values) -> tuple[float, ...]:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise NqfError(f"task {task}: option {option} must be a list of numbers, got {values!r}") from None
    if not out or any(not math.isfinite(v) or v <= 0 for v in out):
        raise NqfError(f"task {task}: option {option} must be positive finite numbers, got {values!r}")
    return out


def _check_float(task: str, option: str, value, low: float = -math.inf, high: float = math.inf, open_: bool = False):
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

    def _draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def generate(self, key=0, dtype=None) -> tuple[jax.Array, jax.Array]:
        """Draw the data set: X (N, *input_shape), Y (N, K), both of ``dtype``."""
        dt = resolve_dtype(dtype)  # fail before drawing
        X, Y = self._draw(_rng(key))
        Xc, Yc = _cast(dt, X, Y)
        return Xc, Yc

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
