r"""Part (b) of ``nqf.theory.departure.estimate``, the pieces: the network's (or the quadratic model's)
plateau state W(B*) = Q_L B* Rhat_L (:func:`plateau_state`) and the linear(ised) map of the
unlearned rows about it (:class:`UnlearnedMap`, constructions ``linearised`` and
``near_zero``). ``nqf.theory.departure.corrections`` runs them to the corrected switch-on steps.

Paths. Up to _DENSE_LIMIT weights (d n) the map is a (d n, d n) matrix J. Where the layer is a
sum over units (the quadratic model; the network without a router) J is built from the units'
own Jacobians and Hessians (``factored``, :func:`_factored_force`: about n / K times less work
than the Hessian-vector route, the same matrix to rounding; docs/departure.md has the
derivation). Otherwise (a mixture of experts' network) J is built one row per basis
direction of D pushed through the linearised gradient, as follows.

Memory of the Hessian-vector route. Each direction holds per-sample,
per-unit numbers while it is pushed (:func:`map_numbers`: for the quadratic model's
``linearised`` map about 14 K + 3 per sample and unit, K outputs, measured from XLA's buffer
sizes on ``mlp``), so all d n directions at once (``dense``, one ``vmap``) hold ~ 8 d n N n
(14 K + 3) bytes: for 569 samples, K = 10, d = 16, n = 64 (d n = 1024) XLA assigns 30.7 GB
(10 K + 3 a direction when all are batched; the formula says 42.7 GB), the allocation that
failed in issue 22. ``chunked`` builds the same J from a few directions at a time
(``jax.lax.map``), as many as fit in MAP_BYTES with the short last chunk
(:func:`held_directions`), and reads the compiled program's own buffer sizes (XLA's memory
analysis) before running it, shrinking the chunk if they are far larger; beyond _DENSE_LIMIT
weights ``matrix_free`` applies the map each step (one direction at a time, J never formed).
:func:`choose_path` picks (``dense`` only when every direction fits at once);
``nqf.theory.costs.departure_cost`` uses the same numbers before any compute.
"""

from __future__ import annotations

import functools
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from nqf.core.optimizers import optimizer_record
from nqf.theory.data_matrices.samples import loss_derivative, per_sample_loss
from nqf.theory.departure.path import model_outputs, quadratic_outputs, quadratic_unit, unit_outputs

# Up to this many weights (d n) the linearised map is built as a dense matrix once.
_DENSE_LIMIT = 4096
# Up to this many weights the lowest curvature of each plateau is reported (an eigvalsh of d n x d n).
EIGEN_LIMIT = 1024
# The working set (bytes) the map's matrix may take while it is built: above it the basis
# directions are pushed in chunks (``chunked``); a chunk is one direction at least. On the CPU
# small chunks are also the fastest (measured, iris, quadratic ``linearised``: 0.5 s for the
# matrix one direction at a time, 1.4 s 64 at a time, 2.6 s all 448 at once; not measured on
# an accelerator).
MAP_BYTES = 2**25
# At most this many recompilations with a smaller chunk when XLA's buffers exceed the budget by
# more than _SLACK (the formula is calibrated on mlp units; other units can hold more a direction).
_SHRINKS = 3
_SLACK = 1.5
PATHS = ("factored", "dense", "chunked", "matrix_free")
_BYTES = 8  # float64


def map_numbers(arch, model: str, construction: str) -> tuple[float, float]:
    """(held, per direction): numbers per sample and unit that pushing basis directions through
    the unlearned rows' map keeps, once (the linearisation's residuals) and per direction.

    Measured from XLA's buffer sizes (``compiled.memory_analysis()``) on ``mlp`` units with
    K = 3 and 10 outputs (chunks of 1 to 16 directions, 150 to 569 samples): ``linearised``
    pushes the quadratic model's nested forward derivatives back through the loss, about
    14 K + 3 numbers a direction (the network's readout path about 5); ``near_zero`` about
    K + 8. Other units can hold more or less (their own intermediates; a conv unit ~10x):
    :class:`UnlearnedMap` reads the compiled program's own sizes and shrinks the chunk.
    """
    K = arch.outputs
    if construction == "near_zero":
        return 1.0, K + 8.0
    if model == "quadratic":
        return 15.0, 14.0 * K + 3.0
    return 8.0, 5.0


def map_bytes(arch, model: str, construction: str, samples: int, width: int, directions: int) -> float:
    """Bytes held while ``directions`` basis directions are pushed through the map at once (:func:`map_numbers`)."""
    held, each = map_numbers(arch, model, construction)
    return _BYTES * samples * width * (held + directions * each)


def held_directions(size: int, chunk: int) -> int:
    """Directions a chunked build holds at once: a chunk, and the short last chunk beside it
    (``jax.lax.map`` pushes the remainder in a program of its own; XLA keeps both buffers)."""
    return size if chunk >= size else chunk + size % chunk


def map_budget() -> float:
    """The working set a map may take while it is built (MAP_BYTES, read at each call)."""
    return float(MAP_BYTES)


def choose_path(
    arch,
    samples: int,
    width: int,
    budget: float | None = None,
    model: str | None = None,
    construction: str | None = None,
) -> tuple[str, int]:
    """(path, chunk) of the unlearned rows' map of ``model`` and ``construction`` (the most
    demanding of them when not given; module docstring): ``matrix_free`` beyond _DENSE_LIMIT
    weights; else ``factored`` (chunk: samples at once) when ``model`` is given and its layer is
    a sum over units (:func:`factorable`); else the Hessian-vector routes of :func:`hvp_path`."""
    if arch.dim * width > _DENSE_LIMIT:
        return "matrix_free", 1
    if model is not None and factorable(arch, model):
        return "factored", factored_chunk(arch, width, budget)
    return hvp_path(arch, samples, width, budget, model, construction)


def hvp_path(
    arch,
    samples: int,
    width: int,
    budget: float | None = None,
    model: str | None = None,
    construction: str | None = None,
) -> tuple[str, int]:
    """(path, directions a chunk) of the map built by Hessian-vector products: ``dense`` when all
    d n directions fit ``budget`` (default :func:`map_budget`), else ``chunked`` with as many as
    fit (:func:`held_directions`; one at least)."""
    size = arch.dim * width
    budget = map_budget() if budget is None else budget
    models = ("network", "quadratic") if model is None else (model,)
    constructions = ("linearised", "near_zero") if construction is None else (construction,)
    held, each = max(map_numbers(arch, m, c) for m in models for c in constructions)
    room = budget - _BYTES * samples * width * held
    fit = int(max(room, 0.0) // max(_BYTES * samples * width * each, 1.0))
    if fit >= size:
        return "dense", size
    # the largest chunk that fits with the short last chunk (a divisor of d n when there is one)
    chunk = next((c for c in range(max(fit, 1), 0, -1) if held_directions(size, c) <= fit), 1)
    return "chunked", chunk


def _loss_fn(arch, model: str, loss_type: str):
    outputs = model_outputs(arch, model)
    return lambda W, X, Y: jnp.mean(per_sample_loss(loss_type, outputs(W, X), Y))


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
    outputs = model_outputs(arch, model)
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


@partial(jax.jit, static_argnames=("arch", "model", "loss_type", "construction", "chunk"))
def _chunked_force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0, chunk):
    """:func:`_dense_force`'s (g, J), J's rows pushed ``chunk`` basis directions at a time."""
    g, lin = _force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0)
    size = D0.size

    def row(i):
        return lin(jax.nn.one_hot(i, size, dtype=D0.dtype).reshape(D0.shape)).reshape(size)

    return g, jax.lax.map(row, jnp.arange(size), batch_size=chunk)


def factorable(arch, model: str) -> bool:
    """Whether ``model``'s layer is a plain sum over units (:func:`_factored_force` applies): the
    quadratic model always, the network when no router couples the units through a gate."""
    return unit_outputs(arch, model) is not None


def factored_chunk(arch, width: int, budget: float | None = None) -> int:
    """Samples a chunk of :func:`_factored_force` takes at once: its per-sample Jacobians
    (n K d numbers) and their transforms, about 4 n K d + n d numbers a sample, within ``budget``."""
    budget = map_budget() if budget is None else budget
    d, K = arch.dim, arch.outputs
    return max(1, int(budget // (_BYTES * width * (4.0 * K * d + d))))


@partial(jax.jit, static_argnames=("arch", "model", "loss_type", "construction", "chunk"))
def _factored_force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0, chunk):
    """:func:`_dense_force`'s (g, J), built from the units' own derivatives instead of d n
    Hessian-vector products of the whole layer.

    The layer is f(x) = sum_i u(w_i, x) (:func:`factorable`), so the loss's Hessian in W is

        H = (1/N) sum_x [ J(x)^T H_l(x) J(x) + blockdiag_i sum_c l'_c(x) Hess_w u_c(w_i, x) ],

    J(x) = [du/dw(w_1, x) ... du/dw(w_n, x)] (K, d n), H_l the loss's (K, K) Hessian in f
    (identity for the squared loss, diag(p) - p p^T for cross-entropy), l' its gradient. In the
    unlearned rows' coordinates D = Q_U^T W the map is Q_U^T H Q_U. Work: N n Jacobians of one
    unit (d forward passes each) and N K (d n)^2 for the Gauss-Newton sum, where the
    Hessian-vector route costs d n passes of the whole layer over N samples (N n d per pass
    and unit, nested for the quadratic model): about n times more. ``near_zero``: the force
    2 Q_U^T G Q_U D, G = E[l' A], is the same d x d matrix for every unit (kron with I_n).
    Samples go ``chunk`` at a time (padding weighted 0), so memory stays ~ chunk n K d.
    """
    unit = unit_outputs(arch, model)
    d, n = D0.shape
    N = X.shape[0]
    F = model_outputs(arch, model)(Wstar, X)
    dl = loss_derivative(loss_type, F, Y)  # (N, K)
    if loss_type == "squared":
        Hl = jnp.broadcast_to(jnp.eye(F.shape[1], dtype=F.dtype), (N, F.shape[1], F.shape[1]))
    else:
        p = jax.nn.softmax(F, axis=1)
        Hl = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
    pad = (-N) % chunk
    weights = jnp.concatenate([jnp.ones(N, dtype=F.dtype), jnp.zeros(pad, dtype=F.dtype)])

    def padded(a):
        return jnp.concatenate([a, jnp.zeros((pad, *a.shape[1:]), dtype=a.dtype)]).reshape(-1, chunk, *a.shape[1:])

    Xc, dlc, Hlc, wc = padded(X), padded(dl), padded(Hl), weights.reshape(-1, chunk)
    zero_w = jnp.zeros((d,), dtype=D0.dtype)
    quadratic = quadratic_unit(arch)

    def unit_hessians(per_unit, Xb, rb, wb, units):
        """(n, d, d): Hess_w of sum_b w_b r_b . per_unit(w, x_b) at each column of ``units``."""

        def weighted(w):
            return jnp.sum(wb[:, None] * rb * jax.vmap(lambda x: per_unit(w, x))(Xb))

        return jax.vmap(jax.hessian(weighted), in_axes=1)(units)

    if construction == "near_zero":
        # the force is the unit-independent 2 G (the quadratic form's Hessian, any w): one d x d
        def accumulate_g(total, batch):
            Xb, rb, wb = batch
            return total + unit_hessians(quadratic, Xb, rb, wb, zero_w[:, None])[0], None

        two_g, _ = jax.lax.scan(accumulate_g, jnp.zeros((d, d), dtype=D0.dtype), (Xc, dlc, wc))
        S = QU.T @ (two_g / N) @ QU
        J = jnp.einsum("kl,ij->ljki", S, jnp.eye(n, dtype=D0.dtype)).reshape(d * n, d * n)
        return jnp.zeros_like(D0), J

    jacobian = jax.vmap(jax.vmap(jax.jacfwd(unit), in_axes=(1, None)), in_axes=(None, 0))  # (B, n, K, d)

    # the quadratic model's units have one Hessian, 2 A(x), whatever their weights: one d x d
    hessian_units = Wstar[:, :1] if model == "quadratic" else Wstar

    def accumulate(carry, batch):
        gauss_newton, blocks = carry
        Xb, rb, Hb, wb = batch
        Z = jnp.einsum("bikp,pq->bkqi", jacobian(Wstar, Xb), QU).reshape(Xb.shape[0], -1, d * n)  # (B, K, d n)
        weighted = jnp.einsum("b,bkl,blm->bkm", wb, Hb, Z)
        gauss_newton = gauss_newton + jnp.einsum("bkm,bkq->mq", Z, weighted)
        return (gauss_newton, blocks + unit_hessians(unit, Xb, rb, wb, hessian_units)), None

    start = (jnp.zeros((d * n, d * n), dtype=D0.dtype), jnp.zeros((hessian_units.shape[1], d, d), dtype=D0.dtype))
    (gauss_newton, blocks), _ = jax.lax.scan(accumulate, start, (Xc, dlc, Hlc, wc))
    blocks_u = jnp.broadcast_to(jnp.einsum("pk,ipq,ql->ikl", QU, blocks, QU), (n, d, d))  # mode coordinates
    diagonal = jnp.einsum("ikl,ij->kilj", blocks_u, jnp.eye(n, dtype=D0.dtype)).reshape(d * n, d * n)
    J = (gauss_newton + diagonal) / N
    loss = _loss_fn(arch, model, loss_type)
    g = QU.T @ jax.grad(loss)(Wstar, X, Y)
    return g, J


# compiled ``_chunked_force`` programs (ahead of time, so their buffer sizes can be read first)
_COMPILED: dict = {}
_COMPILED_KEEP = 32


def _signature(args) -> tuple:
    return tuple((a.shape, str(a.dtype), bool(getattr(a, "weak_type", False))) for a in args)


def _temp_bytes(compiled) -> float | None:
    """XLA's temporary buffers of a compiled program (bytes), None where the backend does not say."""
    try:
        analysis = compiled.memory_analysis()
        return None if analysis is None else float(analysis.temp_size_in_bytes)
    except (AttributeError, NotImplementedError, RuntimeError):
        return None


def _compiled_chunked(static, args, chunk: int, budget: float):
    """(compiled ``_chunked_force``, chunk): ``chunk`` directions a step, fewer while XLA's own
    buffers exceed ``budget`` by more than _SLACK (:func:`map_numbers` is calibrated on mlp units)."""
    for _ in range(_SHRINKS + 1):
        key = (*static, chunk, _signature(args))
        compiled = _COMPILED.get(key)
        if compiled is None:
            compiled = _chunked_force.lower(*static, *args, chunk=chunk).compile()
            if len(_COMPILED) >= _COMPILED_KEEP:
                _COMPILED.pop(next(iter(_COMPILED)))
            _COMPILED[key] = compiled
        temp = _temp_bytes(compiled)
        if chunk == 1 or temp is None or temp <= _SLACK * budget:
            break
        chunk = max(1, int(chunk * budget / temp))
    return compiled, chunk


def _steps(optimizer, force, D0, V0, lr, beta, gaps):
    heavy_ball = optimizer_record(optimizer).flow_takes_beta

    def step(i, carry):
        D, V = carry
        if heavy_ball:
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


class UnlearnedMap:
    """The unlearned rows' linear(ised) dynamics about W* for one plateau and model.

        D (d, n): the weights' mode coordinates Q^T W, only the unlearned rows used (QU: the full
        basis with the learned columns zeroed). ``linearised``: D+ = D - lr (g + H D) with
        g + H D the unlearned rows' gradient linearised about W* (GD; heavy-ball momentum runs
        the same force through its velocity); ``near_zero``: the force 2 Q_U^T G Q_U D with
        G = E[r(x) A(x)] at W*. Up to _DENSE_LIMIT weights the map is built once as a matrix
        (from the units' derivatives, or by directions, all at once or in chunks that fit
        MAP_BYTES: module docstring). ``path``
        (one of PATHS) and ``chunk`` force a path (tests; ``chunk`` counts samples on the factored
    path, directions on the chunked one); by default :func:`choose_path` picks.
        ``run(D0, V0, gaps)`` returns (squared row norms (S, d) after each gap, D, V).
    """

    def __init__(
        self,
        arch,
        model,
        loss_type,
        construction,
        optimizer,
        Wstar,
        QU,
        X,
        Y,
        D0,
        lr,
        beta,
        path: str | None = None,
        chunk: int | None = None,
        budget: float | None = None,
    ):
        self.optimizer, self.lr, self.beta = optimizer, lr, beta
        budget = map_budget() if budget is None else budget
        chosen, _ = choose_path(arch, X.shape[0], D0.shape[1], budget, model, construction)
        self.path = chosen if path is None else path
        if self.path not in PATHS:
            raise ValueError(f"unknown path {self.path!r}; one of {', '.join(PATHS)}")
        if self.path == "factored":
            if not factorable(arch, model):
                raise ValueError(f"the {model} layer of {arch.name} is not a sum over units: no factored path")
            self.chunk = min(chunk or factored_chunk(arch, D0.shape[1], budget), X.shape[0])
        else:
            _, fits = hvp_path(arch, X.shape[0], D0.shape[1], budget, model, construction)
            self.chunk = D0.size if self.path == "dense" else min(chunk or fits, D0.size)
        self.dense = self.path != "matrix_free"  # the map is a matrix J
        if self.path == "factored":
            self.g, self.J = _factored_force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0, self.chunk)
        elif self.path == "chunked":
            static = (arch, model, loss_type, construction)
            args = (Wstar, QU, X, Y, D0)
            compiled, self.chunk = _compiled_chunked(static, args, self.chunk, budget)
            self.g, self.J = compiled(*args)
        elif self.path == "dense":
            self.g, self.J = _dense_force(arch, model, loss_type, construction, Wstar, QU, X, Y, D0)
        if not self.dense:
            self.args = (arch, model, loss_type, construction, optimizer, Wstar, QU, X, Y)

    @functools.cached_property
    def lowest(self) -> float:
        """The most negative eigenvalue of the (symmetrised) linear map; NaN without a matrix or
        beyond EIGEN_LIMIT weights. Computed when first read (an eigendecomposition of d n x d n
        costs more than building the map; only the reported construction's plateaus read it)."""
        if not self.dense or self.J.shape[0] > EIGEN_LIMIT:
            return math.nan
        J = np.asarray(self.J, dtype=np.float64)
        return float(scipy.linalg.eigvalsh(0.5 * (J + J.T), subset_by_index=(0, 0))[0])

    def run(self, D0, V0, gaps):
        gaps = jnp.asarray(gaps, dtype=jnp.int32)
        if self.dense:
            return _dense_steps(self.optimizer, self.g, self.J, D0, V0, self.lr, self.beta, gaps)
        return _matrix_free_steps(*self.args, D0, V0, self.lr, self.beta, gaps)
