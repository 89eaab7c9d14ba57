r"""Part (a) of ``nqf.theory.departure.estimate``: the quadratic model's predicted path W_t = P(t) W0,
both models' outputs on it, and the departure curve (the relative gap and both losses).

P(t+1) = (I - 2 lr G(M_t)) P(t) under GD (heavy-ball momentum and minibatch SGD as in the
M-flow); :func:`path_weights` carries the factor F_t = P(t) F0 instead of P (see
``nqf.theory.departure.estimate``'s docstring for why), :func:`propagators` forms P itself.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, init_weights, network_batch
from nqf.core.errors import NqfError
from nqf.core.sampling import training_keys
from nqf.optimizers import AbstractClosedOptimizer, closed_optimizer, optimizer_record
from nqf.theory.data_matrices.build import checked_samples, flow_data
from nqf.theory.data_matrices.protocol import AbstractDataMatrices, AbstractSampleDataMatrices
from nqf.theory.data_matrices.samples import per_sample_loss
from nqf.theory.flow.maps import square_factor

DEFAULT_SAMPLES = 2048  # the departure curve on at most this many samples
_SUBSET_SEED = 0  # the fixed random subset beyond them


def network_outputs(arch: Architecture, W, X) -> jax.Array:
    """f_net(x_n; W) for every sample: (N, K) (matrix products for a unit with a readout)."""
    return network_batch(arch, W, X)


def quadratic_unit(arch: Architecture):
    """One unit's quadratic form, (w (d,), x) -> w^T A(x) w (K,): half the second derivative of
    s -> g0 phi(s w, x) at s = 0 (two nested forward-mode derivatives; A(x) is never built)."""

    def unit_form(w, x):
        zero = jnp.zeros((), dtype=w.dtype)
        one = jnp.ones((), dtype=w.dtype)

        def along(s):
            return arch.effective_unit(s * w, x)

        def slope(s):
            return jax.jvp(along, (s,), (one,))[1]

        return 0.5 * jax.jvp(slope, (zero,), (one,))[1]

    return unit_form


def network_unit(arch: Architecture):
    """One unit's output, (w (d,), x) -> phi(w, x) (K,), for an architecture without a router
    (then the layer is the plain sum of its units)."""
    return lambda w, x: jnp.reshape(arch.unit(arch.unravel(w), x), (arch.outputs,))


def quadratic_outputs(arch: Architecture, W, X) -> jax.Array:
    """f_quad(x_n; W) = sum_i w_i^T A(x_n) w_i, (N, K), per unit by :func:`quadratic_unit`."""
    unit_form = quadratic_unit(arch)

    def per_sample(x):
        return jnp.sum(jax.vmap(unit_form, in_axes=(1, None))(W, x), axis=0)

    return jax.vmap(per_sample)(X)


def _path_step(optimizer: AbstractClosedOptimizer, data: AbstractDataMatrices, B, hyper, carry, t):
    """One step of Z and its buffers with M = (Z B)(Z B)^T: the optimizer's own step with the
    gradient 2 G(M) Z (GD: Z+ = (I - 2 lr G) Z), G of the step's minibatch where there is one."""
    lr, beta, indices = hyper
    F = carry[0] @ B
    if indices is not None:
        assert isinstance(data, AbstractSampleDataMatrices)  # departure() passes sample data for sgd
        G = data.gradient_matrix(F @ F.T, indices[t])
    else:
        G = data.gradient_matrix(F @ F.T)
    return optimizer.flow_step(2 * G @ carry[0], carry, lr, beta)


@partial(jax.jit, static_argnames=("optimizer",))
def _path(optimizer, data: AbstractDataMatrices, Z0, B, hyper, gaps):
    """Z and its first buffer's factor (zeros without one) at the steps reached after each of
    ``gaps``: (S, *Z0.shape) twice."""
    closed = closed_optimizer(optimizer)
    zero = jnp.zeros_like(Z0)

    def between(state, gap):
        carry, t = state
        carry = jax.lax.fori_loop(0, gap, lambda i, c: _path_step(closed, data, B, hyper, c, t + i), carry)
        return (carry, t + gap), (carry[0], carry[1] if closed.buffers else zero)

    carry0 = (Z0, *(zero for _ in range(closed.buffers)))
    _, (Zs, Rs) = jax.lax.scan(between, (carry0, jnp.zeros((), gaps.dtype)), gaps)
    return Zs, Rs


def _hyper(data: AbstractDataMatrices, optimizer, lr, beta, indices):
    """(lr, beta, minibatch indices or None) as the path's step takes them."""
    dtype = data.dtype
    record = optimizer_record(optimizer)
    if not record.closes_on_m:
        raise NqfError(f"departure: no path for optimizer {optimizer!r}")
    if record.minibatches and indices is None:
        raise NqfError(f"departure with {optimizer} needs the minibatch indices")
    beta = record.beta_of(beta)
    return (
        jnp.asarray(lr, dtype=dtype),
        jnp.asarray(beta, dtype=dtype),
        jnp.asarray(indices) if record.minibatches else None,
    )


def _gaps(steps) -> jax.Array:
    """The steps between the increasing integer ``steps`` (the first from 0), as ``_path`` takes them."""
    steps = np.asarray(steps, dtype=np.int64)
    if steps.ndim != 1 or steps.size == 0 or steps.min() < 0 or np.any(np.diff(steps) <= 0):
        raise NqfError("departure steps must be increasing integers >= 0")
    return jnp.asarray(np.diff(steps, prepend=0), dtype=jnp.int32)


def propagators(data: AbstractDataMatrices, W0, optimizer: str, lr: float, steps, beta: float = 0.9, indices=None):
    """P(t) and R(t) (d, d) at the increasing integer ``steps``: W_t = P(t) W0, V_t = R(t) W0.

    ``data``: the data matrices of the M-flow; ``indices`` (steps, B): SGD's minibatches.
    M_t = P(t) M0 P(t)^T is the M-flow's M (``nqf.theory.departure.estimate``'s docstring). P acts on all of R^d, also
    outside the column space of W0: when n < d (or W0 is rank deficient) its action there is
    irrelevant to W_t yet may grow without bound (a mode the rank cannot hold keeps growing
    in P), and P W0 then cancels catastrophically; :func:`path_weights` carries the factor
    instead and is what :func:`departure` uses.
    """
    gaps = _gaps(steps)
    F0 = jnp.asarray(square_factor(W0=np.asarray(W0)), dtype=data.dtype)
    eye = jnp.eye(F0.shape[0], dtype=data.dtype)
    return _path(optimizer, data, eye, F0, _hyper(data, optimizer, lr, beta, indices), gaps)


def _factorise(W0) -> tuple[np.ndarray, np.ndarray | None]:
    """(F0, E) with W0 = F0 E: F0 = W0, E = None (the identity) when n <= d; else F0 = R^T (d, d)
    and E = Q^T (d, n) from W0^T = Q R. Then W_t = P(t) W0 = F_t E with F_t = P(t) F0."""
    W0 = np.asarray(W0, dtype=np.float64)
    d, n = W0.shape
    if n <= d:
        return W0, None
    Q, R = np.linalg.qr(W0.T)
    return R.T, Q.T


def path_weights(data: AbstractDataMatrices, W0, optimizer: str, lr: float, steps, beta: float = 0.9, indices=None):
    """W_t = P(t) W0 and V_t = R(t) W0 (d, n) at the increasing integer ``steps``, (S, d, n) each.

    Carries F_t = P(t) F0 (d x min(n, d), as the M-flow does) and returns F_t E
    (:func:`_factorise`): the same weights without forming P outside the column space of W0.
    """
    gaps = _gaps(steps)
    F0_host, E_host = _factorise(W0)
    dtype = data.dtype
    F0 = jnp.asarray(F0_host, dtype=dtype)
    eye = jnp.eye(F0.shape[1], dtype=dtype)
    Fs, Vs = _path(optimizer, data, F0, eye, _hyper(data, optimizer, lr, beta, indices), gaps)
    if E_host is None:
        return Fs, Vs
    E = jnp.asarray(E_host, dtype=dtype)
    return Fs @ E, Vs @ E


def thin(steps: np.ndarray, points: int) -> np.ndarray:
    """At most about ``points`` of the recorded steps: half log-spaced, half evenly spaced, with both ends."""
    steps = np.asarray(steps, dtype=np.int64)
    if steps.size <= points:
        return steps
    last = int(steps[-1])
    want = np.concatenate(
        [[steps[0], last], np.geomspace(1, max(last, 1), points // 2), np.linspace(0, last, points - points // 2)]
    )
    idx = np.unique(np.clip(np.searchsorted(steps, np.rint(want)), 0, steps.size - 1))
    return steps[idx]


@partial(jax.jit, static_argnames=("arch", "loss_type"))
def gap_curve(arch, loss_type, Ws, X, Y):
    def one(W):
        fn = network_outputs(arch, W, X)
        fq = quadratic_outputs(arch, W, X)
        gap = jnp.linalg.norm(fn - fq) / jnp.linalg.norm(fq)
        return gap, jnp.mean(per_sample_loss(loss_type, fn, Y)), jnp.mean(per_sample_loss(loss_type, fq, Y))

    return jax.lax.map(one, Ws, batch_size=8)


def check_prediction(arch: Architecture, prediction) -> None:
    """NqfError unless ``prediction`` is a Prediction of ``arch`` (its name, options and d)."""
    config = getattr(prediction, "config", None)
    modes = getattr(prediction, "modes", None)
    if config is None or modes is None or not hasattr(prediction, "mflow_switch_steps"):
        raise NqfError(f"departure takes the Prediction nqf.predict returned, got {type(prediction).__name__}")
    name, options = getattr(prediction, "arch_name", ""), tuple(getattr(prediction, "arch_options", ()))
    if name and (name != arch.name or options != tuple(arch.options)):
        raise NqfError(
            f"the prediction is of {name} {dict(options)}, not of the architecture given, {arch.name} "
            f"{dict(arch.options)}: pass the architecture the prediction was made for"
        )
    d = np.shape(modes.full_basis)[0]
    if d != arch.dim:
        raise NqfError(f"the prediction has d = {d} parameters a unit, the architecture {arch.name} {arch.dim}")


def _check_start(prediction, W0, data: AbstractDataMatrices, given: bool) -> None:
    """NqfError unless W0 and the data are the prediction's: W0 of shape (d, width) whose mode
    occupations are the prediction's m_k(0), and the data's loss at M0 = W0 W0^T its L(0)."""
    config = prediction.config
    d = np.shape(prediction.modes.full_basis)[0]
    if tuple(W0.shape) != (d, int(config.width)):
        raise NqfError(f"W0 must have shape (d={d}, width={config.width}) as the prediction's, got {tuple(W0.shape)}")
    W = np.asarray(W0, dtype=np.float64)
    # the prediction's numbers were computed in the data's precision, in another order
    tolerance = 1e-6 if np.dtype(data.dtype) == np.float64 else 1e-3
    if given and prediction.initial_occupations is not None:
        m0 = prediction.modes.occupations(W @ W.T)
        expected = np.asarray(prediction.initial_occupations, dtype=np.float64)[: m0.size]
        if not np.allclose(m0, expected, rtol=tolerance, atol=1e-300):
            raise NqfError(
                "W0 is not the prediction's initial weights (its mode occupations differ from the prediction's "
                "m_k(0)): pass the W0 the prediction was made from, or none for its own draw"
            )
    loss0 = float(np.asarray(prediction.flow.loss)[0])
    here = float(data.loss(jnp.asarray(W @ W.T, dtype=data.dtype)))
    if not math.isclose(here, loss0, rel_tol=tolerance, abs_tol=1e-12 * max(1.0, abs(loss0))):
        raise NqfError(
            f"the data are not the prediction's: the loss at the initial weights is {here:.6g} here and "
            f"{loss0:.6g} in the prediction; pass the X and Y it was made from"
        )


def departure_inputs(arch, X, Y, prediction, W0, data: AbstractDataMatrices | None, samples):
    """(X subset, targets subset, W0, data matrices, subsampled) for a prediction (both parts' inputs).

    NqfError when the architecture, W0 or the data are not the prediction's (:func:`check_prediction`,
    :func:`_check_start`): a departure of other inputs would be a number about nothing."""
    check_prediction(arch, prediction)
    config = prediction.config
    dtype = jnp.result_type(float)
    Xc, targets, dtype = checked_samples(arch, X, Y, config.loss, dtype)
    given = W0 is not None
    if W0 is None:
        W0 = init_weights(arch, training_keys(config.seed)[0], config.width, config.sigma0, dtype)
    W0 = jnp.asarray(W0, dtype=dtype)
    if data is None:
        data, _ = flow_data(
            arch,
            X,
            Y,
            loss=config.loss,
            route=config.route,
            minibatches=optimizer_record(config.optimizer).minibatches,
            dtype=dtype,
        )
    _check_start(prediction, W0, data, given)
    N = Xc.shape[0]
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise NqfError(f"departure samples must be a positive integer, got {samples!r}")
    subsampled = N > samples
    if subsampled:
        idx = np.sort(np.random.default_rng(_SUBSET_SEED).choice(N, size=int(samples), replace=False))
        Xc, targets = Xc[idx], targets[idx]
    return jnp.asarray(Xc, dtype=dtype), jnp.asarray(targets, dtype=dtype), W0, data, subsampled
