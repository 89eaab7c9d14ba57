r"""Where the network leaves its quadratic form, computed along the predicted path without training.

**(a) The departure curve.** Under GD the quadratic model's weights obey
W+ = (I - 2 lr G(M)) W (THEORY.md section 2), so W(t) = P(t) W0 with the d x d product

    P(t+1) = (I - 2 lr G(M_t)) P(t),      M_t = P(t) M0 P(t)^T,      P(0) = I,

which is width-free. Heavy-ball momentum (optax: V+ = 2 G W + beta V, W+ = W - lr V+) keeps
(W, V) = (P W0, R W0) with R+ = 2 G P + beta R, P+ = P - lr R+; minibatch SGD replays the
training batches. :func:`departure` runs this map step by step along the prediction's
recorded steps (recomputed here: the adaptive stepping of ``nqf.theory.jumps`` carries only M),
evaluates the true network f_net(W_t; x) = sum_i g_i phi(w_i, x) at W_t = P(t) W0 with one
forward pass per evaluated step, and reports (W_t is computed as F_t E with F_t = P(t) F0,
W0 = F0 E, F0 the M-flow's factor: P is never formed, since when n < d it also acts outside
the column space of W0, can grow without bound there, and P W0 then cancels; see
:func:`propagators`, which forms it, and :func:`path_weights`)

    gap(t) = ||f_net(W_t; X) - f_quad(W_t; X)||_F / ||f_quad(W_t; X)||_F

over the samples (all of them up to ``samples``, else a fixed random subset), with
f_quad(x; W) = sum_i w_i^T A(x) w_i = <M, A(x)> computed per unit as half the second
directional derivative of g0 phi at w = 0 (never an N x d x d stack), and both models' losses
at W_t. The gap measures how far the *quadratic model's* path is from a point where the
network agrees with it; it is not an error bar on the switch-on steps (docs/departure.md:
on the staircase the gap is 17-21% from step 200 on while the network's modes 1-2 switch
within 0-3.8% of the M-flow's steps).

**(b) Network-corrected switch-on steps.** After each switch-on the learned modes L sit on
a plateau. The network's own plateau state is found in the family the GD path lives in,

    W(B) = Q_L B Rhat_L,      Rhat_L = rows Q_L^T W0, each normalised,      B in R^{|L| x |L|},

by minimising the network's loss over B (|L|^2 parameters; the quadratic model's minimum
in this family is its LV fixed point). The unlearned rows Delta = Q_U^T W (Q_U the rest of
the eigenbasis of C) then evolve by the optimizer's step with the gradient linearised
about W(B*) (construction ``linearised``):

    Delta+ = Delta - lr (g + H_UU Delta),   g = Q_U^T grad L(W*),  H_UU its Jacobian in Delta,

the same for the quadratic model at its own plateau state. (Heavy-ball momentum runs the
same linear map through its velocity.) Construction ``near_zero`` replaces g + H_UU Delta
by 2 Q_U^T G_net Q_U Delta, G_net = E[r_net(x) A(x)]: the growth of a unit *near zero* in the
network's residual. It ignores that every unit already carries the learned modes (with
random init every unit has a component along each mode), so the unlearned components grow
by the network's Hessian at W*, not at 0; ``linearised`` is the default for that reason
(decided before measuring; both are reported).

Corrected steps, sequentially from the first switch-on T_1 (before it the network is its
quadratic form to O(sigma0)): both linear maps start at T_1 from the quadratic path's
unlearned rows Q_U^T P(T_1) W0. Mode j's quadratic switch level is Lambda_j = ln of the
quadratic linearised occupation ||Delta_quad,j||^2 at the M-flow's switch step t_j; the
network's corrected switch step is the first step at which ln ||Delta_net,j||^2 reaches
Lambda_j. The earliest such mode becomes learned, a new plateau state is found and both
maps restart from there. For a unit that is exactly quadratic both maps coincide and the
corrected steps equal the M-flow's. What is left out: the finite rise time of a switching
mode (the plateau state is used from the switch step on) and, with interacting modes
(K_jl != 0), the shift of the quadratic model's own later steps by an earlier switch.

Measured (docs/departure.md, tanh staircase, data seeds 0-4): against the trained network the
M-flow is +14% late on mode 3 and +42% on mode 4 (means); ``linearised`` +3.1% and -4.1%
(largest 5.9% and 17%); ``near_zero`` leaves the M-flow's steps nearly unchanged. On E5's
mixture of experts the correction goes the wrong way; a note flags the plateau states there
(a direction of curvature steeper than every growing one of the quadratic model).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, init_weights, network
from nqf.theory.data_matrices import _per_sample_loss, checked_samples, flow_data
from nqf.core.errors import NqfError
from nqf.theory.flow import square_factor
from nqf.core.measure import switch_steps
from nqf.core.sampling import minibatch_indices
from nqf.core.sampling import training_keys

DEFAULT_SAMPLES = 2048  # departure curve and corrections on at most this many samples
DEFAULT_POINTS = 1000  # evaluated steps of the departure curve (log + linear beyond)
CONSTRUCTIONS = ("linearised", "near_zero")
# A level reached to this much in ln(occupation) counts as reached: the network's and the
# quadratic model's maps agree only to rounding when the unit is exactly quadratic.
_LEVEL_ROUNDING = 1e-9
# Up to this many weights (d n) the linearised map is built as a dense matrix once.
_DENSE_LIMIT = 4096
# Up to this many weights the lowest curvature of each plateau is reported (an eigvalsh of d n x d n).
_EIGEN_LIMIT = 1024
# A plateau whose network curvature is steeper than the quadratic model's steepest by this factor
# gets a note: the restricted plateau state is then a saddle the network leaves along a direction
# the quadratic model does not have (measured: mixture of experts), and the corrections there are suspect.
_SADDLE_FACTOR = 1.1
_SUBSET_SEED = 0


@dataclass(frozen=True, eq=False)
class Departure:
    """The network along the quadratic model's predicted path (module docstring).

    Attributes:
        steps: (R,) evaluated steps.
        relative_gap: (R,) ||f_net - f_quad|| / ||f_quad|| at W_t = P(t) W0.
        network_loss, quadratic_loss: (R,) both models' losses at W_t (on the samples used).
        samples: number of samples used; subsampled: whether that is a fixed random subset.
        corrected_switch_steps: {construction: (g,)} network-corrected switch-on steps
            (NaN: not within the horizon / not computed); None when not asked.
        activation_order: {construction: [mode, ...]} the corrected order (0-based).
        plateau_curvature: {"network", "quadratic"}: (g,) the lowest eigenvalue of the unlearned
            rows' Hessian at each model's plateau state after mode k (``linearised``).
        plateau_losses: {"network", "quadratic"}: (g,) the minimum loss of each model on the
            plateau after mode k switched on (the learned set of the ``linearised`` order).
        seconds: {"path", "curve", "corrections"} wall time.
        notes: what a reader needs to know.
    """

    steps: np.ndarray
    relative_gap: np.ndarray
    network_loss: np.ndarray
    quadratic_loss: np.ndarray
    samples: int
    subsampled: bool
    corrected_switch_steps: dict | None = None
    activation_order: dict | None = None
    plateau_losses: dict | None = None
    plateau_curvature: dict | None = None
    seconds: dict | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """The ``"departure"`` block of ``Prediction.to_json``."""
        out = {
            "steps": [int(s) for s in self.steps],
            "relative_gap": _floats(self.relative_gap),
            "network_loss": _floats(self.network_loss),
            "quadratic_loss": _floats(self.quadratic_loss),
            "samples": int(self.samples),
            "subsampled": bool(self.subsampled),
            "corrected_switch_steps": None,
            "corrected_switch_steps_near_zero": None,
            "corrected_order": None,
            "plateau_losses": None,
            "plateau_curvature": None,
            "seconds": {k: float(v) for k, v in (self.seconds or {}).items()},
            "notes": list(self.notes),
        }
        if self.corrected_switch_steps is not None:
            out["corrected_switch_steps"] = _floats(self.corrected_switch_steps["linearised"])
            if "near_zero" in self.corrected_switch_steps:
                out["corrected_switch_steps_near_zero"] = _floats(self.corrected_switch_steps["near_zero"])
            out["corrected_order"] = [int(k) + 1 for k in self.activation_order["linearised"]]
        if self.plateau_losses is not None:
            out["plateau_losses"] = {k: _floats(v) for k, v in self.plateau_losses.items()}
        if self.plateau_curvature is not None:
            out["plateau_curvature"] = {k: _floats(v) for k, v in self.plateau_curvature.items()}
        return out


def _floats(a) -> list:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(a, dtype=np.float64).ravel()]


# -- the two models on a sample set --------------------------------------------------------


def network_outputs(arch: Architecture, W, X) -> jax.Array:
    """f_net(x_n; W) for every sample: (N, K)."""
    return jax.vmap(lambda x: network(arch, W, x))(X)


def quadratic_outputs(arch: Architecture, W, X) -> jax.Array:
    """f_quad(x_n; W) = sum_i w_i^T A(x_n) w_i, (N, K), A = (1/2) Hessian of g0 phi at 0.

    Per unit, w^T A w is half the second derivative of s -> g0 phi(s w, x) at s = 0 (two
    nested forward-mode derivatives), so A(x) is never built.
    """
    zero = jnp.zeros((), dtype=W.dtype)
    one = jnp.ones((), dtype=W.dtype)

    def unit_form(w, x):
        along = lambda s: arch.effective_unit(s * w, x)
        slope = lambda s: jax.jvp(along, (s,), (one,))[1]
        return 0.5 * jax.jvp(slope, (zero,), (one,))[1]

    per_sample = lambda x: jnp.sum(jax.vmap(unit_form, in_axes=(1, None))(W, x), axis=0)
    return jax.vmap(per_sample)(X)


def _model_outputs(arch, model: str):
    return partial(network_outputs, arch) if model == "network" else partial(quadratic_outputs, arch)


# -- (a): P(t) along the recorded steps -------------------------------------------------------


def _path_step(optimizer, data, B, hyper, carry, t):
    """One step of Z (and its velocity factor) with M = (Z B)(Z B)^T: Z+ = (I - 2 lr G) Z (GD)."""
    Z, R = carry
    F = Z @ B
    if optimizer == "sgd":
        lr, _, indices = hyper
        G = data.gradient_matrix(F @ F.T, indices[t])
    else:
        lr = hyper[0]
        G = data.gradient_matrix(F @ F.T)
    if optimizer == "momentum":
        beta = hyper[1]
        R = 2 * G @ Z + beta * R
        return Z - lr * R, R
    return Z - 2 * lr * G @ Z, R


@partial(jax.jit, static_argnames=("optimizer",))
def _path(optimizer, data, Z0, B, hyper, gaps):
    """Z (and its velocity factor) at the steps reached after each of ``gaps``: (S, *Z0.shape) twice."""

    def between(state, gap):
        carry, t = state
        carry = jax.lax.fori_loop(0, gap, lambda i, c: _path_step(optimizer, data, B, hyper, c, t + i), carry)
        return (carry, t + gap), carry

    _, (Zs, Rs) = jax.lax.scan(between, ((Z0, jnp.zeros_like(Z0)), jnp.zeros((), gaps.dtype)), gaps)
    return Zs, Rs


def _hyper(data, optimizer, lr, beta, indices):
    dtype = data.dtype
    lr = jnp.asarray(lr, dtype=dtype)
    if optimizer == "gd":
        return (lr,)
    if optimizer == "momentum":
        return (lr, jnp.asarray(beta, dtype=dtype))
    if optimizer == "sgd":
        if indices is None:
            raise NqfError("departure with sgd needs the minibatch indices")
        return (lr, jnp.asarray(0.0, dtype=dtype), jnp.asarray(indices))
    raise NqfError(f"departure: no path for optimizer {optimizer!r}")


def _check_steps(steps) -> np.ndarray:
    steps = np.asarray(steps, dtype=np.int64)
    if steps.ndim != 1 or steps.size == 0 or steps.min() < 0 or np.any(np.diff(steps) <= 0):
        raise NqfError("departure steps must be increasing integers >= 0")
    return steps


def propagators(data, W0, optimizer: str, lr: float, steps, beta: float = 0.9, indices=None):
    """P(t) and R(t) (d, d) at the increasing integer ``steps``: W_t = P(t) W0, V_t = R(t) W0.

    ``data``: the data matrices of the M-flow; ``indices`` (steps, B): SGD's minibatches.
    M_t = P(t) M0 P(t)^T is the M-flow's M (module docstring). P acts on all of R^d, also
    outside the column space of W0: when n < d (or W0 is rank deficient) its action there is
    irrelevant to W_t yet may grow without bound (a mode the rank cannot hold keeps growing
    in P), and P W0 then cancels catastrophically; :func:`path_weights` carries the factor
    instead and is what :func:`departure` uses.
    """
    steps = _check_steps(steps)
    F0 = jnp.asarray(square_factor(W0=np.asarray(W0)), dtype=data.dtype)
    eye = jnp.eye(F0.shape[0], dtype=data.dtype)
    gaps = jnp.asarray(np.diff(steps, prepend=0), dtype=jnp.int32)
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


def path_weights(data, W0, optimizer: str, lr: float, steps, beta: float = 0.9, indices=None):
    """W_t = P(t) W0 and V_t = R(t) W0 (d, n) at the increasing integer ``steps``, (S, d, n) each.

    Carries F_t = P(t) F0 (d x min(n, d), as the M-flow does) and returns F_t E
    (:func:`_factorise`): the same weights without forming P outside the column space of W0.
    """
    steps = _check_steps(steps)
    F0, E = _factorise(W0)
    dtype = data.dtype
    F0 = jnp.asarray(F0, dtype=dtype)
    gaps = jnp.asarray(np.diff(steps, prepend=0), dtype=jnp.int32)
    eye = jnp.eye(F0.shape[1], dtype=dtype)
    Fs, Vs = _path(optimizer, data, F0, eye, _hyper(data, optimizer, lr, beta, indices), gaps)
    if E is None:
        return Fs, Vs
    E = jnp.asarray(E, dtype=dtype)
    return Fs @ E, Vs @ E


def _thin(steps: np.ndarray, points: int) -> np.ndarray:
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
def _curve(arch, loss_type, Ws, X, Y):
    def one(W):
        fn = network_outputs(arch, W, X)
        fq = quadratic_outputs(arch, W, X)
        gap = jnp.linalg.norm(fn - fq) / jnp.linalg.norm(fq)
        return gap, jnp.mean(_per_sample_loss(loss_type, fn, Y)), jnp.mean(_per_sample_loss(loss_type, fq, Y))

    return jax.lax.map(one, Ws, batch_size=8)


# -- (b): plateau states and the linearised growth of the unlearned rows ------------------------


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
    paired = lambda W: jnp.sum(residual * quadratic_outputs(arch, W, X)) / X.shape[0]
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


def _segment_gaps(rec: np.ndarray, start: int, stop: int | None = None) -> np.ndarray:
    """Steps between records for a map started at step ``start`` (and stopped at ``stop``): zero outside."""
    stop = int(rec[-1]) if stop is None else stop
    keep = (rec > start) & (rec <= stop)
    gaps = np.where(keep, np.diff(rec, prepend=0), 0)
    if keep.any():
        first = int(np.argmax(keep))
        gaps[first] = rec[first] - start
    return gaps.astype(np.int32)


def _crossing(steps, values, level, start) -> float:
    """First step >= start where values (R,) reach level, linearly interpolated between records; NaN if never."""
    v = np.where(steps >= start, values, -np.inf)
    return float(switch_steps(steps, v[:, None], np.array([level]))[0])


def corrected_switch_steps(
    arch: Architecture,
    X,
    Y,
    prediction,
    W0=None,
    data=None,
    samples: int = DEFAULT_SAMPLES,
    constructions: tuple[str, ...] = CONSTRUCTIONS,
) -> tuple[dict, dict, dict, dict, tuple[str, ...]]:
    """Network-corrected switch-on steps of ``prediction`` (module docstring, part (b)).

    Returns ({construction: (g,)} corrected steps, {construction: order}, plateau losses
    {"network", "quadratic"}: (g,), lowest curvature of the unlearned rows' linearised map
    {"network", "quadratic"}: (g,) (``linearised``; NaN beyond _EIGEN_LIMIT weights), notes);
    the per-mode entries belong to the plateau after mode k switched on. Steps are NaN where
    the M-flow has none.
    """
    config = prediction.config
    if config.optimizer not in ("gd", "momentum"):
        raise NqfError(f"corrected switch steps are computed for gd and momentum, not {config.optimizer}")
    Xs, Ys, W0, data, _ = _inputs(arch, X, Y, prediction, W0, data, samples)
    dtype = data.dtype
    g = prediction.num_growing
    mflow = np.asarray(prediction.mflow_switch_steps, dtype=np.float64)
    rec = np.asarray(prediction.flow.steps, dtype=np.int64)
    full = np.asarray(prediction.modes.full_basis, dtype=np.float64)
    d = full.shape[0]
    thresholds = np.asarray(prediction.thresholds, dtype=np.float64)
    notes: list[str] = []
    out_steps = {c: np.full(g, np.nan) for c in constructions}
    out_order: dict[str, list[int]] = {c: [] for c in constructions}
    plateau = {"network": np.full(g, np.nan), "quadratic": np.full(g, np.nan)}
    curvature = {"network": np.full(g, np.nan), "quadratic": np.full(g, np.nan)}
    if not np.isfinite(mflow).any():
        notes.append("no mode switches on in the M-flow: nothing to correct")
        return out_steps, out_order, plateau, curvature, tuple(notes)
    t1 = float(np.nanmin(mflow))
    first = int(np.nanargmin(mflow))
    start = int(rec[min(int(np.searchsorted(rec, t1, side="left")), rec.size - 1)])
    # the quadratic path's unlearned rows at the first switch-on: the common start of both maps
    Ws, Vs = path_weights(data, W0, config.optimizer, config.lr, np.array([start]), config.beta)
    W_t1, V_t1 = np.asarray(Ws[-1]), np.asarray(Vs[-1])
    lr = jnp.asarray(config.lr, dtype=dtype)
    beta = jnp.asarray(config.beta if config.optimizer == "momentum" else 0.0, dtype=dtype)
    profiles = full.T @ np.asarray(W0, dtype=np.float64)  # (d, n) rows q_k^T W0
    norms = np.linalg.norm(profiles, axis=1)
    Rhat = jnp.asarray(profiles / np.where(norms > 0, norms, 1.0)[:, None], dtype=dtype)
    m_star = np.ones(d)
    m_star[:g] = np.where(thresholds > 0, 2.0 * thresholds, 1.0)
    Xj, Yj = jnp.asarray(Xs, dtype=dtype), jnp.asarray(Ys, dtype=dtype)
    start_rows = full.T @ W_t1, full.T @ V_t1
    models = ("network", "quadratic")
    for construction in constructions:
        learned = np.zeros(d, dtype=bool)
        learned[first] = True
        switched = {first: t1}
        seg_start = start
        rows = {m: start_rows for m in models}
        B = {m: np.zeros((d, d)) for m in models}
        history_q = np.full((rec.size, d), np.nan)  # stitched log-occupations of the quadratic map
        while not learned.all():
            QL, QU = jnp.asarray(full * learned, dtype=dtype), jnp.asarray(full * ~learned, dtype=dtype)
            free = np.outer(learned, learned)
            newest = list(switched)[-1]  # the mode learned last (insertion order: ties in time are possible)
            occ, states = {}, {}
            for model in models:
                B0 = B[model].copy()
                B0[newest, newest] = math.sqrt(m_star[newest])
                B[model], value = plateau_state(arch, model, config.loss, QL, Rhat, Xj, Yj, B0, free)
                if construction == constructions[0] and newest < g:
                    plateau[model][newest] = value
                Wstar = QL @ jnp.asarray(B[model], dtype=dtype) @ Rhat
                D0, V0 = (jnp.asarray(r * ~learned[:, None], dtype=dtype) for r in rows[model])
                linear = _UnlearnedMap(
                    arch, model, config.loss, construction, config.optimizer, Wstar, QU, Xj, Yj, D0, lr, beta
                )
                o, _, _ = linear.run(D0, V0, _segment_gaps(rec, seg_start))
                occ[model] = np.asarray(o, dtype=np.float64)
                states[model] = (linear, D0, V0)
                if construction == constructions[0] and newest < g:
                    curvature[model][newest] = linear.lowest
            with np.errstate(divide="ignore"):
                log_q, log_n = np.log(occ["quadratic"]), np.log(occ["network"])
            after = rec >= seg_start
            history_q[after] = np.where(learned[None, :], history_q[after], log_q[after])
            candidates = {}
            for k in np.flatnonzero(~learned[:g]):
                if not np.isfinite(mflow[k]):
                    continue
                # the quadratic map's level at the M-flow's own switch step (history stitched from T_1 on)
                level = float(np.interp(mflow[k], rec, history_q[:, k]))
                reach = level - _LEVEL_ROUNDING
                candidates[int(k)] = _crossing(rec, log_n[:, k], reach, seg_start) if np.isfinite(level) else math.nan
            live = {k: t for k, t in candidates.items() if np.isfinite(t)}
            if not live:
                break
            k_next = min(live, key=live.get)
            t_next = live[k_next]
            switched[k_next] = t_next
            # the unlearned rows at the new segment start (the same compiled map, stopped there)
            new_start = int(rec[min(int(np.searchsorted(rec, t_next, side="left")), rec.size - 1)])
            for model in models:
                linear, D0, V0 = states[model]
                _, Dn, Vn = linear.run(D0, V0, _segment_gaps(rec, seg_start, new_start))
                rows[model] = (np.asarray(Dn, dtype=np.float64), np.asarray(Vn, dtype=np.float64))
            learned[k_next] = True
            seg_start = new_start
        for k, t in switched.items():
            if k < g:
                out_steps[construction][k] = t
        out_order[construction] = [k for k, _ in sorted(switched.items(), key=lambda kv: kv[1]) if k < g]
    # only plateaus that some growing mode still has to leave (not the last one)
    order = out_order[constructions[0]]
    steep = [
        k
        for k in order[:-1]
        if curvature["network"][k] < _SADDLE_FACTOR * min(curvature["quadratic"][k], 0.0)
        and curvature["network"][k] < 0
    ]
    if steep:
        listed = ", ".join(
            f"{k + 1} ({curvature['network'][k]:.3g} against {curvature['quadratic'][k]:.3g})" for k in steep
        )
        notes.append(
            f"after the switch-on of mode(s) {listed}, the network's restricted plateau state has a direction of "
            f"curvature steeper than every growing direction of the quadratic model's (by more than {_SADDLE_FACTOR:g}x): "
            "the network leaves that state along a direction the quadratic model does not have, so the corrected "
            "steps of later modes are suspect there"
        )
    return out_steps, out_order, plateau, curvature, tuple(notes)


# -- the entry point ------------------------------------------------------------------------


def _inputs(arch, X, Y, prediction, W0, data, samples):
    """(X subset, targets subset, W0, data matrices, subsampled) for a prediction."""
    config = prediction.config
    dtype = jnp.result_type(float)
    Xc, targets, dtype = checked_samples(arch, X, Y, config.loss, dtype)
    if W0 is None:
        W0 = init_weights(arch, training_keys(config.seed)[0], config.width, config.sigma0, dtype)
    W0 = jnp.asarray(W0, dtype=dtype)
    if data is None:
        data, _ = flow_data(arch, X, Y, loss=config.loss, route=config.route, minibatches=config.optimizer == "sgd", dtype=dtype)
    N = Xc.shape[0]
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise NqfError(f"departure samples must be a positive integer, got {samples!r}")
    subsampled = N > samples
    if subsampled:
        idx = np.sort(np.random.default_rng(_SUBSET_SEED).choice(N, size=int(samples), replace=False))
        Xc, targets = Xc[idx], targets[idx]
    return jnp.asarray(Xc, dtype=dtype), jnp.asarray(targets, dtype=dtype), W0, data, subsampled


def departure(
    arch: Architecture,
    X,
    Y,
    prediction,
    W0=None,
    data=None,
    samples: int = DEFAULT_SAMPLES,
    points: int = DEFAULT_POINTS,
    corrections: bool = True,
) -> Departure:
    """The network along ``prediction``'s quadratic path (a) and corrected switch-on steps (b).

    arch, X (N, *input_shape), Y (N, K): as given to ``nqf.predict``; prediction: its
    result; W0 (d, n): the init if ``predict`` was given one (else drawn as ``predict`` does);
    data: the data matrices ``predict`` used (else rebuilt). ``samples``: at most this many
    samples (a fixed random subset beyond); ``points``: at most about this many evaluated
    steps of the curve. ``corrections``: also compute (b) (gd and momentum only).
    """
    config = prediction.config
    Xs, Ys, W0, data, subsampled = _inputs(arch, X, Y, prediction, W0, data, samples)
    if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or points < 2:
        raise NqfError(f"departure points must be an integer >= 2, got {points!r}")
    notes: list[str] = []
    seconds = {}
    clock = time.perf_counter()
    steps = _thin(np.asarray(prediction.flow.steps), int(points))
    indices = None
    if config.optimizer == "sgd":
        indices = minibatch_indices(training_keys(config.seed)[1], data.num_samples, config.batch_size, config.steps)
    Ws, _ = path_weights(data, W0, config.optimizer, config.lr, steps, config.beta, indices)
    Ws.block_until_ready()
    seconds["path"] = time.perf_counter() - clock
    clock = time.perf_counter()
    gap, net_loss, quad_loss = (np.asarray(a, dtype=np.float64) for a in _curve(arch, config.loss, Ws, Xs, Ys))
    seconds["curve"] = time.perf_counter() - clock
    if subsampled:
        notes.append(f"departure on a fixed random subset of {int(samples)} of the samples")
    corrected = order = plateau = curvature = None
    if corrections:
        if config.optimizer in ("gd", "momentum"):
            clock = time.perf_counter()
            corrected, order, plateau, curvature, more = corrected_switch_steps(arch, X, Y, prediction, W0=W0, data=data, samples=samples)
            seconds["corrections"] = time.perf_counter() - clock
            notes.extend(more)
        else:
            notes.append(f"corrected switch steps are not computed for {config.optimizer} (gd and momentum only)")
    return Departure(
        steps=steps,
        relative_gap=gap,
        network_loss=net_loss,
        quadratic_loss=quad_loss,
        samples=int(Xs.shape[0]),
        subsampled=bool(subsampled),
        corrected_switch_steps=corrected,
        activation_order=order,
        plateau_losses=plateau,
        plateau_curvature=curvature,
        seconds=seconds,
        notes=tuple(notes),
    )
