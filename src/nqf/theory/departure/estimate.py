r"""Where the network leaves its quadratic form, computed along the predicted path without training.

**(a) The departure curve.** Under GD the quadratic model's weights obey
W+ = (I - 2 lr G(M)) W (docs/theory.md section 2), so W(t) = P(t) W0 with the d x d product

    P(t+1) = (I - 2 lr G(M_t)) P(t),      M_t = P(t) M0 P(t)^T,      P(0) = I,

which is width-free. Heavy-ball momentum (optax: V+ = 2 G W + beta V, W+ = W - lr V+) keeps
(W, V) = (P W0, R W0) with R+ = 2 G P + beta R, P+ = P - lr R+; minibatch SGD replays the
training batches. :func:`departure` runs this map step by step along the prediction's
recorded steps (recomputed here: the adaptive stepping of ``nqf.theory.flow.jumps`` carries only M),
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
from typing import TYPE_CHECKING

import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.core.errors import NqfError
from nqf.core.optimizers import optimizer_record
from nqf.core.sampling import minibatch_indices, training_keys
from nqf.theory.data_matrices.protocol import AbstractDataMatrices, AbstractSampleDataMatrices
from nqf.theory.departure.corrections import CONSTRUCTIONS, corrected_switch_steps
from nqf.theory.departure.path import (
    DEFAULT_SAMPLES,
    departure_inputs,
    gap_curve,
    network_outputs,
    path_weights,
    propagators,
    quadratic_outputs,
    thin,
)
from nqf.theory.departure.plateaus import plateau_state

if TYPE_CHECKING:  # jaxtyping imports JAX; annotations only, so this module stays JAX-free
    from jaxtyping import ArrayLike, Float, Real

__all__ = [
    "CONSTRUCTIONS",
    "DEFAULT_POINTS",
    "DEFAULT_SAMPLES",
    "Departure",
    "corrected_switch_steps",
    "departure",
    "network_outputs",
    "path_weights",
    "plateau_state",
    "propagators",
    "quadratic_outputs",
]

DEFAULT_POINTS = 1000  # evaluated steps of the departure curve (log + linear beyond)


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
            if self.activation_order is not None:  # set together with corrected_switch_steps
                out["corrected_order"] = [int(k) + 1 for k in self.activation_order["linearised"]]
        if self.plateau_losses is not None:
            out["plateau_losses"] = {k: _floats(v) for k, v in self.plateau_losses.items()}
        if self.plateau_curvature is not None:
            out["plateau_curvature"] = {k: _floats(v) for k, v in self.plateau_curvature.items()}
        return out


def _floats(a) -> list:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(a, dtype=np.float64).ravel()]


# -- the entry point ------------------------------------------------------------------------


def departure(
    arch: Architecture,
    X: Float[ArrayLike, " N *input"],
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"],
    prediction,
    W0: Float[ArrayLike, "d n"] | None = None,
    data: AbstractDataMatrices | None = None,
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
    Xs, Ys, W0, data, subsampled = departure_inputs(arch, X, Y, prediction, W0, data, samples)
    config = prediction.config
    if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or points < 2:
        raise NqfError(f"departure points must be an integer >= 2, got {points!r}")
    notes: list[str] = []
    seconds = {}
    clock = time.perf_counter()
    steps = thin(np.asarray(prediction.flow.steps), int(points))
    indices = None
    if optimizer_record(config.optimizer).minibatches:
        if not isinstance(data, AbstractSampleDataMatrices):
            raise NqfError(
                f"optimizer sgd replays minibatches: it needs sample data matrices, got {type(data).__name__}"
            )
        indices = minibatch_indices(training_keys(config.seed)[1], data.num_samples, config.batch_size, config.steps)
    Ws, _ = path_weights(data, W0, config.optimizer, config.lr, steps, config.beta, indices)
    Ws.block_until_ready()
    seconds["path"] = time.perf_counter() - clock
    clock = time.perf_counter()
    gap, net_loss, quad_loss = (np.asarray(a, dtype=np.float64) for a in gap_curve(arch, config.loss, Ws, Xs, Ys))
    seconds["curve"] = time.perf_counter() - clock
    if subsampled:
        notes.append(f"departure on a fixed random subset of {int(samples)} of the samples")
    corrected = order = plateau = curvature = None
    if corrections:
        if optimizer_record(config.optimizer).deterministic_flow:
            clock = time.perf_counter()
            corrected, order, plateau, curvature, more = corrected_switch_steps(
                arch, X, Y, prediction, W0=W0, data=data, samples=samples
            )
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
