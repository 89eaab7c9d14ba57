r"""The small-matrix stages of a prediction in numpy: nothing traced, nothing compiled.

A prediction at the sizes theory work uses (a few to a few dozen inputs, the moments route
with S of p x p, p up to a few hundred) costs microseconds of arithmetic per step, while
compiling each of its programs costs 20-500 ms: the first ``predict`` in a process was ~95%
compilation. For such problems :func:`nqf.predict` runs the stages after the data matrices
on the host (``Prediction.engine == "numpy"``, with the reason in ``engine_reason``):

- the data matrices as :class:`nqf.theory.data_matrices.moments.HostMoments` (the same S, u, m_hat);
- the M-flow of every full-batch optimizer that closes on M (:func:`host_map`): its own step
  on the factor F (M = F F^T), as in ``nqf.theory.flow.maps``, every step recorded;
- the LV discrete maps (``nqf.theory.lotka_volterra.maps.host_lv_block``, the same step);
- the stability bound's curvature (:func:`host_hessian_vector_product`: the Hessian of
  W -> L(W W^T), 2 K[V W^T + W V^T] W + 2 G(W W^T) V, for the squared loss).

The expansion check, the data's moments and the init draw stay compiled: they evaluate the
unit (autodiff, the closed form) and JAX's random generator, which training shares.

Both engines give the same numbers to rounding: ``tests/test_host_path.py`` runs every
built-in architecture the moments route takes, with every full-batch optimizer, through both and asks for
identical switch-on steps and losses to 1e-12 relative.
"""

from __future__ import annotations

import numpy as np

from nqf.core.errors import NqfError
from nqf.optimizers import AbstractClosedOptimizer
from nqf.theory.data_matrices.moments import HostMoments
from nqf.theory.flow.base import FlowResult

__all__ = [
    "HOST_BUDGET_S",
    "HOST_MAX_STEPS",
    "host_seconds",
    "host_hessian_vector_product",
    "host_map",
]

# The host engine while its estimated time (:func:`host_seconds`) stays below this: a tenth of
# compiling the stages it replaces (about 1.2 s on the staircase, 2 cores), so that a warm call
# in a process that has compiled them is slowed by 0.1 s at most (the compiled map jumps the
# linear stretches: at 20000 steps it took 0.1 s warm against 0.48 s for 20000 numpy steps) ...
HOST_BUDGET_S = 0.1
# ... and every step is recorded (the compiled map jumps the linear stretches of longer horizons).
HOST_MAX_STEPS = 20000
# A numpy step: ~20 us of Python and numpy overhead, plus S @ delta (2 p^2 flops) at ~1e10
# flop/s (measured: 20.5 us a step at p = 32, d = 12; 79 us at p = 640, d = 74).
_STEP_OVERHEAD_S = 20e-6
_FLOPS_PER_S = 1e10


def host_seconds(packed_size: int, steps: int) -> float:
    """The estimated time of the numpy M-flow: steps x (overhead + 2 p^2 / flop rate)."""
    return steps * (_STEP_OVERHEAD_S + 2.0 * packed_size * packed_size / _FLOPS_PER_S)


def host_map(
    data: HostMoments,
    optimizer: AbstractClosedOptimizer,
    lr: float,
    steps: int,
    factor: np.ndarray,
    basis: np.ndarray,
    beta: float | None = 0.0,
) -> FlowResult:
    """The exact map on M = F F^T of a full-batch ``optimizer`` (its own step with the gradient
    2 G F, ``beta`` its momentum), from F = factor (d, r), every step recorded.

    Returns a FlowResult with steps (T + 1,), loss (T + 1,), final M (d, d), occupations
    |Q^T F|^2 per column of basis (d, m) at every step (T + 1, m), and for an optimizer with a
    buffer B its closed blocks (F B^T, B B^T) (heavy ball: (P, Q)).
    """
    if optimizer.minibatches:  # never a minibatch flow under the full-batch map
        raise NqfError(f"the numpy M-flow steps full-batch optimizers only, not {optimizer.name!r}")
    dtype = data.dtype
    F = np.array(factor, dtype=dtype)
    Qt = np.asarray(basis, dtype=dtype).T
    step_size = np.asarray(lr, dtype=dtype)
    momentum = np.asarray(0.0 if beta is None else beta, dtype=dtype)
    loss = np.empty(steps + 1, dtype=dtype)
    occupations = np.empty((steps + 1, Qt.shape[0]), dtype=dtype)
    carry = (F, *(np.zeros_like(F) for _ in range(optimizer.buffers)))

    def observe(t, F):
        # loss and G from one delta = pack(F F^T) - m_hat (the moments' own loss_and_gradient)
        loss[t], G = data.loss_and_gradient(F @ F.T)
        occupations[t] = np.sum((Qt @ F) ** 2, axis=1)
        return G

    G = observe(0, F)
    for t in range(steps):
        carry = optimizer.flow_step(2 * G @ carry[0], carry, step_size, momentum)
        G = observe(t + 1, carry[0])
    F = carry[0]
    return FlowResult(
        steps=np.arange(steps + 1),
        loss=loss,
        final=F @ F.T,
        occupations=occupations,
        state=tuple(x for B in carry[1:] for x in (F @ B.T, B @ B.T)) or None,
        stats=(("stepped", int(steps)), ("jumped", 0), ("jumps", 0)),
    )


def host_hessian_vector_product(data: HostMoments, W: np.ndarray, V: np.ndarray) -> np.ndarray:
    """H V for H the Hessian of W -> L(W W^T) (squared loss, moments): with M = W W^T,
    grad = 2 G(M) W, so H V = 2 K[V W^T + W V^T] W + 2 G(M) V. (d, d) like W."""
    G = data.gradient_matrix(W @ W.T)
    return 2 * data.K_apply(V @ W.T + W @ V.T) @ W + 2 * G @ V
