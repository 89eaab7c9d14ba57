"""The population route: exact data matrices of ``mlp`` for Gaussian inputs and a linear
teacher (:class:`PopulationDataMatrices`, no samples)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import no_type_check

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from nqf.architectures.activations import activation_derivatives
from nqf.architectures.architecture import Architecture
from nqf.core.errors import NqfError
from nqf.theory.data_matrices.checks import check_finite
from nqf.theory.data_matrices.protocol import AbstractDataMatrices


# A pytree: JAX rebuilds it with other leaves than arrays (a bool mask, ShapeDtypeStruct, ...), so
# jaxtyping's test-time checks (tests/conftest.py) skip it.
@no_type_check
@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PopulationDataMatrices(AbstractDataMatrices):
    r"""Exact population data matrices for ``mlp``: x ~ N(0, Sigma), y = T x, squared loss.

    With w = (a, v) (a: K readout, v: D input weights), s = sigma'(0) and
    A_c(x) = (s/2) [[0, e_c x^T], [x e_c^T, 0]], the model output is f = s M_av x with
    M_av the (a, v) block of M (K x D). Taking expectations over x:

        C    = (s/2)   [[0, T Sigma],    [Sigma T^T,    0]]
        K[M] = (s^2/2) [[0, M_av Sigma], [Sigma M_av^T, 0]]
        G(M) = K[M] - C = (s/2) [[0, E Sigma], [Sigma E^T, 0]],   E = s M_av - T
        L(M) = (1/2) Tr[E Sigma E^T]                     (exact, no constant dropped)

    Same interface as :class:`DataMatrices` except for the per-sample methods
    (``outputs``, minibatches), which have no population counterpart.
    """

    covariance: jax.Array  # Sigma, (D, D)
    teacher: jax.Array  # T, (K, D)
    slope: float = field(metadata=dict(static=True))  # s = sigma'(0)
    loss_type: str = field(default="squared", metadata=dict(static=True))

    @property
    def outputs_count(self) -> int:
        return self.teacher.shape[0]

    @property
    def dim(self) -> int:
        return self.teacher.shape[0] + self.teacher.shape[1]

    @property
    def dtype(self):
        return self.teacher.dtype

    def _av(self, M: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
        k = self.outputs_count
        return M[:k, k:]

    def _sym_block(self, B: jax.Array | np.ndarray) -> jax.Array:
        """[[0, B], [B^T, 0]] for B (K, D)."""
        k, dd = B.shape
        top = jnp.concatenate([jnp.zeros((k, k), B.dtype), B], axis=1)
        bottom = jnp.concatenate([B.T, jnp.zeros((dd, dd), B.dtype)], axis=1)
        return jnp.concatenate([top, bottom], axis=0)

    @property
    def C(self) -> jax.Array:
        return 0.5 * self.slope * self._sym_block(self.teacher @ self.covariance)

    def K_apply(self, M: jax.Array | np.ndarray) -> jax.Array:
        return 0.5 * self.slope**2 * self._sym_block(self._av(M) @ self.covariance)

    def _error(self, M: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
        return self.slope * self._av(M) - self.teacher

    def gradient_matrix(self, M: jax.Array | np.ndarray) -> jax.Array:
        return 0.5 * self.slope * self._sym_block(self._error(M) @ self.covariance)

    def loss(self, M: jax.Array | np.ndarray) -> jax.Array:
        E = self._error(M)
        return 0.5 * jnp.trace(E @ self.covariance @ E.T)


def population_data_matrices(
    arch: Architecture, covariance: Float[ArrayLike, "D D"], teacher: Float[ArrayLike, "K D"], dtype=None
) -> PopulationDataMatrices:
    """Population data matrices of ``mlp`` for x ~ N(0, covariance) and y = teacher @ x.

    covariance: (D, D) symmetric positive semidefinite; teacher: (K, D), D = inputs, K = outputs.
    """
    if arch.name != "mlp" or arch.router is not None:
        raise NqfError(
            f"the Gaussian-teacher closed form is derived for the 'mlp' architecture only, got {arch.name!r}"
        )
    k, dd = arch.outputs, arch.input_shape[0]
    if [b.name for b in arch.blocks] != ["a", "v"] or arch.block("a").shape != (k,):
        raise NqfError("mlp: expected parameter blocks [a (K), v (D)] in that order")
    Sigma, T = np.asarray(covariance), np.asarray(teacher)
    if Sigma.shape != (dd, dd):
        raise NqfError(f"covariance must have shape (D={dd}, D={dd}), got {Sigma.shape}")
    if T.shape != (k, dd):
        raise NqfError(f"teacher must have shape (K={k}, D={dd}), got {T.shape}")
    check_finite("covariance", Sigma)
    check_finite("teacher", T)
    scale = max(float(np.abs(Sigma).max()), 1e-300)
    if not np.allclose(Sigma, Sigma.T, rtol=0, atol=1e-10 * scale):
        raise NqfError("covariance must be symmetric")
    if np.linalg.eigvalsh(Sigma).min() < -1e-10 * scale:
        raise NqfError("covariance must be positive semidefinite")
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    slope, _ = activation_derivatives(arch.option("activation"))
    return PopulationDataMatrices(jnp.asarray(Sigma, dtype), jnp.asarray(T, dtype), float(slope))
