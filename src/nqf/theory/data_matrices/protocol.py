r"""What every data-matrix implementation provides: :class:`AbstractDataMatrices`, and
:class:`AbstractSampleDataMatrices` for those built from samples (minibatches, per-sample losses).

The M-flow, the mode basis, the stability bound and the Lotka-Volterra reduction need only
(docs/theory.md section 2)

    L(M)                                   the loss of the quadratic model f_c(x) = <M, A_c(x)>
    G(M) = E[ sum_c l'_c(f(x), y) A_c(x) ]  (d, d), symmetric; grad_W L(W W^T) = 2 G W
    C    = E[ sum_c y_c A_c(x) ]            (d, d)
    K[M] = E[ sum_c A_c(x) <A_c(x), M> ]    (d, d), linear in M; G = K[M] - C for the squared loss

and from these the mode quantities in a basis Q = [q_1 ... q_m] (d, m)

    c_k  = q_k^T C q_k                      (mode_growth)
    K_kj = q_k^T K[q_j q_j^T] q_k           (mode_interactions)

An implementation subclasses one of the two bases here (the abstract/final pattern of
equinox: the bases declare, the concrete classes are final), is a JAX pytree (e.g. a frozen
dataclass under ``jax.tree_util.register_dataclass``, with ``loss_type`` and other non-array
fields marked static), since the flows pass it into compiled programs, and defines the abstract members;
``loss_and_gradient``, ``mode_growth`` and ``mode_interactions`` have default implementations
from the others (the built-in classes replace ``loss_and_gradient`` by a cheaper one; the mode
quantities apply K once per mode, as ``mode_basis`` does). Every implementation is held to the
same exactness checks in ``tests/test_data_protocol.py``.

The implementations in nqf: :class:`~nqf.DataMatrices` (structured A(x_n) of every sample),
:class:`~nqf.theory.data_matrices.chunked.ChunkedDataMatrices` (samples rebuilt chunk by
chunk), :class:`~nqf.theory.data_matrices.moments.MomentDataMatrices` (second moments,
squared loss; its numpy twin :class:`~nqf.theory.data_matrices.moments.HostMoments`) and
:class:`~nqf.theory.data_matrices.PopulationDataMatrices` (closed form for Gaussian inputs).
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp

from nqf.core.errors import NqfError

Array = Any  # a jax.Array, or a numpy array for the numpy implementations (HostMoments)


class AbstractDataMatrices(abc.ABC):
    """The data matrices of a data set, as the M-flow sees them. All methods take a symmetric M (d, d).

    Attributes (declared here, defined by each implementation):
        loss_type: ``squared`` or ``cross_entropy``.
        dim: d, the size of M.  outputs_count: K.  dtype: the working floating dtype.
        C: C = E[sum_c y_c A_c(x)], (d, d).
    """

    loss_type: str

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """d, the size of M."""

    @property
    @abc.abstractmethod
    def outputs_count(self) -> int:
        """K, the number of outputs."""

    @property
    @abc.abstractmethod
    def dtype(self) -> Any:
        """The floating dtype of the arrays."""

    @property
    @abc.abstractmethod
    def C(self) -> Array:
        """C = E[sum_c y_c A_c(x)], (d, d)."""

    @abc.abstractmethod
    def K_apply(self, M: Array) -> Array:
        """K[M] = E[sum_c A_c(x) <A_c(x), M>], (d, d)."""

    @abc.abstractmethod
    def loss(self, M: Array) -> Array:
        """L(M), a scalar."""

    @abc.abstractmethod
    def gradient_matrix(self, M: Array) -> Array:
        """G(M) = E[sum_c l'_c(f, y) A_c(x)], (d, d)."""

    def loss_and_gradient(self, M: Array) -> tuple[Array, Array]:
        """(L(M), G(M)); implementations share the work of the two where they can."""
        return self.loss(M), self.gradient_matrix(M)

    def mode_growth(self, Q: Array) -> Array:
        """c_k = q_k^T C q_k for the columns of Q (d, m): (m,)."""
        Q = check_basis(Q, self.dim)
        return jnp.einsum("ik,ij,jk->k", Q, jnp.asarray(self.C), Q)

    def mode_interactions(self, Q: Array) -> Array:
        """K_kj = q_k^T K[q_j q_j^T] q_k for the columns of Q (d, m): (m, m)."""
        Q = check_basis(Q, self.dim)
        # one K[P_j] at a time (m applications of K, (d, d) each), in Python: numpy
        # implementations (HostMoments) cannot be traced by a lax.map
        columns = [jnp.einsum("ik,il,lk->k", Q, jnp.asarray(self.K_apply(jnp.outer(q, q))), Q) for q in Q.T]
        return jnp.stack(columns, axis=1)


def check_basis(Q, d: int) -> jax.Array:
    """Q as a (d, m) array (a single vector (d,) as one column); NqfError for another shape."""
    Q = jnp.asarray(Q)
    if Q.ndim == 1:
        Q = Q[:, None]
    if Q.ndim != 2 or Q.shape[0] != d:
        raise NqfError(f"the basis Q must have shape (d={d}, m), got {tuple(Q.shape)}")
    return Q


class AbstractSampleDataMatrices(AbstractDataMatrices):
    """Data matrices of N samples: besides the full-data quantities, minibatches (``indices``,
    (B,) sample numbers; under jit they may be traced) and the per-sample losses, which SGD's
    M-flow and the departure from the quadratic model need."""

    @property
    @abc.abstractmethod
    def num_samples(self) -> int:
        """N."""

    @abc.abstractmethod
    def subset(self, indices: jax.Array) -> AbstractSampleDataMatrices:
        """The samples ``indices`` (B,) only: a minibatch."""

    @abc.abstractmethod
    def outputs(self, M: Array, indices: jax.Array | None = None) -> Array:
        """f_c(x_n) = <M, A_c(x_n)>, (N, K) (or (B, K) for ``indices``)."""

    @abc.abstractmethod
    def per_sample_loss(self, M: Array, indices: jax.Array | None = None) -> Array:
        """l(f(x_n), y_n) for every sample (N,) (or (B,) for ``indices``); ``loss`` is their mean."""

    @abc.abstractmethod
    def K_apply(self, M: Array, indices: jax.Array | None = None) -> Array:
        """K[M] over all samples, or the minibatch ``indices``."""

    @abc.abstractmethod
    def loss(self, M: Array, indices: jax.Array | None = None) -> Array:
        """L(M) over all samples, or the minibatch ``indices``."""

    @abc.abstractmethod
    def gradient_matrix(self, M: Array, indices: jax.Array | None = None) -> Array:
        """G(M) over all samples, or the minibatch ``indices``."""

    def loss_and_gradient(self, M: Array, indices: jax.Array | None = None) -> tuple[Array, Array]:
        return self.loss(M, indices), self.gradient_matrix(M, indices)
