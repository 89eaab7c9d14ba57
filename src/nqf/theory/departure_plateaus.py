r"""Part (b) of ``nqf.theory.departure``, the pieces: the network's (or the quadratic model's)
plateau state W(B*) = Q_L B* Rhat_L (:func:`plateau_state`) and the linear(ised) map of the
unlearned rows about it (:class:`_UnlearnedMap`, constructions ``linearised`` and
``near_zero``). ``nqf.theory.corrections`` runs them to the corrected switch-on steps.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from nqf.theory.departure_path import _model_outputs, quadratic_outputs
from nqf.theory.sample_matrices import _per_sample_loss

# Up to this many weights (d n) the linearised map is built as a dense matrix once.
_DENSE_LIMIT = 4096
# Up to this many weights the lowest curvature of each plateau is reported (an eigvalsh of d n x d n).
_EIGEN_LIMIT = 1024


def _loss_fn(arch, model: str, loss_type: str):
    outputs = _model_outputs(arch, model)
    return lambda W, X, Y: jnp.mean(_per_sample_loss(loss_type, outputs(W, X), Y))


@partial(jax.jit, static_argnames=("arch", "model", "loss_type"))
def _restricted_value_and_grad(arch, model, loss_type, B, QL, Rhat, X, Y):
    loss = _loss_fn(arch, model, loss_type)
    return jax.value_and_grad(lambda b: loss(QL @ b @ Rhat, X, Y))(B)


def plateau_state(arch, model: str, loss_type: str, QL, Rhat, X, Y, B0, free=None) -> tuple[np.ndarray, float]:
    """argmin_B L_model(Q_L B Rhat) from B0 by BFGS: (B*, L*).

    ``free``: (d, d) 0/1 mask of the entries of B that vary (the learned block); the others
    stay at B0 (zero), so every learned set runs the same compiled loss.
    """
    from scipy.optimize import minimize

    shape = np.shape(B0)
    dtype = np.asarray(Rhat).dtype
    free = np.ones(shape, dtype=bool) if free is None else np.asarray(free, dtype=bool)
    base = np.where(free, 0.0, np.asarray(B0, dtype=np.float64))

    def fun(b):
        full = base.copy()
        full[free] = b
        value, grad = _restricted_value_and_grad(arch, model, loss_type, jnp.asarray(full, dtype=dtype), QL, Rhat, X, Y)
        return float(value), np.asarray(grad, dtype=np.float64)[free]

    start = np.asarray(B0, dtype=np.float64)[free]
    res = minimize(fun, start, jac=True, method="BFGS", options={"gtol": 1e-10, "maxiter": 2000})
    out = base.copy()
    out[free] = res.x
    return out, float(res.fun)


def _force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0):
    """(g, linear map) with the unlearned rows' gradient g + lin(D) about W* (``_unlearned_map``)."""
    loss = _loss_fn(arch, model, loss_type)
    if construction == "linearised":

        def grad_u(D):
            return QU.T @ jax.grad(loss)(Wstar + QU @ D, X, Y)

        return jax.linearize(grad_u, jnp.zeros_like(D0))
    outputs = _model_outputs(arch, model)
    f_star = outputs(Wstar, X)
    residual = f_star - Y if loss_type == "squared" else jax.nn.softmax(f_star, axis=1) - Y  # l'(f, y)
    residual = jax.lax.stop_gradient(residual)

    def paired(W):
        return jnp.sum(residual * quadratic_outputs(arch, W, X)) / X.shape[0]

    return jnp.zeros_like(D0), lambda D: QU.T @ jax.grad(paired)(QU @ D)  # 2 Q_U^T G Q_U D


@partial(jax.jit, static_argnames=("arch", "model", "loss_type", "construction"))
def _dense_force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0):
    """(g, J) with the linear map as a (d n, d n) matrix: lin(D) = (D.ravel() @ J).reshape(D.shape)."""
    g, lin = _force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0)
    eye = jnp.eye(D0.size, dtype=D0.dtype).reshape((D0.size,) + D0.shape)
    return g, jax.vmap(lin)(eye).reshape(D0.size, D0.size)


def _steps(optimizer, force, D0, V0, lr, beta, gaps):
    def step(i, carry):
        D, V = carry
        if optimizer == "momentum":
            V = force(D) + beta * V
            return D - lr * V, V
        return D - lr * force(D), V

    def between(carry, gap):
        carry = jax.lax.fori_loop(0, gap, step, carry)
        return carry, jnp.sum(carry[0] ** 2, axis=1)

    (D, V), occ = jax.lax.scan(between, (D0, V0), gaps)
    return occ, D, V


@partial(jax.jit, static_argnames=("optimizer",))
def _dense_steps(optimizer, g, J, D0, V0, lr, beta, gaps):
    return _steps(optimizer, lambda D: g + (D.ravel() @ J).reshape(D.shape), D0, V0, lr, beta, gaps)


@partial(jax.jit, static_argnames=("arch", "model", "loss_type", "construction", "optimizer"))
def _matrix_free_steps(arch, model, loss_type, construction, optimizer, Wstar, QU, X, Y, D0, V0, lr, beta, gaps):
    g, lin = _force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0)
    return _steps(optimizer, lambda D: g + lin(D), D0, V0, lr, beta, gaps)


class _UnlearnedMap:
    """The unlearned rows' linear(ised) dynamics about W* for one plateau and model.

    D (d, n): the weights' mode coordinates Q^T W, only the unlearned rows used (QU: the full
    basis with the learned columns zeroed). ``linearised``: D+ = D - lr (g + H D) with
    g + H D the unlearned rows' gradient linearised about W* (GD; heavy-ball momentum runs
    the same force through its velocity); ``near_zero``: the force 2 Q_U^T G Q_U D with
    G = E[r(x) A(x)] at W*. Up to _DENSE_LIMIT weights the map is built once as a matrix.
    ``run(D0, V0, gaps)`` returns (squared row norms (S, d) after each gap, D, V).
    """

    def __init__(self, arch, model, loss_type, construction, optimizer, Wstar, QU, X, Y, D0, lr, beta):
        self.optimizer, self.lr, self.beta = optimizer, lr, beta
        self.dense = D0.size <= _DENSE_LIMIT
        self.lowest = math.nan  # the most negative eigenvalue of the (symmetrised) linear map
        if self.dense:
            self.g, self.J = _dense_force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0)
            if D0.size <= _EIGEN_LIMIT:
                J = np.asarray(self.J, dtype=np.float64)
                self.lowest = float(np.linalg.eigvalsh(0.5 * (J + J.T))[0])
        else:
            self.args = (arch, model, loss_type, construction, optimizer, Wstar, QU, X, Y)

    def run(self, D0, V0, gaps):
        gaps = jnp.asarray(gaps, dtype=jnp.int32)
        if self.dense:
            return _dense_steps(self.optimizer, self.g, self.J, D0, V0, self.lr, self.beta, gaps)
        return _matrix_free_steps(*self.args, D0, V0, self.lr, self.beta, gaps)
