r"""From data matrices to the Lotka-Volterra reduction (docs/theory.md section 3).

Find the eigenbasis q_k of C (degenerate eigenspaces rotated so that K acts as
diagonally as it can on them), measure how far the data matrices are from sharing it,
and read off the LV coefficients

    c_k = q_k^T C q_k,    K_kj = E[sum_c (q_k^T A_c q_k)(q_j^T A_c q_j)] = q_j^T K[P_k] q_j,
    m_k(0) = q_k^T M(0) q_k.

Defects (relative Frobenius norms, 0 when the reduction is exact):

    defect      = max over modes k with c_k != 0 of ||offdiag(Q^T K[P_k] Q)|| / ||Q^T K[P_k] Q||
                  (and the same for Q^T C Q, zero up to rounding by construction);
    init_defect = ||offdiag(Q^T M(0) Q)|| / ||M(0)||.

When the defect is small and M(0) is diagonal in Q, M = sum_k m_k q_k q_k^T is an exact
solution of the M-flow and the LV system is exact; otherwise it is an approximation whose
quality the two numbers state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from nqf.core.errors import NqfError
from nqf.core.programs import to_device
from nqf.theory.data_matrices.moments import HostMoments
from nqf.theory.data_matrices.protocol import AbstractDataMatrices
from nqf.theory.lotka_volterra.system import LotkaVolterra


@dataclass(frozen=True, eq=False)
class ModeBasis:
    """The LV modes of a data set.

    Attributes:
        basis: (d, m) the modes q_k with c_k != 0, sorted by c_k, largest first.
        growth: (m,) c_k.
        interactions: (m, m) K_kj.
        defect: off-diagonal mass of K[P_k] (and C) in the full eigenbasis (module docstring).
        full_basis: (d, d) the whole eigenbasis (modes first, then the null space of C).
    """

    basis: Float[np.ndarray, "d m"]
    growth: Float[np.ndarray, " m"]
    interactions: Float[np.ndarray, "m m"]
    defect: float
    full_basis: Float[np.ndarray, "d d"]

    @property
    def num_growing(self) -> int:
        """Number of modes with c_k > 0 (they come first)."""
        return int(np.sum(self.growth > 0))

    def occupations(self, M: Float[ArrayLike, "d d"]) -> Float[np.ndarray, " m"]:
        """m_k = q_k^T M q_k, (m,)."""
        M = np.asarray(M, dtype=np.float64)
        return np.einsum("ik,ij,jk->k", self.basis, M, self.basis)

    def init_defect(self, M0: Float[ArrayLike, "d d"]) -> float:
        """||offdiag(Q^T M0 Q)||_F / ||M0||_F in the full eigenbasis."""
        M0 = np.asarray(M0, dtype=np.float64)
        R = self.full_basis.T @ M0 @ self.full_basis
        norm = np.linalg.norm(M0)
        return float(np.linalg.norm(R - np.diag(np.diag(R))) / norm) if norm > 0 else 0.0

    def lotka_volterra(self, m0, lr: float, loss0: float) -> LotkaVolterra:
        """The LV system of these modes from initial occupations m0 (m,) (floored at 1e-300)."""
        m0 = np.maximum(np.asarray(m0, dtype=np.float64), 1e-300)
        return LotkaVolterra(self.growth, self.interactions, m0, lr, loss0)


@jax.jit
def _C_of(data: AbstractDataMatrices):
    """C of any data matrices as one compiled program (eager, its scatters compile one by one)."""
    return data.C


@jax.jit
def _k_apply(data: AbstractDataMatrices, M):
    return data.K_apply(M)


@jax.jit
def _k_apply_projectors(data: AbstractDataMatrices, basis):
    """K[q_k q_k^T] for every column q_k of basis (d, m): (m, d, d), one mode at a time."""
    return jax.lax.map(lambda q: data.K_apply(jnp.outer(q, q)), basis.T)


def _groups(values: np.ndarray, rtol: float) -> list[np.ndarray]:
    """Indices of (sorted) eigenvalues grouped into degenerate clusters."""
    scale = max(float(np.abs(values).max()), 1e-300)
    groups, current = [], [0]
    for i in range(1, values.size):
        if abs(values[i] - values[current[-1]]) <= rtol * scale:
            current.append(i)
        else:
            groups.append(np.array(current))
            current = [i]
    groups.append(np.array(current))
    return groups


def mode_basis(data: AbstractDataMatrices, rtol: float = 1e-8) -> ModeBasis:
    """Eigenbasis of C with LV coefficients and the defect of the data matrices.

    Degenerate eigenvalues (relative gap <= rtol of the largest |c|) form one eigenspace
    V (d x g); inside it the basis is rotated to diagonalise V^T K[V V^T] V, so that a K
    which is diagonal in some basis of V is found diagonal. Modes with |c_k| <= rtol max|c|
    are the null space of C: they neither grow nor enter the LV system.
    """
    if not isinstance(data, AbstractDataMatrices):
        raise NqfError(f"mode_basis needs data matrices, got {type(data).__name__}")
    host = isinstance(data, HostMoments)  # numpy data matrices (nqf.theory.flow.host): nothing compiled
    C = np.asarray(data.C if host else _C_of(data), dtype=np.float64)
    C = 0.5 * (C + C.T)
    if not np.any(C):
        raise NqfError("C = E[y A(x)] vanishes: the targets do not couple to the structure matrix, no mode grows")
    values, vectors = np.linalg.eigh(C)
    order = np.argsort(-values, kind="stable")
    values, vectors = values[order], vectors[:, order]
    dtype = data.dtype
    K_apply: Callable[[Any], Any] = data.K_apply if host else functools.partial(_k_apply, data)
    columns = []
    for idx in _groups(values, rtol):
        V = vectors[:, idx]
        if idx.size > 1:
            S = V.T @ np.asarray(K_apply(np.asarray(V @ V.T, dtype=dtype)), dtype=np.float64) @ V
            _, R = np.linalg.eigh(0.5 * (S + S.T))
            V = V @ R
        columns.append(V)
    Q = np.concatenate(columns, axis=1)
    c_all = np.einsum("ik,ij,jk->k", Q, C, Q)
    scale = float(np.abs(c_all).max())
    active = np.abs(c_all) > rtol * scale
    # modes first (sorted by c, largest first), then the null space of C
    idx_active = np.flatnonzero(active)
    idx_active = idx_active[np.argsort(-c_all[idx_active], kind="stable")]
    Q = np.concatenate([Q[:, idx_active], Q[:, ~active]], axis=1)
    m = idx_active.size
    basis = Q[:, :m]

    # K[P_k] for each mode, in the full basis
    # one mode at a time: a vmap over modes would hold m copies of the per-sample intermediates
    if host:
        Qd = np.asarray(basis, dtype=dtype)
        responses = np.stack([K_apply(np.outer(q, q)) for q in Qd.T]) if m else np.zeros((0, *C.shape))
        responses = np.asarray(responses, dtype=np.float64)
    else:
        responses = np.asarray(_k_apply_projectors(data, to_device(basis, dtype=dtype)), dtype=np.float64)  # (m, d, d)
    # Q^T R_k Q as two matrix products (2 m d^3 flops); np.einsum's unoptimised loop over
    # i, j, a, b, k is m d^4 (hours at d = 794)
    in_basis = Q.T @ responses @ Q
    diag = np.einsum("kaa->ka", in_basis)
    off = np.sqrt(np.maximum(np.sum(in_basis**2, axis=(1, 2)) - np.sum(diag**2, axis=1), 0.0))
    norms = np.linalg.norm(in_basis, axis=(1, 2))
    k_defect = float(np.max(np.where(norms > 0, off / np.where(norms > 0, norms, 1.0), 0.0))) if m else 0.0
    CQ = Q.T @ C @ Q
    c_defect = float(np.linalg.norm(CQ - np.diag(np.diag(CQ))) / np.linalg.norm(C))
    interactions = diag[:, :m]
    interactions = 0.5 * (interactions + interactions.T)
    return ModeBasis(
        basis=basis,
        growth=c_all[idx_active],
        interactions=interactions,
        defect=max(k_defect, c_defect),
        full_basis=Q,
    )
