r"""Structured representations of the structure matrices of a data set.

Downstream code (data matrices, flows, Lotka-Volterra coefficients) needs only three
contractions of the per-sample structure matrices A_c(x_n) (K outputs, d x d each):

- ``forms(M)``      -> (N, K):   f_c(x_n) = <M, A_c(x_n)>
- ``contract(R)``   -> (d, d):   (1/N) sum_{n,c} R[n, c] A_c(x_n)
- ``quad(Q)``       -> (N, K, m): q_j^T A_c(x_n) q_j for the columns q_j of Q (d x m)

:class:`BlockFactors` stores A through low-rank factors on parameter blocks,

    A_c(x) = sum_terms 1/2 sum_r ( E_L^T l_cr(x) r_cr(x)^T E_R + E_R^T r_cr(x) l_cr(x)^T E_L ),

where E_L, E_R select the left/right parameter blocks (they may coincide). Memory is
O(N K R (d_L + d_R)); an N x d x d stack is never built. :class:`DenseStructure` is
the fallback for user unit functions without a known structure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class BlockTerm:
    """One low-rank coupling between parameter block ``left_slice`` and ``right_slice``.

    left: (N, K, R, d_L) and right: (N, K, R, d_R), slices are (start, stop) in the
    flattened unit parameter vector of length d. ``shared_left``: every sample has the same
    left factors (a perceptron's readout e_c; :meth:`BlockFactors.with_shared_left` finds them),
    so that :meth:`BlockFactors.forms` and :meth:`BlockFactors.contract` take them once, not per sample.
    ``shared_right``: with ``shared_left``, every output has the same right factors (the
    perceptron's input x_n for every c), which those read once per sample, not per output.
    """

    left: jax.Array
    right: jax.Array
    left_slice: tuple[int, int] = field(metadata=dict(static=True))
    right_slice: tuple[int, int] = field(metadata=dict(static=True))
    shared_left: bool = field(default=False, metadata=dict(static=True))
    shared_right: bool = field(default=False, metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class BlockFactors:
    """Sum of :class:`BlockTerm` couplings for N samples; see the module docstring."""

    terms: tuple[BlockTerm, ...]
    dim: int = field(metadata=dict(static=True))

    @property
    def num_samples(self) -> int:
        return self.terms[0].left.shape[0]

    @property
    def outputs(self) -> int:
        return self.terms[0].left.shape[1]

    def with_shared_left(self) -> BlockFactors:
        """The same structure with each term whose left factors every sample shares marked
        ``shared_left`` (concrete arrays only: read on the host). Per step, :meth:`forms` and
        :meth:`contract` then cost N K R d_R + K R d_L d_R instead of N K R d_L d_R: K times less
        for a perceptron's readout (d_L = K). Such a term whose right factors every output shares
        is also marked ``shared_right``: it reads N R d_R numbers per step instead of N K R d_R."""
        terms = []
        for t in self.terms:
            left = np.asarray(t.left)
            shared = left.shape[0] > 0 and bool(np.array_equal(left, np.broadcast_to(left[:1], left.shape)))
            right = np.asarray(t.right) if shared else None  # read only where it can be marked
            across = right is not None and bool(np.array_equal(right, np.broadcast_to(right[:, :1], right.shape)))
            terms.append(BlockTerm(t.left, t.right, t.left_slice, t.right_slice, shared, across))
        return BlockFactors(tuple(terms), self.dim)

    def forms(self, M: jax.Array) -> jax.Array:
        """<M, A_c(x_n)> for symmetric M (d x d); returns (N, K)."""
        out: jax.Array | float = 0.0  # an array once the first term is added
        for t in self.terms:
            block = M[t.left_slice[0] : t.left_slice[1], t.right_slice[0] : t.right_slice[1]]
            if t.shared_left:  # the first sample's left factors are every sample's
                lm = jnp.einsum("kri,ij->krj", t.left[0], block)
                if t.shared_right:  # and the first output's right factors every output's
                    out = out + jnp.einsum("krj,nrj->nk", lm, t.right[:, 0])
                else:
                    out = out + jnp.einsum("krj,nkrj->nk", lm, t.right)
                continue
            lm = jnp.einsum("nkri,ij->nkrj", t.left, block)
            out = out + jnp.sum(lm * t.right, axis=(2, 3))
        return jnp.asarray(out)

    def contract(self, weights: jax.Array) -> jax.Array:
        """(1/N) sum_{n,c} weights[n, c] A_c(x_n); weights (N, K), returns (d, d)."""
        n = weights.shape[0]
        out = jnp.zeros((self.dim, self.dim), dtype=jnp.result_type(weights, self.terms[0].left))
        for t in self.terms:
            if t.shared_left:
                if t.shared_right:
                    weighted = jnp.einsum("nk,nrj->krj", weights, t.right[:, 0])
                else:
                    weighted = jnp.einsum("nk,nkrj->krj", weights, t.right)
                b = jnp.einsum("kri,krj->ij", t.left[0], weighted) / (2 * n)
            else:
                wl = t.left * weights[:, :, None, None]
                b = jnp.einsum("nkri,nkrj->ij", wl, t.right) / (2 * n)
            (l0, l1), (r0, r1) = t.left_slice, t.right_slice
            out = out.at[l0:l1, r0:r1].add(b)
            out = out.at[r0:r1, l0:l1].add(b.T)
        return out

    def quad(self, Q: jax.Array | np.ndarray) -> jax.Array:
        """q_j^T A_c(x_n) q_j for the columns of Q (d x m); returns (N, K, m)."""
        out: jax.Array | float = 0.0  # an array once the first term is added
        for t in self.terms:
            ql = Q[t.left_slice[0] : t.left_slice[1]]
            qr = Q[t.right_slice[0] : t.right_slice[1]]
            out = out + jnp.einsum("nkri,im,nkrj,jm->nkm", t.left, ql, t.right, qr)
        return jnp.asarray(out)

    def dense(self) -> jax.Array:
        """The explicit (N, K, d, d) stack; for tests and small inspections only."""
        n, k = self.num_samples, self.outputs
        out = jnp.zeros((n, k, self.dim, self.dim), dtype=self.terms[0].left.dtype)
        for t in self.terms:
            b = 0.5 * jnp.einsum("nkri,nkrj->nkij", t.left, t.right)
            (l0, l1), (r0, r1) = t.left_slice, t.right_slice
            out = out.at[:, :, l0:l1, r0:r1].add(b)
            out = out.at[:, :, r0:r1, l0:l1].add(jnp.swapaxes(b, -1, -2))
        return out


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class DenseStructure:
    """Explicit per-sample structure matrices A: (N, K, d, d), for unstructured units."""

    matrices: jax.Array

    @property
    def dim(self) -> int:
        return self.matrices.shape[-1]

    @property
    def num_samples(self) -> int:
        return self.matrices.shape[0]

    @property
    def outputs(self) -> int:
        return self.matrices.shape[1]

    def forms(self, M: jax.Array) -> jax.Array:
        return jnp.einsum("nkij,ij->nk", self.matrices, M)

    def contract(self, weights: jax.Array) -> jax.Array:
        return jnp.einsum("nk,nkij->ij", weights, self.matrices) / weights.shape[0]

    def quad(self, Q: jax.Array | np.ndarray) -> jax.Array:
        return jnp.einsum("nkij,im,jm->nkm", self.matrices, Q, Q)

    def dense(self) -> jax.Array:
        return self.matrices


Structure = BlockFactors | DenseStructure


def with_shared_factors(held: Structure) -> Structure:
    """``held`` with the factors every sample (and every output) shares marked, so that its forms and
    contractions read them once (:meth:`BlockFactors.with_shared_left`; concrete arrays only); a
    dense structure as it is."""
    return held.with_shared_left() if isinstance(held, BlockFactors) else held
