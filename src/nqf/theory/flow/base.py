"""What the flows of M (``nqf.theory.flow``) share: the result (:class:`FlowResult`), the
checks of their inputs, and the observation of a state (loss, M, occupations)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from nqf.core.errors import NqfError
from nqf.theory.data_matrices.protocol import AbstractDataMatrices

# Recording the full M at every checkpoint costs R d^2 numbers; refuse beyond this.
_MAX_RECORDED_ENTRIES = 2**27


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FlowResult:
    """A trajectory of M.

    Attributes:
        steps: (R,) the recorded steps (integers for the maps; times in units of steps,
            floats, for ``continuous_flow``).
        loss: (R,) the full-data loss L(M) at the recorded steps.
        final: (d, d) M after the last step (at t_final for the continuous flow); None where it
            was not kept (a point of ``nqf.predict_grid``).
        M: (R, d, d) M at the recorded steps, or None when not recorded.
        occupations: (R, m) m_k = q_k^T M q_k for the columns of the basis, or None.
        state: the optimizer state at the end, besides M (momentum: (P, Q)); else None.
        stats: for the maps, (name, count) pairs: "stepped" (steps computed one by one),
            "jumped" (steps jumped), "jumps", "tries" (``nqf.theory.flow.jumps``); else None. Static:
            not an array of the pytree.
    """

    steps: jax.Array | np.ndarray  # numpy from the numpy engine (nqf.theory.flow.host)
    loss: jax.Array | np.ndarray
    final: jax.Array | np.ndarray | None
    M: jax.Array | np.ndarray | None = None
    occupations: jax.Array | np.ndarray | None = None
    state: Any = None
    stats: tuple[tuple[str, int], ...] | None = field(default=None, metadata=dict(static=True))


def check_data(data: object) -> AbstractDataMatrices:
    if not isinstance(data, AbstractDataMatrices):
        raise NqfError(
            f"expected data matrices (nqf.data_matrices, nqf.population_data_matrices, or an "
            f"nqf.AbstractDataMatrices of your own), got {type(data).__name__}"
        )
    return data


def check_M0(data, M0) -> jax.Array:
    M0 = np.asarray(M0)
    d = data.dim
    if M0.shape != (d, d):
        raise NqfError(f"M0 must have shape (d={d}, d={d}), got {M0.shape}")
    if not np.all(np.isfinite(M0)):
        raise NqfError("M0 contains non-finite values (nan or inf)")
    scale = float(np.abs(M0).max()) if M0.size else 0.0
    if not np.allclose(M0, M0.T, rtol=0, atol=1e-8 * scale):
        raise NqfError("M0 must be symmetric (M0 = W0 W0^T)")
    if scale > 0 and np.linalg.eigvalsh(0.5 * (M0 + M0.T)).min() < -1e-8 * scale:
        raise NqfError("M0 must be positive semidefinite (M0 = W0 W0^T)")
    return jnp.asarray(0.5 * (M0 + M0.T), dtype=data.dtype)


def check_positive(name: str, value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise NqfError(f"{name} must be a number, got {value!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise NqfError(f"{name} must be a positive finite number, got {value}")
    return value


def check_steps(steps) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise NqfError(f"steps must be a non-negative integer, got {steps!r}")
    return int(steps)


def recorded_steps(steps: int, record_every: int | None, checkpoints: Sequence[int] | ArrayLike | None) -> np.ndarray:
    """Sorted recorded steps in [0, steps]."""
    if checkpoints is not None:
        cps = np.asarray(checkpoints)
        if cps.ndim != 1 or cps.size == 0 or not np.issubdtype(cps.dtype, np.integer):
            raise NqfError("checkpoints must be a non-empty 1-D sequence of integer steps")
        if cps.min() < 0 or cps.max() > steps or np.any(np.diff(cps) <= 0):
            raise NqfError(f"checkpoints must be strictly increasing steps within [0, {steps}]")
        return cps.astype(np.int64)
    every = 1 if record_every is None else record_every
    if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
        raise NqfError(f"record_every must be a positive integer, got {record_every!r}")
    cps = np.arange(0, steps + 1, every, dtype=np.int64)
    if cps[-1] != steps:
        cps = np.append(cps, steps)
    return cps


def check_basis(data: AbstractDataMatrices, basis) -> jax.Array | None:
    if basis is None:
        return None
    Q = np.asarray(basis)
    if Q.ndim == 1:
        Q = Q[:, None]
    if Q.ndim != 2 or Q.shape[0] != data.dim:
        raise NqfError(f"basis must have shape (d={data.dim}, m), got {Q.shape}")
    if not np.all(np.isfinite(Q)):
        raise NqfError("basis contains non-finite values")
    return jnp.asarray(Q, dtype=data.dtype)


def record_flags(data: AbstractDataMatrices, basis, record_M: bool | None, n_records: int) -> bool:
    record_M = basis is None if record_M is None else bool(record_M)
    if record_M and n_records * data.dim**2 > _MAX_RECORDED_ENTRIES:
        raise NqfError(
            f"recording M at {n_records} steps needs {n_records * data.dim**2:.3g} numbers; "
            "record less often (record_every) or record only occupations (basis=..., record_M=False)"
        )
    return record_M


def observe_M(data: AbstractDataMatrices, M, basis, record_M: bool):
    """Loss, M (if recorded) and occupations q_k^T M q_k at a state M."""
    loss = data.loss(M)
    occ = None if basis is None else jnp.einsum("im,ij,jm->m", basis, M, basis)
    return loss, (M if record_M else None), occ
