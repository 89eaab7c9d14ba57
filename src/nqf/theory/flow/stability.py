r"""The learning-rate bound of linear stability (:func:`stable_lr_bound`).

The M-map is the image of GD on W, so it is linearly stable at M exactly when GD on W is:
lr < 2 / lambda_max(H), H the Hessian of W -> L(W W^T). With L dW = dW W^T + W dW^T (so
L L^*[S] = 2 (S M + M S)),

    H = L^* K L + 2 G(M) (x) I_n          (squared loss; cross-entropy adds its l'' weight)

whose spectrum depends on M only (the rotations dW = W Omega are flat at a fixed
point, where G W = 0). An optimizer with a momentum is stable for lr lambda below its own
``stable_rate(beta)`` (``nqf.optimizers``: heavy ball 2 (1 + beta), Nesterov
2 (1 + beta) / (1 + 2 beta)).
Near M = 0, H = 2 G(0) (= -2 C for squared loss): modes with c_k < 0 oscillate and
grow once lr > 1 / |c_k|. At an isolated active mode of the Lotka-Volterra
reduction H has the eigenvalue 4 K_kk m_k* = 4 c_k, i.e. lr < 1 / (2 c_k).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from nqf.core.errors import NqfError
from nqf.core.programs import to_device
from nqf.optimizers import closed_optimizer
from nqf.theory.data_matrices.moments import HostMoments
from nqf.theory.data_matrices.protocol import AbstractDataMatrices
from nqf.theory.flow.base import check_data
from nqf.theory.flow.host import host_hessian_vector_product


@dataclass(frozen=True)
class LearningRateBound:
    """The largest learning rate for which an optimizer on M is linearly stable.

    Attributes:
        bound: the optimizer's stable rate (GD: 2) / curvature (inf when no direction is curved upward).
        curvature: the largest Hessian eigenvalue found over the checked points.
        curvature_start: 2 lambda_max(G(0)), the largest eigenvalue at M = 0.
        worst_point: index into the given points of the largest curvature, or None when it is at M = 0.
        beta: the momentum the bound is for (0 for GD and SGD).
        optimizer: the name of the optimizer it is for.
    """

    bound: float
    curvature: float
    curvature_start: float
    worst_point: int | None
    beta: float
    optimizer: str = "gd"

    def __float__(self) -> float:
        return self.bound


def _loss_of_w(data: AbstractDataMatrices, W):
    return data.loss(W @ W.T)


@jax.jit
def _hessian_vector_product(data: AbstractDataMatrices, W, V):
    return jax.jvp(lambda W: jax.grad(_loss_of_w, argnums=1)(data, W), (W,), (V,))[1]


# Up to this many entries of W (d^2) the Hessian is built densely from Hessian-vector
# products in one compiled program (d^2 products: at d = 16 still milliseconds); above, its
# top eigenvalue comes from Lanczos (scipy's eigsh, 0.5 s to import) on the products.
_DENSE_HESSIAN_LIMIT = 256


@jax.jit
def hessian_of_w(data: AbstractDataMatrices, W):
    """The dense Hessian (d^2, d^2) of W -> L(W W^T), one Hessian-vector product per direction."""
    d = W.shape[0]
    directions = jnp.eye(d * d, dtype=W.dtype).reshape(d * d, d, d)
    columns = jax.vmap(lambda V: _hessian_vector_product(data, W, V))(directions)
    return columns.reshape(d * d, d * d).T


@jax.jit
def _top_gradient_eigenvalue_program(data: AbstractDataMatrices, W):
    return jnp.linalg.eigvalsh(data.gradient_matrix(W @ W.T))[-1]


def _top_gradient_eigenvalue(data: AbstractDataMatrices, W) -> float:
    """lambda_max of G(M) at M = W W^T: in numpy for ``HostMoments``, else one program with the product."""
    if isinstance(data, HostMoments):
        return float(np.linalg.eigvalsh(data.gradient_matrix(W @ W.T))[-1])
    return float(_top_gradient_eigenvalue_program(data, W))


def _lanczos_top(matvec, size: int) -> float:
    """The largest eigenvalue of a symmetric operator by Lanczos (scipy's eigsh)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((size, size), matvec=matvec, dtype=np.float64)
    # a fixed start vector: the bound is then a deterministic function of the data
    start = np.cos(np.arange(1, size + 1, dtype=np.float64))
    return float(eigsh(op, k=1, which="LA", tol=1e-10, v0=start, return_eigenvectors=False)[0])


def _hessian_top(data: AbstractDataMatrices, M: np.ndarray) -> float:
    """lambda_max of the Hessian of W -> L(W W^T) at W = M^{1/2} (d x d), and of 2 G(M).

    The extra 2 G(M) accounts for width beyond rank(M): directions of W orthogonal to
    its row space feel only 2 G (conservative when n = rank M exactly). The Hessian is
    never built when d^2 > _DENSE_HESSIAN_LIMIT: Lanczos on Hessian-vector products (each
    costs one gradient and its derivative, i.e. one pass of the data route) finds the top.
    Numpy data matrices (``HostMoments``) take the same steps in numpy
    (``nqf.theory.flow.host``), nothing compiled.
    """
    host = isinstance(data, HostMoments)
    product: Any = host_hessian_vector_product if host else _hessian_vector_product

    def convert(a):
        return np.asarray(a, dtype=data.dtype) if host else to_device(a, dtype=data.dtype)

    evals, evecs = np.linalg.eigh(0.5 * (M + M.T))
    W = convert((evecs * np.sqrt(np.clip(evals, 0.0, None))) @ evecs.T)
    d = W.shape[0]
    top_g = 2.0 * _top_gradient_eigenvalue(data, W)

    def matvec(v):
        return np.asarray(product(data, W, convert(np.reshape(v, (d, d)))), dtype=np.float64).ravel()

    if d * d > _DENSE_HESSIAN_LIMIT:
        return max(_lanczos_top(matvec, d * d), top_g)
    if host:
        H = np.stack([matvec(e) for e in np.eye(d * d)], axis=1)
    else:
        H = np.asarray(hessian_of_w(data, W), dtype=np.float64)
    return max(float(np.linalg.eigvalsh(0.5 * (H + H.T))[-1]), top_g)


def stable_lr_bound(
    data: AbstractDataMatrices,
    points: Float[ArrayLike, "d d"] | Float[ArrayLike, "R d d"] | None = None,
    beta: float = 0.0,
    optimizer: str = "gd",
) -> LearningRateBound:
    """Largest lr for which GD on M (equivalently on W) is linearly stable at M = 0 and at ``points``.

    GD is linearly stable at M when lr < 2 / lambda_max(H(M)), H the Hessian of
    W -> L(W W^T) at any W with W W^T = M (module docstring); another ``optimizer`` (its
    momentum ``beta``) when lr < stable_rate(beta) / lambda_max(H), heavy ball's 2 (1 + beta).
    At M = 0, H = 2 G(0) (x) I (= -2 C for squared loss). Negative eigenvalues are the
    intended escape from the saddle and do not count.

    points: None, one M (d, d), or a stack (R, d, d) of points to check, typically the
    end of training predicted by the flow, e.g.
    ``continuous_flow(data, M0, lr, steps).final`` (the gradient-flow trajectory does not
    depend on whether lr is stable). At a converged isolated mode the bound is 1/(2 c_k).
    Intermediate plateaus (saddles) are only checked if they are among ``points``.
    SGD is judged by the full-batch bound.
    """
    closed = closed_optimizer(optimizer)
    host = isinstance(data, HostMoments)
    if not host:
        check_data(data)
    beta = float(beta)
    if not 0.0 <= beta < 1.0:
        raise NqfError(f"beta must lie in [0, 1), got {beta}")
    d = data.dim
    zero = np.zeros((d, d), data.dtype) if host else to_device(np.zeros((d, d), dtype=data.dtype))
    curvature_start = 2.0 * _top_gradient_eigenvalue(data, zero)
    curvature, worst = curvature_start, None
    if points is not None:
        pts = np.asarray(points)
        if pts.ndim == 2:
            pts = pts[None]
        if pts.ndim != 3 or pts.shape[1:] != (d, d):
            raise NqfError(
                f"points must be one M (d={d}, d={d}) or a stack (R, {d}, {d}), got {np.asarray(points).shape}"
            )
        if not np.all(np.isfinite(pts)):
            raise NqfError("points contain non-finite values")
        for i, M in enumerate(pts):
            top = _hessian_top(data, M)
            if top > curvature:
                curvature, worst = top, i
    bound = float("inf") if curvature <= 0 else closed.stable_rate(beta) / curvature
    return LearningRateBound(bound, curvature, curvature_start, worst, beta, closed.name)
