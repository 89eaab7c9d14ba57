r"""Training the full network or its quadratic model, with optax optimizers, in one jitted scan.

Both models minimise the squared loss

    L(W) = (1/2) mean_n sum_c (f_c(x_n; W) - y_nc)^2,

with f = ``network_batch(arch, W, X)`` (model ``"network"``: matrix products for a unit with a readout) or
f = ``structure(arch, X).forms(W W^T)`` (model ``"quadratic"``, docs/theory.md section 1).
Gradients come from autodiff in both cases (for the quadratic model autodiff gives
2 G(M) W, G = contract(f - y); tests compare with the explicit M-map).

Optimizers and their settings: :mod:`nqf.training.config`.

Records (``TrainResult``) are taken at checkpoint steps t (the state after t updates):
every step by default, or about ``checkpoints`` log-spaced plus linear steps, always
including 0 and ``steps``. At each: the full-data loss, the occupations
m_k = q_k^T M q_k = ||W^T q_k||^2 of the columns of a basis Q (d x m; the theory's
modes, passed in), ||W||_F and the Frobenius norm of each parameter block.

Divergence is never silent. A run diverges at step t when the (minibatch) loss at the
state after t updates is non-finite or above ``DIVERGENCE_FACTOR`` (100) times the
full-data loss at W0 (when that is > 0), or its gradient is non-finite. The state is
then frozen (a flag in the scan carry), ``diverged_at = t``, and the records from step t
on are NaN, so a blown-up state never counts as a switch-on. 100 x L(W0): the squared
loss of a stable run stays below L(W0) ~ L(0) apart from transients (GD on M decreases
L; momentum and Adam overshoot by O(1) factors); Adam at lr 100 on the staircase reaches
1e3 x L(W0) within a few steps.
``train_grid`` (:mod:`nqf.training.grid`) runs the same compiled run over init scales and seeds.

Compiled runs are reused. ``train`` and ``train_grid`` keep one jitted function per
(architecture, static settings) in a small module-level cache; data X, Y, the basis, W0,
the batch key and the learning rate are its traced arguments, so calls that differ only in seed, sigma0, lr, W0
or data values, with equal shapes and dtypes, run the same executable without compiling
again. The static settings are optimizer, steps, batch_size, beta, eps, model and
checkpoints. A user's own optax transformation (``TrainConfig.optimizer``) is keyed by the
object itself (:class:`OwnTransform`: equal only to itself, and held by the key, so its id is
never reused while the entry lives): two transformations never share a compiled run, and the
persistent compilation cache on disk is keyed by the lowered program, which holds what the
transformation computes. An architecture is keyed by what determines its results, not by its identity
(``nqf.architectures.architecture.arch_key``): name, options, input shape, outputs, parameter
template, and a hash of the jaxprs its functions trace to, so two modules of one class that
compute different things never share a compiled run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import ArrayLike, Float, Real

from nqf.architectures.architecture import (
    Architecture,
    arch_key,
    check_width,
    init_weights,
    network_batch,
    structure,
)
from nqf.architectures.structure import with_shared_factors
from nqf.core.arguments import check_entry_arguments
from nqf.core.cache import ensure_default_cache
from nqf.core.errors import NqfError
from nqf.core.memory import BYTES, check_memory
from nqf.core.precision import occupation_floor, resolve_dtype, underflow_remedy
from nqf.core.programs import LruCache, to_device
from nqf.core.pytrees import register_fields
from nqf.core.sampling import minibatch_indices, training_keys
from nqf.optimizers import optimizer_record
from nqf.theory.data_matrices.checks import checked_samples
from nqf.training.config import (
    DIVERGENCE_FACTOR,
    TrainConfig,
    checkpoint_count,
    checkpoint_steps,
)


def prepare_targets(Y, num_samples: int, outputs: int, dtype) -> jax.Array:
    Y = jnp.asarray(Y, dtype=dtype)
    if Y.ndim == 1 and outputs == 1:
        Y = Y[:, None]
    if Y.shape != (num_samples, outputs):
        raise NqfError(f"targets must have shape (N={num_samples}, K={outputs}), got {tuple(Y.shape)}")
    return Y


def loss_function(
    arch: Architecture, X: jax.Array, Y: jax.Array, model: str
) -> Callable[[jax.Array, jax.Array | None], jax.Array]:
    """``loss(W, idx)``: L on the samples ``idx`` (None: all) for the network or the quadratic model."""
    return _model_loss(arch, model, model_inputs(arch, X, model), Y)


def model_inputs(arch: Architecture, X: jax.Array, model: str):
    """What the model's loss reads: the samples X (network) or their structure (quadratic), its
    shared factors marked (``with_shared_factors``: a perceptron's quadratic model reads its readout
    and inputs once, not per sample and output)."""
    return with_shared_factors(structure(arch, X)) if model == "quadratic" else X


def _model_loss(arch: Architecture, model: str, inputs, Y: jax.Array):
    """``loss(W, idx)`` from the model's inputs: the structure S (quadratic) or the samples X (network)."""
    if model == "quadratic":
        S = inputs

        def quadratic_loss(W, idx=None):
            s = S if idx is None else jax.tree_util.tree_map(lambda a: a[idx], S)
            y = Y if idx is None else Y[idx]
            f = s.forms(W @ W.T)
            return 0.5 * jnp.mean(jnp.sum((f - y) ** 2, axis=-1))

        return quadratic_loss

    X = inputs

    def loss(W, idx=None):
        x = X if idx is None else X[idx]
        y = Y if idx is None else Y[idx]
        f = network_batch(arch, W, x)
        return 0.5 * jnp.mean(jnp.sum((f - y) ** 2, axis=-1))

    return loss


@dataclass(frozen=True)
class RunRecords:
    """What a run records at ``steps`` (R checkpoints), shared by :class:`TrainResult` (one run)
    and ``nqf.training.grid.TrainingGrid`` (a grid of runs: the same arrays with two leading axes).

    loss: (R,); occupations: (R, m) for the basis columns (m = 0 without a basis);
    weight_norm: (R,) ||W||_F; block_norms: (R, B) per parameter block (``block_names``);
    W_final: (d, n) the last (or frozen) weights.
    """

    config: TrainConfig
    steps: np.ndarray
    loss: np.ndarray
    occupations: np.ndarray
    weight_norm: np.ndarray
    block_norms: np.ndarray
    block_names: tuple[str, ...]
    W_final: np.ndarray = field(repr=False)


# the records of each run (of a grid: per point)
PER_RUN = ("loss", "occupations", "weight_norm", "block_norms", "W_final")


@dataclass(frozen=True)
class TrainResult(RunRecords):
    """One run's records (:class:`RunRecords`).

    diverged_at: the first step whose loss or gradient was non-finite or whose loss exceeded
    DIVERGENCE_FACTOR x the initial loss, or None (records from it on are NaN).
    """

    diverged_at: int | None

    @property
    def diverged(self) -> bool:
        return self.diverged_at is not None


register_fields(
    TrainResult,
    ("steps", "loss", "occupations", "weight_norm", "block_norms", "diverged_at", "W_final"),
    ("config", "block_names"),
)


def check_scale(config: TrainConfig, dtype, sigma0s) -> None:
    """M = W W^T ~ n sigma0^2 must be resolved: at least ``occupation_floor(dtype)`` = tiny / u."""
    floor = occupation_floor(dtype)
    tiny = float(np.finfo(dtype).tiny)
    for s in np.atleast_1d(np.asarray(sigma0s, dtype=np.float64)):
        if 0 < s and math.log(config.width) + 2.0 * math.log(s) < math.log(floor):
            smallest = math.sqrt(floor / config.width)
            n_s2 = math.exp(math.log(config.width) + 2.0 * math.log(s))
            raise NqfError(
                f"sigma0 = {s:g} underflows {np.dtype(dtype).name}: M ~ n sigma0^2 = {config.width} * {s:g}^2 "
                f"= {n_s2:.3g} is below tiny / u = {floor:.3g} (smallest normal {tiny:.3g}); "
                f"{underflow_remedy(dtype, smallest)}"
            )


class OwnTransform:
    """A user's own optax transformation in a cache key: equal only to a key of the same object,
    hashed by its identity, and holding it (so that its id cannot be reused while the key lives).
    Two transformations that print alike (``optax.sgd(0.1)`` twice) are two keys: a compiled run
    is never shared between objects whose computations nqf cannot tell apart."""

    __slots__ = ("transform",)

    def __init__(self, transform) -> None:
        self.transform = transform

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OwnTransform) and other.transform is self.transform

    def __hash__(self) -> int:
        return id(self.transform)

    def __repr__(self) -> str:
        return f"OwnTransform({type(self.transform).__name__} at {id(self.transform):#x})"


class _Static(NamedTuple):
    """The settings a compiled run depends on besides array shapes and dtypes (hashable)."""

    optimizer: str | OwnTransform
    steps: int
    batch_size: int | None
    beta: float | None
    eps: float | None
    model: str
    checkpoints: int | None


def static_settings(config: TrainConfig) -> _Static:
    optimizer = config.optimizer
    return _Static(
        optimizer if isinstance(optimizer, str) else OwnTransform(optimizer),
        int(config.steps),
        None if config.batch_size is None else int(config.batch_size),
        config.effective_beta,
        config.eps,
        config.model,
        None if config.checkpoints is None else int(config.checkpoints),
    )


_COMPILED = LruCache(32)  # key -> (jitted function, checkpoint steps, block names)
TRACES = [0]


def counted_jit(run: Callable) -> Callable:
    """``jax.jit(run)``, each trace counted in ``TRACES`` (each trace is followed by one compilation)."""

    def traced(*args):
        TRACES[0] += 1
        return run(*args)

    return jax.jit(traced)


def _trace_count() -> int:
    """How often a cached run has been traced."""
    return TRACES[0]


def _clear_compiled() -> None:
    """Forget every cached compiled run."""
    _COMPILED.clear()


def cached_program(key: tuple, build: Callable[[], tuple]) -> tuple:
    """``build()`` for a key not seen before (the 32 most recently used kept)."""
    return _COMPILED.get(key, build)


def check_train_memory(arch: Architecture, config: TrainConfig, samples: int, basis_columns: int, runs: int = 1):
    """NqfError (one line: the estimate and the memory available) when ``runs`` runs of ``config``
    cannot fit. Each run holds its records at every checkpoint (loss, ||W||, the occupations and
    the block norms; on the device and again on the host), its weights, gradient, two optimizer
    slots and W0 (5 d n) and the per-sample activations of the forward and backward pass
    (N n (K + 4)), as ``nqf.theory.costs`` counts a comparison's runs."""
    records = checkpoint_count(config.steps, config.checkpoints)
    numbers_a_record = 2 + basis_columns + len(arch.blocks)
    d, n = arch.dim, config.width
    per_run = 2.0 * records * numbers_a_record + 5.0 * d * n + samples * n * (arch.outputs + 4.0)
    check_memory(
        f"training {runs} run(s) of {config.steps} steps ({records} recorded) with d = {d}, width {n}, "
        f"{samples} samples",
        BYTES * (records + runs * per_run),
        "record fewer steps (checkpoints=2000), or use a smaller width or fewer samples",
    )


def prepare(arch: Architecture, X, Y, config: TrainConfig, basis, dtype, runs: int = 1):
    """Checked, converted run inputs: (structure S or samples X, Y, Q^T for the basis Q).

    The samples pass the checks of ``nqf.predict`` (``checked_samples``: arrays of real numbers,
    at least one sample, X of the architecture's input shape, finite entries, targets (N, K) or
    integer labels), and ``runs`` runs must fit in memory (:func:`check_train_memory`), before
    anything is built."""
    X, Y, _ = checked_samples(arch, X, Y, dtype=dtype)
    N = X.shape[0]
    if config.batch_size is not None and config.batch_size > N:
        raise NqfError(f"batch_size {config.batch_size} exceeds the number of samples {N}")
    d = arch.dim
    # in numpy: as eager JAX the empty basis and the transpose compile three small programs
    Q = np.zeros((d, 0), dtype=dtype) if basis is None else np.asarray(basis, dtype=dtype)
    if Q.ndim != 2 or Q.shape[0] != d:
        raise NqfError(f"the mode basis must have shape (d={d}, m), got {tuple(Q.shape)}")
    check_train_memory(arch, config, N, Q.shape[1], runs)
    X, Y = jnp.asarray(X, dtype=dtype), jnp.asarray(Y, dtype=dtype)
    inputs = model_inputs(arch, X, config.model)
    # transposed here, not in the compiled run: the same dot as when Q was a folded constant
    return inputs, Y, to_device(np.ascontiguousarray(Q.T))


def make_run(arch: Architecture, static: _Static):
    """The pure run(inputs, Y, Qt, W0, batch_key, lr) -> (records, diverged_at, W); everything
    that may vary between calls with the same static settings is an argument."""
    ckpts = checkpoint_steps(static.steps, static.checkpoints)
    segments = np.diff(ckpts).astype(np.int32)
    blocks = arch.blocks

    def run(inputs, Y, Qt, W0, batch_key, lr):
        N = Y.shape[0]
        minibatch = static.batch_size is not None and static.batch_size < N
        loss = _model_loss(arch, static.model, inputs, Y)
        name = static.optimizer.transform if isinstance(static.optimizer, OwnTransform) else static.optimizer
        opt = optimizer_record(name).transform(lr, static.beta, static.eps)  # a user's own: itself

        def record(W):
            """What a checkpoint records besides the loss: occupations, ||W||_F, block norms."""
            proj = Qt @ W
            return (
                jnp.sum(proj * proj, axis=1),
                jnp.linalg.norm(W),
                jnp.stack([jnp.linalg.norm(W[b.start : b.stop]) for b in blocks]),
            )

        batches = (
            minibatch_indices(batch_key, N, static.batch_size, static.steps)
            if minibatch and static.batch_size is not None
            else None
        )
        opt_state = opt.init(W0)
        loss0 = loss(W0)
        limit = jnp.where(loss0 > 0, DIVERGENCE_FACTOR * loss0, jnp.inf)

        def step(t, carry):
            W, state, diverged_at, _ = carry
            idx = batches[t] if batches is not None else None
            value, grad = jax.value_and_grad(loss)(W, idx)
            bad = ~(jnp.isfinite(value) & jnp.all(jnp.isfinite(grad)) & (value <= limit))
            diverged_at = jnp.where((diverged_at < 0) & bad, t, diverged_at)
            frozen = diverged_at >= 0
            updates, new_state = opt.update(grad, state, W)
            new_W = optax.apply_updates(W, updates)
            keep = lambda old, new: jnp.where(frozen, old, new)  # noqa: E731
            return keep(W, new_W), jax.tree_util.tree_map(keep, state, new_state), diverged_at, value

        def segment(carry, length):
            # The segment's first step is taken apart: with the full batch, the loss its gradient
            # needs is the loss at the checkpoint the segment starts from, so recording every
            # step costs no forward pass of its own. A minibatch step's loss is not the full-data
            # loss: that one is computed at the segment's end.
            t0 = carry[0]
            inner = step(t0, carry[1:])
            start_loss = inner[3]
            inner = jax.lax.fori_loop(t0 + 1, t0 + length, step, inner)
            W = inner[0]
            loss_here = loss(W) if minibatch else start_loss
            return (t0 + length, *inner), (loss_here, *record(W))

        carry0 = (jnp.asarray(0, jnp.int32), W0, opt_state, jnp.asarray(-1, jnp.int32), jnp.zeros_like(loss0))
        (_, W, _, div, _), (seg_losses, *seg_recs) = jax.lax.scan(segment, carry0, jnp.asarray(segments))
        # full batch: seg_losses[k] is the loss at checkpoint k (k < R - 1), loss(W_T) the last one;
        # minibatch: seg_losses[k] is the loss at checkpoint k + 1
        losses = (
            jnp.concatenate([loss0[None], seg_losses]) if minibatch else jnp.concatenate([seg_losses, loss(W)[None]])
        )
        others = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), record(W0), tuple(seg_recs))
        recs = (losses, *others)
        # a non-finite or blown-up loss at the final state is divergence too (no later step saw it)
        final_bad = ~(jnp.isfinite(recs[0][-1]) & (recs[0][-1] <= limit))
        div = jnp.where((div < 0) & final_bad, static.steps, div)
        after = (div >= 0) & (jnp.asarray(ckpts) >= div)
        recs = jax.tree_util.tree_map(lambda r: jnp.where(after.reshape((-1,) + (1,) * (r.ndim - 1)), jnp.nan, r), recs)
        return recs, div, W

    return run, ckpts, tuple(b.name for b in blocks)


def compiled_train(arch: Architecture, config: TrainConfig):
    """(jitted run(inputs, Y, Qt, W0, batch_key, lr), checkpoint steps, block names), cached."""
    static = static_settings(config)

    def build():
        run, ckpts, names = make_run(arch, static)
        return counted_jit(run), ckpts, names

    return cached_program(("train", arch_key(arch), static), build)


def _build_run(arch: Architecture, X, Y, config: TrainConfig, basis, dtype):
    """The pure run(W0, batch_key) -> records for these data and config (what ``train`` runs,
    with the data and learning rate bound), its checkpoint steps and block names."""
    inputs, Y, Qt = prepare(arch, X, Y, config, basis, dtype)
    run, ckpts, names = make_run(arch, static_settings(config))
    lr = jnp.asarray(config.lr, dtype=dtype)
    return (lambda W0, batch_key: run(inputs, Y, Qt, W0, batch_key, lr)), ckpts, names


def records_of_run(recs, W, names: tuple[str, ...]) -> dict:
    """The compiled run's records (loss, occupations, weight norm, block norms) and final W as numpy fields."""
    loss, occ, wnorm, bnorm = recs
    return {
        "loss": np.asarray(loss),
        "occupations": np.asarray(occ),
        "weight_norm": np.asarray(wnorm),
        "block_norms": np.asarray(bnorm),
        "block_names": names,
        "W_final": np.asarray(W),
    }


def train(
    arch: Architecture | str,
    X: Float[ArrayLike, " N *input"],
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"],
    config: TrainConfig,
    basis: Float[ArrayLike, "d m"] | None = None,
    W0: Float[ArrayLike, "d n"] | None = None,
) -> TrainResult:
    """Train ``config.model`` of ``arch`` on (X (N, *input_shape), Y (N, K)) and record along the way.

    W0 defaults to ``init_weights(arch, training_keys(seed)[0], width, sigma0)``; basis
    (d, m) gives the directions whose occupations are recorded. ``arch`` may be a built-in
    architecture's name, as in ``nqf.predict`` (``nqf.architectures.architecture_for_data``).
    See the module docstring.
    """
    check_entry_arguments("train", arch, config, Architecture, TrainConfig)
    if isinstance(arch, str):  # a built-in's name, as in predict: inputs and outputs from the data
        from nqf.architectures import architecture_for_data

        arch = architecture_for_data(arch, X, Y)
    ensure_default_cache()
    dtype = resolve_dtype(config.dtype)
    check_width(arch, config.width)
    init_key, batch_key = training_keys(config.seed)
    if W0 is None:
        check_scale(config, dtype, config.sigma0)
    # the data and the memory checked before W0 (d x width numbers) is drawn
    inputs, Y, Qt = prepare(arch, X, Y, config, basis, dtype)
    if W0 is None:
        W0 = init_weights(arch, init_key, config.width, config.sigma0, dtype)
    W0 = jnp.asarray(W0, dtype=dtype)
    if W0.shape != (arch.dim, config.width):
        raise NqfError(f"W0 must have shape (d={arch.dim}, n={config.width}), got {tuple(W0.shape)}")
    run, ckpts, names = compiled_train(arch, config)
    recs, div, W = run(inputs, Y, Qt, W0, batch_key, to_device(np.asarray(config.lr, dtype=dtype)))
    div = int(div)
    return TrainResult(
        config=config, steps=ckpts, diverged_at=None if div < 0 else div, **records_of_run(recs, W, names)
    )
