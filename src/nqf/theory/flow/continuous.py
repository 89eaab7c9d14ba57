r"""Gradient flow of M in continuous time (``nqf.theory.flow``): dM/dt = -2 lr (G M + M G),
t in units of steps, solved with diffrax (:func:`continuous_flow`)."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from nqf.core.errors import NqfError
from nqf.theory.data_matrices.protocol import AbstractDataMatrices
from nqf.theory.flow.base import (
    FlowResult,
    check_basis,
    check_data,
    check_M0,
    check_positive,
    observe_M,
    record_flags,
)

_SOLVERS = ("tsit5", "dopri5", "dopri8")


def _vector_field(t, M, args):
    data, lr, _ = args
    G = data.gradient_matrix(M)
    GM = G @ M
    return -2 * lr * (GM + GM.T)


def _observe_with_M(t, M, args):
    return observe_M(args[0], M, args[2], True)


def _observe_without_M(t, M, args):
    return observe_M(args[0], M, args[2], False)


def continuous_flow(
    data: AbstractDataMatrices,
    M0: Float[ArrayLike, "d d"],
    lr: float,
    t_final: float,
    saveat: Float[ArrayLike, " T"] | Sequence[float] | None = None,
    basis: Float[ArrayLike, "d m"] | None = None,
    record_M: bool | None = None,
    solver: str = "tsit5",
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int = 100_000,
) -> FlowResult:
    """Gradient flow dM/dt = -2 lr (G(M) M + M G(M)), t in units of GD steps at rate lr.

    The small-lr limit of :func:`gd_map`: after t steps GD is at M(t) + O(lr). Solved
    with diffrax (adaptive PID step size, ``solver`` tsit5 / dopri5 / dopri8).

    Args:
        saveat: times (in steps) within [0, t_final] to record; default 101 equally spaced.
        rtol, atol: step-size control tolerances (default 1e-10/1e-12 in float64, 1e-6/1e-9 in float32).
        max_steps: maximum number of solver steps; NqfError if t_final is not reached.
    """
    import diffrax

    check_data(data)
    M0 = check_M0(data, M0)
    lr = check_positive("lr", lr)
    t_final = check_positive("t_final", t_final)
    if solver not in _SOLVERS:
        raise NqfError(f"unknown solver {solver!r}; choose one of {', '.join(_SOLVERS)}")
    ts = np.linspace(0.0, t_final, 101) if saveat is None else np.asarray(saveat, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0 or ts.min() < 0 or ts.max() > t_final or np.any(np.diff(ts) <= 0):
        raise NqfError(f"saveat must be strictly increasing times within [0, t_final={t_final}]")
    basis = check_basis(data, basis)
    record_M = record_flags(data, basis, record_M, ts.size)
    double = M0.dtype == jnp.float64
    rtol = (1e-10 if double else 1e-6) if rtol is None else check_positive("rtol", rtol)
    atol = (1e-12 if double else 1e-9) if atol is None else check_positive("atol", atol)
    scheme = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}[solver]()

    # module-level observers: diffrax's filter_jit would recompile for every new closure
    observe = _observe_with_M if record_M else _observe_without_M
    saves = diffrax.SaveAt(
        subs=[diffrax.SubSaveAt(ts=jnp.asarray(ts, M0.dtype), fn=observe), diffrax.SubSaveAt(t1=True)]
    )
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(_vector_field),
        scheme,
        t0=jnp.asarray(0.0, M0.dtype),  # arrays, not floats: Python scalars would be static and recompile
        t1=jnp.asarray(t_final, M0.dtype),
        dt0=None,
        y0=M0,
        args=(data, jnp.asarray(lr, M0.dtype), basis),
        saveat=saves,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=int(max_steps),
        throw=False,
    )
    if not bool(solution.result == diffrax.RESULTS.successful):
        raise NqfError(
            f"continuous flow stopped before t_final={t_final}: {solution.result} "
            f"(raise max_steps={max_steps} or loosen rtol/atol)"
        )
    (loss, Ms, occ), final = solution.ys
    return FlowResult(steps=jnp.asarray(ts, M0.dtype), loss=loss, final=final[0], M=Ms, occupations=occ)
