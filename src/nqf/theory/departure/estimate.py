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

**The network's own switch-on steps** are the mean-field flow's (``nqf.theory.departure.
mean_field``, on by default in ``nqf.predict``), not a correction of the quadratic model's
(docs/departure.md, "A retired construction").
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.core.errors import NqfError
from nqf.core.pytrees import json_numbers, register_fields
from nqf.core.sampling import minibatch_indices, training_keys
from nqf.optimizers import optimizer_record
from nqf.theory.data_matrices.protocol import AbstractDataMatrices, AbstractSampleDataMatrices
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

if TYPE_CHECKING:  # jaxtyping imports JAX; annotations only, so this module stays JAX-free
    from jaxtyping import ArrayLike, Float, Real

__all__ = [
    "DEFAULT_POINTS",
    "DEFAULT_SAMPLES",
    "Departure",
    "departure",
    "network_outputs",
    "path_weights",
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
        seconds: {"path", "curve"} wall time (not in :meth:`to_json`, whose output is reproducible).
        notes: what a reader needs to know.
    """

    steps: np.ndarray
    relative_gap: np.ndarray
    network_loss: np.ndarray
    quadratic_loss: np.ndarray
    samples: int
    subsampled: bool
    seconds: dict | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """The ``"departure"`` block of ``Prediction.to_json``: the same bytes from the same inputs (no
        wall times)."""
        return {
            "steps": [int(s) for s in self.steps],
            "relative_gap": json_numbers(self.relative_gap),
            "network_loss": json_numbers(self.network_loss),
            "quadratic_loss": json_numbers(self.quadratic_loss),
            "samples": int(self.samples),
            "subsampled": bool(self.subsampled),
            "notes": list(self.notes),
        }


@functools.cache
def register_departure_pytree() -> None:
    """Departure as a pytree of its numbers (``nqf.core.pytrees``). Called by
    ``nqf.theory.predict.result`` when a Prediction is first flattened, not when this module loads:
    registering here at import would change when a lone Departure stops being a leaf."""
    register_fields(
        Departure,
        ("steps", "relative_gap", "network_loss", "quadratic_loss", "seconds"),
        ("samples", "subsampled", "notes"),
    )


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
) -> Departure:
    """The network along ``prediction``'s quadratic path (the departure curve).

    arch, X (N, *input_shape), Y (N, K): as given to ``nqf.predict``; prediction: its
    result; W0 (d, n): the init if ``predict`` was given one (else drawn as ``predict`` does);
    data: the data matrices ``predict`` used (else rebuilt). ``samples``: at most this many
    samples (a fixed random subset beyond); ``points``: at most about this many evaluated
    steps of the curve.
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
    return Departure(
        steps=steps,
        relative_gap=gap,
        network_loss=net_loss,
        quadratic_loss=quad_loss,
        samples=int(Xs.shape[0]),
        subsampled=bool(subsampled),
        seconds=seconds,
        notes=tuple(notes),
    )
