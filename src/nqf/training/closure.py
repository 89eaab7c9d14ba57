r"""Closure diagnostic: does training stay closed on M = W W^T under an optimizer?

Two runs of the same model and optimizer start from W0 and from W0 O (O a random
orthogonal n x n matrix), which have the same M(0) (docs/theory.md section 2). If the
optimizer's update is equivariant, U(G O) = U(G) O with its state transformed alike,
then W'(t) = W(t) O at every step and M'(t) = M(t): the dynamics close on M (plus
the optimizer state). Two numbers are reported per step:

(a) update defect  ||U(G_t O; S'_t) - U(G_t; S_t) O||_F / ||U(G_t; S_t)||_F along the
    first run (G_t = grad L(W_t)). S_t is the optimizer state fed G_0..G_{t-1}; S'_t is
    a second state fed the rotated gradients G_0 O..G_{t-1} O: the state the rotated
    run would carry if the model were equivariant. For an equivariant optimizer with
    linear state (momentum, Muon) S'_t = S_t O exactly; this isolates the optimizer.
(b) M defect  ||M(t) - M'(t)||_F / ||M(t)||_F between the two runs (model and
    optimizer together, rounding included).

Both use the same minibatches (SGD). The quadratic model is where closure holds
exactly (its gradient is 2 G(M) W); the full network is only permutation-symmetric, so
its M defect measures how far the rotation is from a symmetry. Judge closure per step
and over the plateaus (``until``): constant-lr Muon oscillates after convergence and
amplifies rounding there (docs/theory.md: 1e-14 through step 100, then 0.05).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import ArrayLike, Float, Real

from nqf.architectures.architecture import Architecture, check_width, init_weights
from nqf.core.arguments import check_seed
from nqf.core.errors import NqfError
from nqf.core.precision import resolve_dtype
from nqf.core.programs import to_device
from nqf.core.pytrees import register_fields
from nqf.core.sampling import minibatch_indices
from nqf.training.config import TrainConfig, make_optimizer
from nqf.training.runs import loss_function, prepare_targets, training_keys


def random_orthogonal(key: jax.Array, n: int, dtype=None) -> jax.Array:
    """Haar-random orthogonal n x n matrix (QR of a Gaussian matrix, signs fixed by diag R)."""
    dtype = resolve_dtype(dtype)
    q, r = jnp.linalg.qr(jax.random.normal(key, (n, n), dtype=dtype))
    return q * jnp.sign(jnp.diag(r))


@partial(jax.jit, static_argnums=(1, 2))
def _rotation(seed: jax.Array, n: int, dtype) -> jax.Array:
    """:func:`random_orthogonal` of PRNGKey(seed) as one program: eagerly its draw, QR and sign fix
    compiled six small programs (0.5 s of a fresh process's first ``compare``)."""
    return random_orthogonal(jax.random.PRNGKey(seed), n, dtype)


@dataclass(frozen=True)
class ClosureResult:
    """Per-step defects and their maxima up to step ``until``.

    update_defect: (steps,), defect (a) of the update at step t = 0..steps-1;
    m_defect: (steps + 1,), defect (b) of M after t updates; max_update_defect is over
    t < until, max_m_defect over t <= until (NaN propagates: a non-finite run shows).
    """

    config: TrainConfig
    until: int
    update_defect: np.ndarray = field(repr=False)
    m_defect: np.ndarray = field(repr=False)
    max_update_defect: float
    max_m_defect: float


register_fields(ClosureResult, ("until", "update_defect", "m_defect", "max_update_defect", "max_m_defect"), ("config",))


def closure_diagnostic(
    arch: Architecture,
    X: Float[ArrayLike, " N *input"],
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"],
    config: TrainConfig,
    until: int | None = None,
    rotation_seed: int = 1,
    W0: Float[ArrayLike, "d n"] | None = None,
) -> ClosureResult:
    """Train from W0 and W0 O with ``config`` (model, optimizer, lr, steps, ...) and measure closure.

    W0 defaults to the config's init (as in ``train``); O = random_orthogonal(PRNGKey(rotation_seed), n)
    (``rotation_seed``: an integer in [0, 2^32 - 1]).
    ``until`` (default: all steps) bounds the maxima, e.g. the end of the last switch-on.
    """
    rotation_seed = check_seed("rotation_seed", rotation_seed)
    dtype = resolve_dtype(config.dtype)
    n = config.width
    check_width(arch, n)
    until = config.steps if until is None else int(until)
    if not 0 <= until <= config.steps:
        raise NqfError(f"until must lie in [0, steps={config.steps}], got {until}")
    X = jnp.asarray(X, dtype=dtype)
    N = X.shape[0]
    Y = prepare_targets(Y, N, arch.outputs, dtype)
    init_key, batch_key = training_keys(config.seed)
    if W0 is None:
        W0 = init_weights(arch, init_key, n, config.sigma0, dtype)
    W0 = jnp.asarray(W0, dtype=dtype)
    if W0.shape != (arch.dim, n):
        raise NqfError(f"W0 must have shape (d={arch.dim}, n={n}), got {tuple(W0.shape)}")
    loss = loss_function(arch, X, Y, config.model)
    opt = make_optimizer(config)
    minibatch = config.batch_size is not None and config.batch_size < N
    if config.batch_size is not None and config.batch_size > N:
        raise NqfError(f"batch_size {config.batch_size} exceeds the number of samples {N}")

    def rel(diff, ref):
        num, den = jnp.linalg.norm(diff), jnp.linalg.norm(ref)
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), jnp.where(num > 0, jnp.inf, 0.0))

    O = _rotation(to_device(np.uint32(rotation_seed)), n, dtype)

    def run(W0, O):
        batches = (
            minibatch_indices(batch_key, N, config.batch_size, config.steps)
            if minibatch and config.batch_size is not None
            else None
        )
        grad = jax.grad(loss)

        def step(carry, t):
            W, S, S_rot, Wb, Sb = carry
            idx = batches[t] if batches is not None else None
            G = grad(W, idx)
            U, S_new = opt.update(G, S, W)
            U_rot, S_rot_new = opt.update(G @ O, S_rot, W @ O)
            update_defect = rel(U_rot - U @ O, U)
            m_defect = rel(W @ W.T - Wb @ Wb.T, W @ W.T)
            Ub, Sb_new = opt.update(grad(Wb, idx), Sb, Wb)
            carry = (optax.apply_updates(W, U), S_new, S_rot_new, optax.apply_updates(Wb, Ub), Sb_new)
            return carry, (update_defect, m_defect)

        Wb0 = W0 @ O
        carry0 = (W0, opt.init(W0), opt.init(Wb0), Wb0, opt.init(Wb0))
        (W, _, _, Wb, _), (upd, mdef) = jax.lax.scan(step, carry0, jnp.arange(config.steps))
        return upd, jnp.concatenate([mdef, rel(W @ W.T - Wb @ Wb.T, W @ W.T)[None]])

    upd, mdef = (np.asarray(a) for a in jax.jit(run)(W0, O))
    return ClosureResult(
        config=config,
        until=until,
        update_defect=upd,
        m_defect=mdef,
        max_update_defect=float(np.max(upd[:until])) if until > 0 else 0.0,
        max_m_defect=float(np.max(mdef[: until + 1])),
    )
