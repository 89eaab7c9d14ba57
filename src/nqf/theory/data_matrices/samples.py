r"""The data matrices of a sample set: :class:`DataMatrices` (structured A(x_n) and targets y_n)
and the per-sample losses they use (the definitions of G(M), C and K[M] are the protocol's;
``build`` builds them from (X, Y))."""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from nqf.architectures.structure import Structure
from nqf.core.errors import NqfError
from nqf.theory.data_matrices.protocol import AbstractSampleDataMatrices

LOSSES = ("squared", "cross_entropy")


def check_loss(loss: str) -> str:
    if loss not in LOSSES:
        raise NqfError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
    return loss


def per_sample_loss(loss: str, F: jax.Array, Y: jax.Array) -> jax.Array:
    """l(f_n, y_n) for every sample; F, Y: (N, K). Returns (N,)."""
    if loss == "squared":
        return 0.5 * jnp.sum((F - Y) ** 2, axis=1)
    return jax.nn.logsumexp(F, axis=1) - jnp.sum(Y * F, axis=1)


def loss_derivative(loss: str, F: jax.Array, Y: jax.Array) -> jax.Array:
    """dl/df_c for every sample; F, Y: (N, K). Returns (N, K)."""
    if loss == "squared":
        return F - Y
    return jax.nn.softmax(F, axis=1) - Y


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class DataMatrices(AbstractSampleDataMatrices):
    """The data set seen by the M-flow: structured A(x_n) and targets y_n.

    Build with :func:`data_matrices`. Attributes:
        structure: :class:`~nqf.architectures.structure.BlockFactors` or
            :class:`~nqf.architectures.structure.DenseStructure` for N samples.
        targets: (N, K) targets (one-hot or class probabilities for cross-entropy).
        loss_type: ``squared`` or ``cross_entropy``.

    All methods take a symmetric M (d, d). A JAX pytree, so it can be passed into jit.
    """

    structure: Structure
    targets: jax.Array
    loss_type: str = field(metadata=dict(static=True))

    @property
    def dim(self) -> int:
        """d, the size of M."""
        return self.structure.dim

    @property
    def outputs_count(self) -> int:
        """K, the number of outputs."""
        return self.targets.shape[1]

    @property
    def num_samples(self) -> int:
        return self.targets.shape[0]

    @property
    def dtype(self):
        return self.targets.dtype

    def subset(self, indices: jax.Array) -> DataMatrices:
        """The samples ``indices`` (B,) only: a minibatch. Works under jit with traced indices."""
        picked = jax.tree_util.tree_map(lambda leaf: leaf[indices], self.structure)
        return DataMatrices(picked, self.targets[indices], self.loss_type)

    def _select(self, indices: jax.Array | None) -> DataMatrices:
        return self if indices is None else self.subset(indices)

    def outputs(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """f_c(x_n) = <M, A_c(x_n)>, (N, K) (or (B, K) for a minibatch ``indices``)."""
        return self._select(indices).structure.forms(M)

    def per_sample_loss(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """l(f(x_n), y_n), (N,) (or (B,) for a minibatch ``indices``)."""
        data = self._select(indices)
        return per_sample_loss(self.loss_type, data.structure.forms(M), data.targets)

    def loss(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """L(M) = mean_n l(f(x_n), y_n): squared (1/2) mean_n sum_c (f - y)^2, or mean cross-entropy."""
        return jnp.mean(self.per_sample_loss(M, indices))

    def loss_and_gradient(self, M: jax.Array, indices: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """(L(M), G(M)) sharing one evaluation of the outputs."""
        data = self._select(indices)
        F = data.structure.forms(M)
        value = jnp.mean(per_sample_loss(self.loss_type, F, data.targets))
        return value, data.structure.contract(loss_derivative(self.loss_type, F, data.targets))

    def gradient_matrix(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """G(M) = E[sum_c l'_c(f, y) A_c(x)], (d, d); grad_W L = 2 G W. Minibatch mean with ``indices``."""
        data = self._select(indices)
        F = data.structure.forms(M)
        return data.structure.contract(loss_derivative(self.loss_type, F, data.targets))

    @property
    def C(self) -> jax.Array:
        """C = E[sum_c y_c A_c(x)], (d, d). For squared loss G(M) = K[M] - C."""
        return self.structure.contract(self.targets)

    def K_apply(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """K[M] = E[sum_c A_c(x) <A_c(x), M>], (d, d)."""
        s = self._select(indices).structure
        return s.contract(s.forms(M))
