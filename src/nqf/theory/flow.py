r"""The flow of the order parameter M = W W^T: exact discrete maps and gradient flow.

For the quadratic model f = <W W^T, A(x)>, grad_W L = 2 G(M) W (THEORY.md section 2),
so every update that acts on W from the left by a matrix built from M closes on M:

- gradient descent, W+ = W - lr 2 G W = B W with B = I - 2 lr G(M):

      M+ = B M B                                                          (gd_map)

- minibatch SGD: the same map with G replaced by the minibatch mean G_b(M)  (sgd_map)

- heavy-ball momentum (optax.sgd(lr, momentum=beta): V+ = g + beta V, W+ = W - lr V+,
  g = 2 G W, V0 = 0). With P = W V^T and Q = V V^T (both d x d, P not symmetric),
  U = V+ and R = W U^T:

      R  = 2 M G + beta P                 (= W U^T)
      Q+ = 4 G M G + 2 beta (G P + P^T G) + beta^2 Q      (= U U^T)
      M+ = M - lr (R + R^T) + lr^2 Q+
      P+ = R - lr Q+                      (= W+ U^T)                      (momentum_map)

- gradient flow dW/dt = -lr grad_W L, in units of steps:

      dM/dt = -2 lr (G M + M G)                                           (continuous_flow)

All of these take M0 (d x d) and never the width n: their cost does not depend on n.
Each returns a :class:`FlowResult`.

Linear stability (``stable_lr_bound``): the M-map is the image of GD on W, so it is
linearly stable at M exactly when GD on W is: lr < 2 / lambda_max(H), H the Hessian of
W -> L(W W^T). With L dW = dW W^T + W dW^T (so L L^*[S] = 2 (S M + M S)),

    H = L^* K L + 2 G(M) (x) I_n          (squared loss; cross-entropy adds its l'' weight)

whose spectrum depends on M only (the rotations dW = W Omega are flat at a fixed
point, where G W = 0). Heavy-ball momentum is stable for lr lambda < 2 (1 + beta).
Near M = 0, H = 2 G(0) (= -2 C for squared loss): modes with c_k < 0 oscillate and
grow once lr > 1 / |c_k|. At an isolated active mode of the Lotka-Volterra
reduction H has the eigenvalue 4 K_kk m_k* = 4 c_k, i.e. lr < 1 / (2 c_k).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqf.theory.data_matrices import DataMatrices, PopulationDataMatrices
from nqf.core.errors import NqfError
from nqf.theory.chunked import ChunkedDataMatrices
from nqf.theory.moments import MomentDataMatrices
from nqf.core.sampling import minibatch_indices

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
        final: (d, d) M after the last step (at t_final for the continuous flow).
        M: (R, d, d) M at the recorded steps, or None when not recorded.
        occupations: (R, m) m_k = q_k^T M q_k for the columns of the basis, or None.
        state: the optimizer state at the end, besides M (momentum: (P, Q)); else None.
        stats: for the maps, (name, count) pairs: "stepped" (steps computed one by one),
            "jumped" (steps jumped), "jumps", "tries" (``nqf.theory.jumps``); else None. Static:
            not an array of the pytree.
    """

    steps: jax.Array
    loss: jax.Array
    final: jax.Array
    M: jax.Array | None = None
    occupations: jax.Array | None = None
    state: Any = None
    stats: tuple[tuple[str, int], ...] | None = field(default=None, metadata=dict(static=True))


# -- input checks -------------------------------------------------------------------


def _check_data(data) -> None:
    if not isinstance(data, (DataMatrices, PopulationDataMatrices, MomentDataMatrices, ChunkedDataMatrices)):
        raise NqfError(
            f"expected DataMatrices, MomentDataMatrices or PopulationDataMatrices, got {type(data).__name__}"
        )


def _check_M0(data, M0) -> jax.Array:
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


def _check_positive(name: str, value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise NqfError(f"{name} must be a number, got {value!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise NqfError(f"{name} must be a positive finite number, got {value}")
    return value


def _check_steps(steps) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise NqfError(f"steps must be a non-negative integer, got {steps!r}")
    return int(steps)


def _checkpoints(steps: int, record_every: int | None, checkpoints: Sequence[int] | None) -> np.ndarray:
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


def _check_basis(data, basis) -> jax.Array | None:
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


def _record_flags(data, basis, record_M: bool | None, n_records: int) -> bool:
    record_M = basis is None if record_M is None else bool(record_M)
    if record_M and n_records * data.dim**2 > _MAX_RECORDED_ENTRIES:
        raise NqfError(
            f"recording M at {n_records} steps needs {n_records * data.dim**2:.3g} numbers; "
            "record less often (record_every) or record only occupations (basis=..., record_M=False)"
        )
    return record_M


# -- the driver shared by the maps -----------------------------------------------------


def _observe_M(data, M, basis, record_M: bool):
    """Loss, M (if recorded) and occupations q_k^T M q_k at a state M."""
    loss = data.loss(M)
    occ = None if basis is None else jnp.einsum("im,ij,jm->m", basis, M, basis)
    return loss, (M if record_M else None), occ


def _observe(data, F, basis, record_M: bool):
    M = F @ F.T
    loss = data.loss(M)
    Mrec = M if record_M else None
    # ||Q^T F||^2 per mode: non-negative and accurate for tiny occupations next to O(1) ones
    occ = None if basis is None else jnp.sum((basis.T @ F) ** 2, axis=1)
    return loss, Mrec, occ


@partial(jax.jit, static_argnames=("step", "record_M"))
def _drive(step, record_M, data, carry0, hyper, gaps, remaining, basis):
    """Iterate ``carry = step(data, hyper, carry, t)``, observing M = F F^T (F = carry[0]) after each gap.

    gaps: (R,) steps between consecutive checkpoints (the first from step 0);
    remaining: steps after the last checkpoint. Returns (final carry, loss, M, occupations).
    """

    def run(carry, t0, count):
        return jax.lax.fori_loop(0, count, lambda i, c: step(data, hyper, c, t0 + i), carry)

    def between(state, gap):
        carry, t = state
        carry = run(carry, t, gap)
        return (carry, t + gap), _observe(data, carry[0], basis, record_M)

    (carry, t), (loss, Ms, occ) = jax.lax.scan(between, (carry0, jnp.zeros((), gaps.dtype)), gaps)
    carry = run(carry, t, remaining)
    return carry, loss, Ms, occ


def _sym(X):
    return 0.5 * (X + X.T)


# The maps carry a square factor F (d x d) with M = F F^T instead of M itself. Every map
# below acts on M through left multiplications of W (W+ = B W), so F+ = B F gives exactly
# M+ = B M B while keeping M positive semidefinite and the rounding of a mode's
# occupation relative to the mode itself, as in training W: propagating M directly loses
# a tiny mode to the absolute rounding of the O(1) modes (its occupation can turn
# negative and then grow). The cost is still d^3 per step, independent of the width n.


def _gd_step(data, hyper, carry, t):
    (F,) = carry
    lr = hyper
    G = data.gradient_matrix(F @ F.T)
    return (F - 2 * lr * G @ F,)


def _sgd_step(data, hyper, carry, t):
    (F,) = carry
    lr, indices = hyper
    G = data.gradient_matrix(F @ F.T, indices[t])
    return (F - 2 * lr * G @ F,)


def _momentum_step(data, hyper, carry, t):
    F, V = carry
    lr, beta = hyper
    G = data.gradient_matrix(F @ F.T)
    V_next = 2 * G @ F + beta * V  # optax trace: V+ = g + beta V, g = 2 G W
    return (F - lr * V_next, V_next)


def square_factor(M0=None, W0=None, dim: int | None = None) -> np.ndarray:
    """A factor F0 (d x r, r <= d) with F0 F0^T = M0.

    From W0 (d x n) exactly: W0 itself when n <= d, else the d x d R^T from the QR
    decomposition W0^T = Q R (W0 W0^T = R^T R). From M0 by its eigendecomposition (d x d).
    """
    if W0 is not None:
        W0 = np.asarray(W0, dtype=np.float64)
        d, n = W0.shape
        if n <= d:
            return W0  # d x n: the maps then cost d^2 n per step, not d^3
        return np.linalg.qr(W0.T, mode="r").T
    M0 = np.asarray(M0, dtype=np.float64)
    values, vectors = np.linalg.eigh(0.5 * (M0 + M0.T))
    return vectors * np.sqrt(np.clip(values, 0.0, None))


def _initial_factor(data, M0, factor) -> jax.Array:
    if factor is not None:
        factor = np.asarray(factor)
        d = data.dim
        if factor.ndim != 2 or factor.shape[0] != d or not 1 <= factor.shape[1] <= d:
            raise NqfError(f"the initial factor must have shape (d={d}, r) with 1 <= r <= d, got {factor.shape}")
        if not np.all(np.isfinite(factor)):
            raise NqfError("the initial factor contains non-finite values (nan or inf)")
        return jnp.asarray(factor, dtype=data.dtype)
    if M0 is None:
        raise NqfError("give the initial M0 (d x d) or its square factor")
    return jnp.asarray(square_factor(M0=np.asarray(_check_M0(data, M0))), dtype=data.dtype)


def _start_map(data, M0, factor, lr, steps):
    """The checked inputs every M map shares: (F0 (d, d) with F0 F0^T = M0, lr as F0's dtype, steps)."""
    F0 = _initial_factor(data, M0, factor)
    return F0, jnp.asarray(_check_positive("lr", lr), dtype=F0.dtype), _check_steps(steps)


STEPPINGS = ("every", "adaptive")


def _check_stepping(stepping: str) -> str:
    if stepping not in STEPPINGS:
        raise NqfError(f"unknown stepping {stepping!r}; choose one of {', '.join(STEPPINGS)}")
    return stepping


def _run_map(
    step, data, carry0, hyper, steps, record_every, checkpoints, basis, record_M, state_out=None,
    stepping="every", kind=None, jump_from=None,
):
    cps = _checkpoints(steps, record_every, checkpoints)
    basis = _check_basis(data, basis)
    record_M = _record_flags(data, basis, record_M, cps.size)
    gaps = np.diff(cps, prepend=0)
    # every step recorded: every step is computed anyway, so there is nothing to jump
    if _check_stepping(stepping) == "adaptive" and kind is not None and (gaps.max(initial=0) > 1 or steps > cps[-1]):
        carry, loss, Ms, occ, stats = _run_adaptive(
            step, kind, data, carry0, hyper, steps, cps, basis, record_M, jump_from
        )
    else:
        remaining = jnp.asarray(steps - cps[-1], dtype=jnp.int32)
        carry, loss, Ms, occ = _drive(
            step, record_M, data, carry0, hyper, jnp.asarray(gaps, dtype=jnp.int32), remaining, basis
        )
        stats = {"stepped": int(steps), "jumped": 0, "jumps": 0}
    return FlowResult(
        steps=jnp.asarray(cps),
        loss=loss,
        final=carry[0] @ carry[0].T,
        M=Ms,
        occupations=occ,
        state=None if state_out is None else state_out(carry),
        stats=tuple((name, int(count)) for name, count in stats.items()),
    )


@partial(jax.jit, static_argnames=("record_M",))
def _observe_factor(record_M, data, F, basis):
    return _observe(data, F, basis, record_M)


@partial(jax.jit, static_argnames=("record_M",))
def _observe_many(record_M, data, Ms, basis):
    return jax.vmap(lambda M: _observe_M(data, M, basis, record_M))(Ms)


def _bucket(count: int) -> int:
    return 1 << max(int(count) - 1, 0).bit_length()


def _run_adaptive(step, kind, data, carry, hyper, steps, cps, basis, record_M, jump_from=None):
    """The map to ``steps``, jumping where it is linear (``nqf.theory.jumps``), observed at ``cps``.

    Stretches that are stepped run as one compiled call each (``_drive`` over the records
    inside, padded to a power of two). Jumps are tried only once every mode of ``jump_from``
    is switched on; after a failed try the wait before the next one doubles, after an
    accepted jump the next jump is twice as long.
    """
    from nqf.theory.jumps import _FIRST_JUMP, _MIN_JUMP, factors_of, states_in_jump, try_jump

    d, rank, dtype = carry[0].shape[0], carry[0].shape[1], carry[0].dtype
    losses, Ms, occs = [None] * cps.size, [None] * cps.size, [None] * cps.size
    stats = {"stepped": 0, "jumped": 0, "jumps": 0, "tries": 0}
    # Jumps only once every mode has reached its threshold: a jump's affine model carries a
    # mode that is still tiny next to O(1) ones only to the rounding of the O(1) ones.
    switched = jump_from is None
    t, i, length, wait, next_try = 0, 0, _FIRST_JUMP, _MIN_JUMP, 0
    if cps[0] == 0:
        losses[0], Ms[0], occs[0] = (_host(a) for a in _observe_factor(record_M, data, carry[0], basis))
        i = 1
    while t < steps:
        if switched and t >= next_try and steps - t >= _MIN_JUMP:
            j = min(length, steps - t)
            stats["tries"] += 1
            model, Gamma, accepted = try_jump(kind, data, hyper, carry, j)
            if accepted:
                k = i + int(np.searchsorted(cps[i:], t + j, side="right"))
                states = states_in_jump(model, Gamma, np.append(cps[i:k] - t, j))
                if k > i:
                    count = k - i  # padded to a power of two: one compile per size class
                    padded = np.concatenate([states[:-1], np.repeat(states[-1:], _bucket(count) - count, axis=0)])
                    out = _observe_many(record_M, data, jnp.asarray(padded[:, :d, :d], dtype=dtype), basis)
                    _store(losses, Ms, occs, i, count, out)
                    i = k
                carry = factors_of(states[-1], len(carry), rank, dtype)
                t += j
                stats["jumped"] += j
                stats["jumps"] += 1
                length *= 2
                continue
            wait *= 2
            next_try = t + wait
        # step to the next try (or, before the switch-ons are over, a doubling stretch)
        end = min(next_try if (switched and next_try > t) else t + max(1024, t), steps)
        k = i + int(np.searchsorted(cps[i:], end, side="right"))
        gaps = np.diff(np.concatenate([[t], cps[i:k]])).astype(np.int32)
        count = k - i
        padded = np.concatenate([gaps, np.zeros(_bucket(count + 1) - count, dtype=np.int32)])
        after = end - (cps[k - 1] if count else t)
        carry, loss, M_rec, occ = _drive(
            step, record_M, data, carry, hyper, jnp.asarray(padded), jnp.asarray(after, jnp.int32), basis
        )
        if count:
            _store(losses, Ms, occs, i, count, (loss, M_rec, occ))
            i = k
        stats["stepped"] += end - t
        t = end
        if not switched and basis is not None:
            current = np.asarray(occ)[count] if after == 0 else np.asarray(_observe_factor(False, data, carry[0], basis)[2])
            switched = bool(np.all(current[: jump_from.size] >= jump_from))
    loss = jnp.asarray(np.stack(losses))
    Ms_out = jnp.asarray(np.stack(Ms)) if record_M else None
    occ = None if basis is None else jnp.asarray(np.stack(occs))
    return carry, loss, Ms_out, occ, stats


def _host(a):
    return None if a is None else np.asarray(a)


def _store(losses, Ms, occs, first: int, count: int, out) -> None:
    """Copy ``count`` observations (loss, M, occupations; leading axis) into the record lists."""
    loss, M, occ = (_host(a) for a in out)
    for n in range(count):
        losses[first + n] = loss[n]
        Ms[first + n] = None if M is None else M[n]
        occs[first + n] = None if occ is None else occ[n]


def gd_map(
    data: DataMatrices | PopulationDataMatrices,
    M0,
    lr: float,
    steps: int,
    record_every: int | None = None,
    checkpoints: Sequence[int] | None = None,
    basis=None,
    record_M: bool | None = None,
    factor=None,
    stepping: str = "every",
    jump_from=None,
) -> FlowResult:
    """Exact gradient descent on M: M+ = (I - 2 lr G(M)) M (I - 2 lr G(M)), ``steps`` times.

    Identical (up to rounding) to plain GD W <- W - lr grad_W L on the quadratic model
    from any W0 with W0 W0^T = M0, whatever the width.

    Args:
        data: the data matrices (sample or population).
        M0: (d, d) initial M = W0 W0^T (symmetric, positive semidefinite).
        lr: learning rate of GD on W.
        steps: number of updates.
        record_every: record every this many steps (default 1); the last step is always recorded.
        checkpoints: explicit increasing steps in [0, steps] to record instead.
        basis: optional (d, m) basis Q; occupations m_k = q_k^T M q_k are then recorded.
        record_M: record the full M (default: only when no basis is given).
        factor: optional (d, d) F0 with F0 F0^T = M0 instead of M0 (pass M0=None), e.g.
            ``square_factor(W0=W0)``, which takes it from the weights without rounding.
        stepping: ``every`` (every step computed: the reference) or ``adaptive`` (jump the
            stretches where the map is linear, ``nqf.theory.jumps``; only when records are sparse).
        jump_from: (g,) occupations of the first g basis modes (their switch-on thresholds):
            with ``adaptive``, jumps start only once every one is reached; None: from the start.
    """
    _check_data(data)
    F0, lr, steps = _start_map(data, M0, factor, lr, steps)
    return _run_map(
        _gd_step, data, (F0,), lr, steps, record_every, checkpoints, basis, record_M, stepping=stepping, kind="gd",
        jump_from=None if jump_from is None else np.asarray(jump_from, dtype=np.float64),
    )


def sgd_map(
    data: DataMatrices,
    M0,
    lr: float,
    steps: int,
    batch_size: int,
    key: jax.Array | None = None,
    indices=None,
    record_every: int | None = None,
    checkpoints: Sequence[int] | None = None,
    basis=None,
    record_M: bool | None = None,
    factor=None,
) -> FlowResult:
    """Exact minibatch SGD on M: M+ = (I - 2 lr G_b(M)) M (I - 2 lr G_b(M)).

    G_b is the mean over the step's minibatch, drawn by
    ``minibatch_indices(key, N, batch_size, steps)`` (the sampling training uses), or
    given directly as ``indices`` (steps, batch_size). The recorded loss is the full-data loss.
    """
    if not isinstance(data, (DataMatrices, ChunkedDataMatrices)):
        raise NqfError("sgd_map needs sample data matrices (DataMatrices): a population has no minibatches, nor have moments")
    F0, lr, steps = _start_map(data, M0, factor, lr, steps)
    if indices is None:
        if key is None:
            raise NqfError("sgd_map needs a PRNG key (or explicit minibatch indices)")
        indices = minibatch_indices(key, data.num_samples, batch_size, steps)
    indices = jnp.asarray(indices)
    if indices.ndim != 2 or indices.shape[0] < steps or not jnp.issubdtype(indices.dtype, jnp.integer):
        raise NqfError(
            f"minibatch indices must be integers of shape (steps={steps}, batch), got {tuple(indices.shape)}"
        )
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= data.num_samples):
        raise NqfError(f"minibatch indices must lie in [0, {data.num_samples})")
    return _run_map(_sgd_step, data, (F0,), (lr, indices), steps, record_every, checkpoints, basis, record_M)


def momentum_map(
    data: DataMatrices | PopulationDataMatrices,
    M0,
    lr: float,
    beta: float,
    steps: int,
    record_every: int | None = None,
    checkpoints: Sequence[int] | None = None,
    basis=None,
    record_M: bool | None = None,
    factor=None,
    stepping: str = "every",
    jump_from=None,
) -> FlowResult:
    """Exact heavy-ball momentum on M, the closed dynamics of ``optax.sgd(lr, momentum=beta)``.

    optax: V+ = g + beta V, W+ = W - lr V+, g = grad_W L = 2 G W, V0 = 0. The state
    (M, P = W V^T, Q = V V^T) is closed (module docstring); P0 = Q0 = 0. ``state`` of
    the result holds the final (P, Q). ``stepping`` and ``jump_from`` as in :func:`gd_map`.
    """
    _check_data(data)
    F0, lr, steps = _start_map(data, M0, factor, lr, steps)
    beta = float(beta)
    if not 0.0 <= beta < 1.0:
        raise NqfError(f"momentum beta must lie in [0, 1), got {beta}")
    hyper = (lr, jnp.asarray(beta, dtype=F0.dtype))
    carry0 = (F0, jnp.zeros_like(F0))  # (F, V_F) with V0 = 0
    # report the closed state (P, Q) = (W V^T, V V^T) = (F V_F^T, V_F V_F^T)
    return _run_map(
        _momentum_step, data, carry0, hyper, steps, record_every, checkpoints, basis, record_M,
        lambda c: (c[0] @ c[1].T, c[1] @ c[1].T), stepping=stepping, kind="momentum",
        jump_from=None if jump_from is None else np.asarray(jump_from, dtype=np.float64),
    )


# -- continuous time -------------------------------------------------------------------

_SOLVERS = ("tsit5", "dopri5", "dopri8")


def _vector_field(t, M, args):
    data, lr, _ = args
    G = data.gradient_matrix(M)
    GM = G @ M
    return -2 * lr * (GM + GM.T)


def _observe_with_M(t, M, args):
    return _observe_M(args[0], M, args[2], True)


def _observe_without_M(t, M, args):
    return _observe_M(args[0], M, args[2], False)


def continuous_flow(
    data: DataMatrices | PopulationDataMatrices,
    M0,
    lr: float,
    t_final: float,
    saveat=None,
    basis=None,
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

    _check_data(data)
    M0 = _check_M0(data, M0)
    lr = _check_positive("lr", lr)
    t_final = _check_positive("t_final", t_final)
    if solver not in _SOLVERS:
        raise NqfError(f"unknown solver {solver!r}; choose one of {', '.join(_SOLVERS)}")
    ts = np.linspace(0.0, t_final, 101) if saveat is None else np.asarray(saveat, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0 or ts.min() < 0 or ts.max() > t_final or np.any(np.diff(ts) <= 0):
        raise NqfError(f"saveat must be strictly increasing times within [0, t_final={t_final}]")
    basis = _check_basis(data, basis)
    record_M = _record_flags(data, basis, record_M, ts.size)
    double = M0.dtype == jnp.float64
    rtol = (1e-10 if double else 1e-6) if rtol is None else _check_positive("rtol", rtol)
    atol = (1e-12 if double else 1e-9) if atol is None else _check_positive("atol", atol)
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


# -- learning-rate stability -----------------------------------------------------------


@dataclass(frozen=True)
class LearningRateBound:
    """The largest learning rate for which GD (or heavy-ball momentum) is linearly stable.

    Attributes:
        bound: 2 (1 + beta) / curvature (inf when no direction is curved upward).
        curvature: the largest Hessian eigenvalue found over the checked points.
        curvature_start: 2 lambda_max(G(0)), the largest eigenvalue at M = 0.
        worst_point: index into the given points of the largest curvature, or None when it is at M = 0.
        beta: the momentum the bound is for (0 for GD and SGD).
    """

    bound: float
    curvature: float
    curvature_start: float
    worst_point: int | None
    beta: float

    def __float__(self) -> float:
        return self.bound


def _loss_of_w(data, W):
    return data.loss(W @ W.T)


@jax.jit
def _hessian_vector_product(data, W, V):
    return jax.jvp(lambda W: jax.grad(_loss_of_w, argnums=1)(data, W), (W,), (V,))[1]


# Up to this many entries of W (d^2) the Hessian is built densely from Hessian-vector
# products; above, its top eigenvalue comes from Lanczos (scipy's eigsh) on the products.
_DENSE_HESSIAN_LIMIT = 64


@jax.jit
def _hessian_of_w(data, W):
    """The dense Hessian (d^2, d^2) of W -> L(W W^T), one Hessian-vector product per direction."""
    d = W.shape[0]
    directions = jnp.eye(d * d, dtype=W.dtype).reshape(d * d, d, d)
    columns = jax.vmap(lambda V: _hessian_vector_product(data, W, V))(directions)
    return columns.reshape(d * d, d * d).T


@jax.jit
def _top_gradient_eigenvalue(data, M):
    return jnp.linalg.eigvalsh(data.gradient_matrix(M))[-1]


def _hessian_top(data, M: np.ndarray) -> float:
    """lambda_max of the Hessian of W -> L(W W^T) at W = M^{1/2} (d x d), and of 2 G(M).

    The extra 2 G(M) accounts for width beyond rank(M): directions of W orthogonal to
    its row space feel only 2 G (conservative when n = rank M exactly). The Hessian is
    never built when d^2 > _DENSE_HESSIAN_LIMIT: Lanczos on Hessian-vector products (each
    costs one gradient and its derivative, i.e. one pass of the data route) finds the top.
    """
    evals, evecs = np.linalg.eigh(0.5 * (M + M.T))
    W = jnp.asarray((evecs * np.sqrt(np.clip(evals, 0.0, None))) @ evecs.T, dtype=data.dtype)
    d = W.shape[0]
    top_g = 2.0 * float(_top_gradient_eigenvalue(data, W @ W.T))
    if d * d <= _DENSE_HESSIAN_LIMIT:
        H = np.asarray(_hessian_of_w(data, W), dtype=np.float64)
        top_h = float(np.linalg.eigvalsh(0.5 * (H + H.T))[-1])
    else:
        from scipy.sparse.linalg import LinearOperator, eigsh

        def matvec(v):
            V = jnp.asarray(np.reshape(v, (d, d)), dtype=data.dtype)
            return np.asarray(_hessian_vector_product(data, W, V), dtype=np.float64).ravel()

        op = LinearOperator((d * d, d * d), matvec=matvec, dtype=np.float64)
        # a fixed start vector: the bound is then a deterministic function of the data
        start = np.cos(np.arange(1, d * d + 1, dtype=np.float64))
        top_h = float(eigsh(op, k=1, which="LA", tol=1e-10, v0=start, return_eigenvectors=False)[0])
    return max(top_h, top_g)


def stable_lr_bound(data: DataMatrices | PopulationDataMatrices, points=None, beta: float = 0.0) -> LearningRateBound:
    """Largest lr for which GD on M (equivalently on W) is linearly stable at M = 0 and at ``points``.

    GD is linearly stable at M when lr < 2 / lambda_max(H(M)), H the Hessian of
    W -> L(W W^T) at any W with W W^T = M (module docstring); heavy-ball momentum beta
    when lr < 2 (1 + beta) / lambda_max(H). At M = 0, H = 2 G(0) (x) I (= -2 C for squared
    loss). Negative eigenvalues are the intended escape from the saddle and do not count.

    points: None, one M (d, d), or a stack (R, d, d) of points to check, typically the
    end of training predicted by the flow, e.g.
    ``continuous_flow(data, M0, lr, steps).final`` (the gradient-flow trajectory does not
    depend on whether lr is stable). At a converged isolated mode the bound is 1/(2 c_k).
    Intermediate plateaus (saddles) are only checked if they are among ``points``.
    SGD is judged by the full-batch bound.
    """
    _check_data(data)
    beta = float(beta)
    if not 0.0 <= beta < 1.0:
        raise NqfError(f"momentum beta must lie in [0, 1), got {beta}")
    d = data.dim
    zero = jnp.zeros((d, d), dtype=data.dtype)
    curvature_start = 2.0 * float(_top_gradient_eigenvalue(data, zero))
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
    bound = float("inf") if curvature <= 0 else 2.0 * (1.0 + beta) / curvature
    return LearningRateBound(bound, curvature, curvature_start, worst, beta)
