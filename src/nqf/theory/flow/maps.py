r"""The exact discrete maps on M = W W^T (``nqf.theory.flow`` has the equations) of every optimizer
that closes on M (:func:`optimizer_map`; :func:`gd_map` and :func:`sgd_map` for the two plain
ones), stepped one by one (``_drive``) or, with ``stepping="adaptive"``, jumping the stretches
where the map is linear (``_run_adaptive``, ``nqf.theory.flow.jumps``).

Each step is the optimizer's own (``AbstractClosedOptimizer.flow_step``) applied to the factor
F (M = F F^T) and its buffers, with the gradient 2 G(M) F of the loss at W = F.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, TypeGuard

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Int

from nqf.core.errors import NqfError
from nqf.core.memory import can_jump
from nqf.core.names import STEPPINGS as STEPPINGS
from nqf.core.programs import bucket_length, to_device
from nqf.core.sampling import minibatch_indices
from nqf.optimizers import AbstractClosedOptimizer, closed_optimizer
from nqf.theory.data_matrices.moments import FactoredSecond, MomentDataMatrices
from nqf.theory.data_matrices.protocol import AbstractDataMatrices, AbstractSampleDataMatrices
from nqf.theory.flow.base import (
    FlowResult,
    check_basis,
    check_data,
    check_M0,
    check_positive,
    check_steps,
    observe_M,
    record_flags,
    recorded_steps,
)


@partial(jax.jit, static_argnames=("optimizer", "record_M"))
def _drive(optimizer, record_M, data: AbstractDataMatrices, carry0, hyper, gaps, remaining, basis):
    """Iterate ``carry = _step(optimizer, data, hyper, carry, t)``, observing M = F F^T (F = carry[0]) after each gap.

    gaps: (R,) steps between consecutive checkpoints (the first from step 0);
    remaining: steps after the last checkpoint. Returns (final carry, loss, M, occupations).
    """

    def run(carry, t0, count):
        return jax.lax.fori_loop(0, count, lambda i, c: _step(optimizer, data, hyper, c, t0 + i), carry)

    def between(state, gap):
        carry, t = state
        carry = run(carry, t, gap)
        return (carry, t + gap), _observe_flow(data, carry[0], basis, record_M)

    (carry, t), (loss, Ms, occ) = jax.lax.scan(between, (carry0, jnp.zeros((), gaps.dtype)), gaps)
    carry = run(carry, t, remaining)
    return carry, loss, Ms, occ


@jax.jit
def _buffer_state(carry):
    """The closed state of the buffers B (a momentum V): (F B^T, B B^T) for each, in order (heavy
    ball: (P, Q) = (W V^T, V V^T)), one program."""
    F = carry[0]
    return tuple(x for B in carry[1:] for x in (F @ B.T, B @ B.T))


@jax.jit
def _gram(F):
    """M = F F^T as one program (eager, the transpose and the product compile one each)."""
    return F @ F.T


# The maps carry a square factor F (d x d) with M = F F^T instead of M itself. Every map
# below acts on M through left multiplications of W (W+ = B W), so F+ = B F gives exactly
# M+ = B M B while keeping M positive semidefinite and the rounding of a mode's
# occupation relative to the mode itself, as in training W: propagating M directly loses
# a tiny mode to the absolute rounding of the O(1) modes (its occupation can turn
# negative and then grow). The cost is still d^3 per step, independent of the width n.


def _blockwise(data: AbstractDataMatrices) -> TypeGuard[MomentDataMatrices]:
    """Whether G(F F^T) F is taken from the coupled blocks alone (``MomentDataMatrices.gradient_times``):
    for S kept factored (large d, a few coupled blocks), where F F^T and G F at d x d cost 4 d^2 r
    against 4 p r. Elsewhere the dense products, as before (the same rounding)."""
    return isinstance(data, MomentDataMatrices) and isinstance(data.second, FactoredSecond)


def _observe_flow(data: AbstractDataMatrices, F, basis, record_M: bool):
    """Loss, M = F F^T (if recorded) and occupations ||Q^T F||^2 per mode (non-negative, and
    accurate for tiny occupations next to O(1) ones). On blockwise data without M recorded, the
    loss from F's blocks (``MomentDataMatrices.loss_of_factor``) instead of forming F F^T (d x d)."""
    occ = None if basis is None else jnp.sum((basis.T @ F) ** 2, axis=1)
    if _blockwise(data) and not record_M:
        return data.loss_of_factor(F), None, occ
    M = F @ F.T
    return data.loss(M), (M if record_M else None), occ


def _step(optimizer: AbstractClosedOptimizer, data: AbstractDataMatrices, hyper, carry, t):
    """One step of ``optimizer`` on the carry (F, buffers...): its own update with the gradient
    2 G(M) F at M = F F^T (G of the step's minibatch when ``hyper`` holds minibatch indices)."""
    lr, beta, indices = hyper
    F = carry[0]
    if indices is not None:
        gradient = 2 * data.gradient_matrix(F @ F.T, indices[t]) @ F  # type: ignore[call-arg]
    elif _blockwise(data):
        gradient = 2 * data.gradient_times(F)
    else:
        gradient = 2 * data.gradient_matrix(F @ F.T) @ F
    return optimizer.flow_step(gradient, carry, lr, beta)


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
        return np.linalg.qr(W0.T, mode="r").T  # type: ignore[attr-defined]  # mode="r" returns R alone, not QRResult
    M0 = np.asarray(M0, dtype=np.float64)
    values, vectors = np.linalg.eigh(0.5 * (M0 + M0.T))
    return vectors * np.sqrt(np.clip(values, 0.0, None))


def _initial_factor(data: AbstractDataMatrices, M0, factor) -> jax.Array:
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
    return jnp.asarray(square_factor(M0=np.asarray(check_M0(data, M0))), dtype=data.dtype)


def _start_map(data: AbstractDataMatrices, M0, factor, lr, steps):
    """The checked inputs every M map shares: (F0 (d, d) with F0 F0^T = M0, lr as F0's dtype, steps)."""
    F0 = _initial_factor(data, M0, factor)
    return F0, jnp.asarray(check_positive("lr", lr), dtype=F0.dtype), check_steps(steps)


def _check_stepping(stepping: str) -> str:
    if stepping not in STEPPINGS:
        raise NqfError(f"unknown stepping {stepping!r}; choose one of {', '.join(STEPPINGS)}")
    return stepping


def _run_map(
    optimizer: AbstractClosedOptimizer,
    data: AbstractDataMatrices,
    carry0,
    hyper,
    steps,
    record_every,
    checkpoints,
    basis,
    record_M,
    stepping="every",
    jump_from=None,
    jump_groups=None,
):
    cps = recorded_steps(steps, record_every, checkpoints)
    basis = check_basis(data, basis)
    record_M = record_flags(data, basis, record_M, cps.size)
    gaps = np.diff(cps, prepend=0)
    # every step recorded: every step is computed anyway, so there is nothing to jump; nor is
    # there when the Gram state is too large to linearise (``_jumpable``): its tries were refused
    if (
        _check_stepping(stepping) == "adaptive"
        and hyper[2] is None  # minibatches: every step has its own batch, nothing to jump
        and _jumpable(optimizer, data.dim)
        and (gaps.max(initial=0) > 1 or steps > cps[-1])
    ):
        carry, loss, Ms, occ, stats = _run_adaptive(
            optimizer, data, carry0, hyper, steps, cps, basis, record_M, jump_from, jump_groups
        )
    else:
        remaining = to_device(steps - cps[-1], dtype=np.int32)
        # gaps padded with zeros to a bucketed length (another horizon reuses the program): a
        # zero gap takes no step and repeats the last observation, which is dropped below
        padded = np.zeros(bucket_length(gaps.size), dtype=np.int32)
        padded[: gaps.size] = gaps
        carry, loss, Ms, occ = _drive(optimizer, record_M, data, carry0, hyper, to_device(padded), remaining, basis)
        loss, Ms, occ = (None if a is None else to_device(np.asarray(a)[: gaps.size]) for a in (loss, Ms, occ))
        stats = {"stepped": int(steps), "jumped": 0, "jumps": 0}
    return FlowResult(
        steps=to_device(cps),
        loss=loss,
        final=_gram(carry[0]),
        M=Ms,
        occupations=occ,
        state=_buffer_state(carry) if len(carry) > 1 else None,
        stats=tuple((name, int(count)) for name, count in stats.items()),
    )


def _jumpable(optimizer: AbstractClosedOptimizer, d: int) -> bool:
    """Whether a jump can be tried at all: the packed Gram state (D(D+1)/2 entries, D = d times
    the carry's blocks) within ``nqf.core.memory.MAX_KRYLOV_STATE``. Up to MAX_JUMP_STATE its
    linearisation takes s products of one step each and its powers O(s^3 log j); beyond, its
    Krylov model KRYLOV_DIM products (``nqf.theory.flow.jumps``). Past MAX_KRYLOV_STATE every try
    would be refused (the adaptive loop would only split the stepping), so the map steps."""
    return can_jump(d, 1 + optimizer.buffers)


@partial(jax.jit, static_argnames=("record_M",))
def _observe_factor(record_M, data: AbstractDataMatrices, F, basis):
    return _observe_flow(data, F, basis, record_M)


@partial(jax.jit, static_argnames=("record_M",))
def _observe_many(record_M, data: AbstractDataMatrices, Ms, basis):
    return jax.vmap(lambda M: observe_M(data, M, basis, record_M))(Ms)


def _run_adaptive(
    optimizer, data: AbstractDataMatrices, carry, hyper, steps, cps, basis, record_M, jump_from=None, jump_groups=None
):
    """The map to ``steps``, jumping where it is linear (``nqf.theory.flow.jumps``), observed at ``cps``.

    Stretches that are stepped run as one compiled call each (``_drive`` over the records
    inside, padded to a power of two). Jumps are tried only once every mode of ``jump_from``
    is switched on (each group of ``jump_groups`` by its total); after a failed try the wait
    before the next one doubles, after an accepted jump the next jump is twice as long.
    """
    from nqf.theory.flow.jumps import FIRST_JUMP, MIN_JUMP, factors_of, states_in_jump, try_jump

    d, rank, dtype = carry[0].shape[0], carry[0].shape[1], carry[0].dtype
    # filled in checkpoint by checkpoint (host arrays; Ms / occs stay None when not recorded)
    losses: list[Any] = [None] * cps.size
    Ms: list[Any] = [None] * cps.size
    occs: list[Any] = [None] * cps.size
    stats = {"stepped": 0, "jumped": 0, "jumps": 0, "tries": 0}
    # Jumps only once every mode has reached its threshold: a jump's affine model carries a
    # mode that is still tiny next to O(1) ones only to the rounding of the O(1) ones.
    switched = jump_from is None
    t, i, length, wait, next_try = 0, 0, FIRST_JUMP, MIN_JUMP, 0
    if cps[0] == 0:
        losses[0], Ms[0], occs[0] = (_host(a) for a in _observe_factor(record_M, data, carry[0], basis))
        i = 1
    while t < steps:
        if switched and t >= next_try and steps - t >= MIN_JUMP:
            j = min(length, steps - t)
            stats["tries"] += 1
            model, Gamma, accepted = try_jump(optimizer, data, hyper, carry, j)
            if accepted:
                k = i + int(np.searchsorted(cps[i:], t + j, side="right"))
                states = states_in_jump(model, Gamma, np.append(cps[i:k] - t, j))
                if k > i:
                    count = k - i  # padded to a power of two: one compile per size class
                    padded = np.concatenate(
                        [states[:-1], np.repeat(states[-1:], bucket_length(count, floor=1) - count, axis=0)]
                    )
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
        padded = np.concatenate([gaps, np.zeros(bucket_length(count + 1, floor=1) - count, dtype=np.int32)])
        after = end - (cps[k - 1] if count else t)
        carry, loss, M_rec, occ = _drive(
            optimizer, record_M, data, carry, hyper, jnp.asarray(padded), jnp.asarray(after, jnp.int32), basis
        )
        if count:
            _store(losses, Ms, occs, i, count, (loss, M_rec, occ))
            i = k
        stats["stepped"] += end - t
        t = end
        if not switched and basis is not None:
            current = (
                np.asarray(occ)[count] if after == 0 else np.asarray(_observe_factor(False, data, carry[0], basis)[2])
            )
            groups = jump_groups if jump_groups is not None else [(k,) for k in range(jump_from.size)]
            reached = current[: jump_from.size]
            switched = all(float(np.sum(reached[list(g)])) >= float(np.sum(jump_from[list(g)])) for g in groups)
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


def optimizer_map(
    data: AbstractDataMatrices,
    M0: Float[ArrayLike, "d d"] | None,
    lr: float,
    steps: int,
    optimizer: str | AbstractClosedOptimizer = "gd",
    beta: float | None = None,
    record_every: int | None = None,
    checkpoints: Sequence[int] | Int[ArrayLike, " c"] | None = None,
    basis: Float[ArrayLike, "d m"] | None = None,
    record_M: bool | None = None,
    factor: Float[ArrayLike, "d r"] | None = None,
    stepping: str = "every",
    jump_from: Float[ArrayLike, " g"] | None = None,
    jump_groups: Sequence[Sequence[int]] | None = None,
) -> FlowResult:
    """The exact map on M of a full-batch ``optimizer`` that closes on M (``nqf.optimizers``:
    gd, momentum, nesterov), ``steps`` times from M0; ``beta`` its momentum (None: its default).

    GD: M+ = (I - 2 lr G(M)) M (I - 2 lr G(M)). With a momentum buffer V (V0 = 0) the state
    (M, P = W V^T, Q = V V^T) is closed (``nqf.theory.flow``'s docstring); ``state`` of the
    result holds its final buffer blocks (P, Q). Identical (up to rounding) to training W with
    the optimizer on the quadratic model from any W0 with W0 W0^T = M0, whatever the width.

    Args:
        data: the data matrices (sample or population).
        M0: (d, d) initial M = W0 W0^T (symmetric, positive semidefinite).
        lr: learning rate on W.
        steps: number of updates.
        optimizer: its name or object.
        beta: its momentum (optimizers with a buffer), in [0, 1).
        record_every: record every this many steps (default 1); the last step is always recorded.
        checkpoints: explicit increasing steps in [0, steps] to record instead.
        basis: optional (d, m) basis Q; occupations m_k = q_k^T M q_k are then recorded.
        record_M: record the full M (default: only when no basis is given).
        factor: optional (d, d) F0 with F0 F0^T = M0 instead of M0 (pass M0=None), e.g.
            ``square_factor(W0=W0)``, which takes it from the weights without rounding.
        stepping: ``every`` (every step computed: the reference) or ``adaptive`` (jump the
            stretches where the map is linear, ``nqf.theory.flow.jumps``; only when records are sparse).
        jump_from: (g,) occupations of the first g basis modes (their switch-on thresholds):
            with ``adaptive``, jumps start only once every one is reached; None: from the start.
        jump_groups: degenerate groups of those modes (index tuples, ``nqf.core.measure.mode_groups``):
            a group counts as reached when its total occupation reaches its total threshold (how
            it splits among its members depends on W0); None: every mode a group of its own.
    """
    opt = closed_optimizer(optimizer)
    if opt.minibatches:
        raise NqfError(f"optimizer {opt.name} draws minibatches: use sgd_map, which replays them")
    check_data(data)
    F0, lr, steps = _start_map(data, M0, factor, lr, steps)
    beta = opt.beta_of(beta)
    if not 0.0 <= beta < 1.0:
        raise NqfError(f"{opt.name} beta must lie in [0, 1), got {beta}")
    zero = to_device(np.zeros(F0.shape, dtype=F0.dtype))
    return _run_map(
        opt,
        data,
        (F0, *(zero,) * opt.buffers),
        (lr, jnp.asarray(beta, dtype=F0.dtype), None),
        steps,
        record_every,
        checkpoints,
        basis,
        record_M,
        stepping=stepping,
        jump_from=None if jump_from is None else np.asarray(jump_from, dtype=np.float64),
        jump_groups=jump_groups,
    )


def gd_map(
    data: AbstractDataMatrices, M0: Float[ArrayLike, "d d"] | None, lr: float, steps: int, **options
) -> FlowResult:
    """Exact gradient descent on M: M+ = (I - 2 lr G(M)) M (I - 2 lr G(M)), ``steps`` times
    (:func:`optimizer_map` of ``gd``; ``options`` are its keyword arguments after ``beta``)."""
    return optimizer_map(data, M0, lr, steps, "gd", **options)


def sgd_map(
    data: AbstractSampleDataMatrices,
    M0: Float[ArrayLike, "d d"] | None,
    lr: float,
    steps: int,
    batch_size: int,
    key: jax.Array | None = None,
    indices: Int[ArrayLike, "steps batch"] | None = None,
    record_every: int | None = None,
    checkpoints: Sequence[int] | Int[ArrayLike, " c"] | None = None,
    basis: Float[ArrayLike, "d m"] | None = None,
    record_M: bool | None = None,
    factor: Float[ArrayLike, "d r"] | None = None,
) -> FlowResult:
    """Exact minibatch SGD on M: M+ = (I - 2 lr G_b(M)) M (I - 2 lr G_b(M)).

    G_b is the mean over the step's minibatch, drawn by
    ``minibatch_indices(key, N, batch_size, steps)`` (the sampling training uses), or
    given directly as ``indices`` (steps, batch_size). The recorded loss is the full-data loss.
    """
    if not isinstance(data, AbstractSampleDataMatrices):
        raise NqfError(
            "sgd_map needs sample data matrices (nqf.data_matrices): a population has no minibatches, nor have moments"
        )
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
    hyper = (lr, jnp.zeros((), dtype=F0.dtype), indices)
    return _run_map(closed_optimizer("sgd"), data, (F0,), hyper, steps, record_every, checkpoints, basis, record_M)
