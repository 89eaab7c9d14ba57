r"""The network's own prediction: the mean-field flow of its units (docs/departure.md, part (c)).

Why it closes. The layer is a sum over interchangeable units, f(x) = sum_i u(w_i, x), and
gradient descent moves every unit by the same function of its own weights,

    w_i+ = w_i - lr g_t(w_i),   g_t(w) = (1/N) sum_x l'(f_t(x), y) . du(w, x)/dw,

the residual l' being shared. So w_i(t) = Phi_t(w_i(0)) for one map Phi_t of R^d common to
all units (an optimizer with a buffer: the pair (w, v) likewise; each particle is stepped by the
optimizer's own ``flow_step``). The mean-field flow replaces the
n units by their distribution, started where the init is, rho_0 = N(0, M0 / n)
(M0 = W0 W0^T, the init's own second moment), and pushed by the same map:

    f_t(x) = n E_{w ~ rho_t} u(w, x),   M_t = n E_{w ~ rho_t} w w^T.

For a quadratic unit u = w^T A(x) w this is the M-flow exactly (f and g . w depend on M
alone); for a nonlinear unit it keeps what the quadratic model drops: how the units'
distribution deforms once they leave small weights (the tanh units that carry a learned
mode saturate, the others take over), which is what moves the later modes' switch-on steps
(docs/departure.md: the M-flow is 35-110% late on mode 4 of the tanh staircase, the mean-field
flow within 3%).

How it is integrated. The expectation over rho_0 is a sum over S particles w_s = L0 xi_s
(L0 L0^T = M0 / n, L0 of r = rank(M0) <= min(n, d) columns: the directions the init occupies;
the xi_s standard normal draws in R^r whitened so that (1/S) sum xi xi^T = I
exactly: for a quadratic unit the particle flow is then the M-flow to rounding), each pushed
by the per-unit step above with f the particles' mean times n. Two independent particle sets
(seeds 0 and 1) run side by side (:func:`set_pieces`); the prediction is their mean and half their
difference is the numerical error estimate (``spread``). A mode whose two estimates differ by
more than SPREAD_LIMIT of its step gets no number, and a note says so; likewise a plateau whose
two sets' own readings differ by more than SPREAD_LIMIT of it (``plateau_spread``).

Cost. A step is one forward and backward pass of the unit over 2 S particles and N samples,
2 S N times a unit's cost: training's step with 2 S units instead of n (independent of n; the
M-flow's step costs no samples at all). Memory ~ 2 S N (d + K) numbers for the
activations, estimated before compiling. Time: estimated before compiling (:func:`flow_seconds`)
and, where the estimate comes near the budget, measured as it runs (:class:`FlowWatch`).

Units coupled through a router (a mixture of experts: f = sum_e route(l)_e h_e over its E
experts). The mean field does not hold there: once the gate logits reach O(1) the softmax
concentrates on the extreme units of the distribution, and the particle flow does not converge
as S grows (measured on E = 4: steps 232/433/661 with 64 particles a set, the sets disagreeing
at 256, the loss diverging at 1024, where a winning particle's step is S/n times a unit's). A
few experts are a finite set, so the prediction is the finite-width one instead (docs/departure.md
part (d)): the median of the networks that share the init's second moment M0. Given
W0 W0^T = M0, a Gaussian init is W0 O with O Haar-distributed on O(n) (its density depends on
W W^T alone), so K networks started at W0 O_k (O_k drawn, not W0 itself) and trained as the
network is give E[ . | M0], a prediction from M0 alone as the M-flow's and the mean field's are
(for a quadratic unit every one of them is the M-flow: M_t is the same for all). The switch-on
step is their median, ``spread`` half the interquartile range: how much the step varies from init
to init given M0, not a numerical error; a mode whose spread exceeds SPREAD_LIMIT, or that fewer
than half of them switch on within the horizon, gets no number. K = max(NETWORKS,
SETS x particles / n): the mean field's cost. ``PredictConfig.network_method = "networks"``
computes it for any unit: its spread is then the finite-width error bar the mean field lacks
(how much a network of n units started from this M0 varies); ``"mean_field"`` refuses a router.

Minibatch SGD: each particle steps on the minibatch training draws at that step (replayed from
training's batch key, as the M-flow replays them; drawn in the loop), f the particles' mean on
those samples; the loss read at a record step is the full data's. The prediction is for the
network trained on those batches (tests/test_network_flow.py: within 2.2% of an independent
SGD loop where the M-flow is 43% late).

What it does not cover: optimizers whose step of a unit is not a function of that unit's own
gradient (Adam, Muon: :func:`not_applicable`; ``predict`` has no M-flow for them either); the
finite-width fluctuations of the n units around their distribution beyond M0 for units without
a router (measured small at n = 8 on the staircase; docs/departure.md).
"""

from __future__ import annotations

import functools
import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, network_batch
from nqf.core.measure import (
    TIMING_SHIFT,
    measured_plateau_losses,
    occupation_group_steps,
    plateau_timing,
    switch_steps,
)
from nqf.core.memory import available_bytes, size_text, usable_cores
from nqf.core.programs import background_calls, background_compile, bucket_length, to_device
from nqf.core.pytrees import json_numbers, register_fields
from nqf.core.sampling import minibatch_row, training_keys
from nqf.optimizers import OPTIMIZER_RECORDS, closed_optimizer, optimizer_record
from nqf.theory.data_matrices.samples import per_sample_loss
from nqf.theory.departure.path import network_unit

# what the JSON calls this prediction
METHOD = "mean-field flow of the network's units (docs/departure.md, part (c))"
# Particles per set (at least 2 min(n, d) >= 2 rank(M0): the whitening needs more than the rank);
# two sets (their difference is the error estimate). Measured on the tanh staircase (n = 32, sigma0
# 1e-6, data seed 0), modes 3-4 against training: one set of 32 particles within 4.6%, 64 within
# 2.1%, 2048 within 2.5% (the error left is the mean field's, not the sampling's).
PARTICLES = 64
SETS = 2
# a mode whose two particle sets' steps differ by more than this fraction gets no number
SPREAD_LIMIT = 0.05
# The time estimate of the particle flow (:func:`flow_seconds`), a first call's: COMPILE_SECONDS for
# the program, then per step STEP_SECONDS, per particle and sample 3 unit evaluations' flops at
# FLOPS_PER_SECOND plus PAIR_SECONDS, and for units coupled by a router ROUTED_SECONDS per network
# and sample (the gate). Fitted (least squares in log time) to the first calls of the 19 cases of
# benchmarks/bench_network_flow.py's CASES on the 2-core Intel Xeon, each in a fresh process with an
# empty cache: estimated / measured 0.65-1.36 over two runs (benchmark ``network_estimate``; the
# staircase 0.76-1.15, wine, breast cancer, diabetes 0.83-1.16, digits 1.04-1.36, 1 - cos units
# 0.65-0.83, mixtures of experts 0.76-0.98, softmax attention 0.72-0.84: the machine's load moves a
# first call by up to 30%), where the model without the compile and router terms gave 0.45-2.4
# (digits 7.1 s estimated for 3.0 s).
COMPILE_SECONDS = 0.45
STEP_SECONDS = 5e-5
FLOPS_PER_SECOND = 2e10
PAIR_SECONDS = 7.5e-9
ROUTED_SECONDS = 6e-8
# The estimate reads flops, and a unit's flops do not set its time: on the 2-core AMD EPYC the
# built-in tanh perceptron's flow on digits (16 components, 2 x 64 particles) takes 0.7 ms a step
# and a user's a @ gelu(V x) 14 ms, 20x more for 2.4x the flops (4.2 s estimated, 8-10 s taken:
# its per-particle outputs, 128 x 1797 x 10 numbers, go through memory each step). So a flow the
# estimate puts above network_budget / WATCH_BELOW (below, the estimate's largest low error
# measured, 3.3x, still leaves it within the budget) is watched (:class:`FlowWatch`): it runs its
# first two WATCH_SEGMENTS-ths of steps as two program calls, the second timed, and stops where
# the time so far plus the second's rate over the steps left (and over every other point of a
# grid, all judged at once by its first run) exceeds the budget; else the rest runs in one call
# (a step's cost is the program's, the same at every step). Not judged on the first segment: it
# runs beside predict's quadratic stages and carries the first call's costs, and measured 1.5-3.1x
# the run's mean rate (gelu2, breast cancer, digits, attention).
WATCH_BELOW = 4.0
WATCH_SEGMENTS = 16
# And the other way: the estimate errs high (up to 3.1x on the flows a 5 s budget decides, 5.2x on
# flows under a second: benchmark ``network_estimate``; a 25-point grid of the staircase estimated
# at 8.6 s took 1.7 s), so it refuses a flow before compiling only where its run (the estimate
# less COMPILE_SECONDS) is more than ESTIMATE_SLACK times the budget's: in between, the watch
# decides on the flow's own time (:func:`estimate_refuses`). The most a refused flow can then
# spend is its compile and an eighth of a run ESTIMATE_SLACK x the budget.
ESTIMATE_SLACK = 4.0
# particle draws: set k uses numpy's default_rng(_SEED + k); the rotations of the networks sharing M0 one rng
_SEED = 0
# networks sharing M0 (units coupled by a router): at least this many
NETWORKS = 16
ENSEMBLE_METHOD = "median over networks sharing the init's M0 (rotated inits W0 O; docs/departure.md, part (d))"
# how notes and printed lines call the two constructions, by whether it is the networks sharing M0
_LABELS = {False: "mean field", True: "networks sharing M0"}
EXACT_METHOD = (
    "the M-flow: the unit is exactly quadratic (its expansion check's remainder is rounding at every scale), "
    "so the network is its quadratic model"
)
# numbers held per particle, sample and (d + K) while a step runs (forward and backward; a rough bound)
_HELD = 4.0


@dataclass(frozen=True)
class NetworkFlow:
    """The mean-field flow of the network's units (module docstring), on the prediction's records.

    steps (R,): the M-flow's record steps; loss (R,): the network's predicted loss (mean of
    the particle sets); occupations (R, g): q_k^T M_t q_k of the growing modes; switch_steps
    (g,): first step at the prediction's thresholds (the sets' mean; NaN: not within the
    horizon, or the sets disagree by more than SPREAD_LIMIT); spread (g,): half the sets'
    difference (steps); plateau_losses (g,): the loss at sqrt(t_k t_next) of its own steps
    (``nqf.core.measure.measured_plateau_losses``, the convention of the trained network's);
    plateau_spread (g,): half the sets' difference of their own plateau readings (each set's
    loss at its own steps; NaN where a set has none). A plateau whose spread exceeds SPREAD_LIMIT
    of it gets no number, as a step does; plateau_timing (g,): its timing error bar, relative: how
    far the reading moves when its reading step moves by TIMING_SHIFT (2%) either way
    (``nqf.core.measure.plateau_timing``): large where the plateau is short and read on a drop,
    where one init's plateau misses most (its calibration at TIMING_SHIFT; 0 for an exactly
    quadratic unit, whose M-flow is its training);
    particles: per set; seconds: the wall time it took in the caller's thread (planning, waiting for
    its program, the run; not the quadratic stages ``predict`` ran while its program compiled;
    not in :meth:`to_json`, whose output is reproducible).

    ``ensemble``: units coupled by a router, so the sets are ``sets`` networks of ``particles``
    = n units each sharing the init's M0 (module docstring): switch_steps their median, spread
    half their interquartile range, loss and occupations their mean, plateau_spread half the
    interquartile range of their own plateau readings (how much one network's plateau varies
    given M0).
    """

    steps: np.ndarray
    loss: np.ndarray
    occupations: np.ndarray
    switch_steps: np.ndarray
    spread: np.ndarray
    plateau_losses: np.ndarray
    plateau_spread: np.ndarray
    plateau_timing: np.ndarray
    particles: int
    seconds: float
    notes: tuple[str, ...] = field(default=())
    sets: int = SETS
    ensemble: bool = False
    exact: bool = False

    @property
    def method(self) -> str:
        """What this prediction is, in words (the JSON's ``method``)."""
        return EXACT_METHOD if self.exact else ENSEMBLE_METHOD if self.ensemble else METHOD

    @property
    def label(self) -> str:
        """A short name for notes and printed lines."""
        return "M-flow (exactly quadratic unit)" if self.exact else _LABELS[self.ensemble]

    def group_readings(self, groups, thresholds) -> tuple[np.ndarray, np.ndarray]:
        """(switch steps, plateau losses), (G,) each, per degenerate group (index tuples,
        ``Prediction.groups``; ``thresholds`` (g,) the prediction's m_k*/2): the steps as the M-flow's
        group reading takes them (``nqf.core.measure.occupation_group_steps``, on the sets' mean
        occupations), and the loss at the log-midpoint from there to the next group's step; a mode of
        its own whose plateau the flow withheld (its spread above SPREAD_LIMIT) keeps no number."""
        steps = occupation_group_steps(self.switch_steps, self.steps, self.occupations, thresholds, groups)
        plateau = measured_plateau_losses(np.asarray(self.steps), np.asarray(self.loss), steps, float(self.steps[-1]))
        own = np.asarray(self.plateau_losses, dtype=np.float64)
        withheld = [
            len(group) == 1 and np.isfinite(steps[j]) and np.isnan(own[group[0]]) for j, group in enumerate(groups)
        ]
        return steps, np.where(withheld, np.nan, plateau)

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "switch_steps": json_numbers(self.switch_steps),
            "spread": json_numbers(self.spread),
            "plateau_losses": json_numbers(self.plateau_losses),
            "plateau_spread": json_numbers(self.plateau_spread),
            "plateau_timing": json_numbers(self.plateau_timing),
            "steps": [int(s) for s in self.steps],
            "loss": json_numbers(self.loss),
            "particles": int(self.particles),
            "sets": int(self.sets),
            "ensemble": bool(self.ensemble),
            "exact": bool(self.exact),
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: dict) -> NetworkFlow:
        def arr(v):
            return np.array([np.nan if x is None else x for x in v], dtype=np.float64)

        loss = arr(data["loss"])
        return cls(
            steps=np.asarray(data["steps"], dtype=np.int64),
            loss=loss,
            occupations=np.full((loss.size, len(data["switch_steps"])), np.nan),
            switch_steps=arr(data["switch_steps"]),
            spread=arr(data["spread"]),
            plateau_losses=arr(data["plateau_losses"]),
            # absent from records written before it was computed
            plateau_spread=arr(data.get("plateau_spread", [None] * len(data["plateau_losses"]))),
            plateau_timing=arr(data.get("plateau_timing", [None] * len(data["plateau_losses"]))),
            particles=int(data["particles"]),
            seconds=float("nan"),  # not in the JSON: outputs are reproducible to the byte
            notes=tuple(data.get("notes", ())),
            sets=int(data.get("sets", SETS)),
            ensemble=bool(data.get("ensemble", False)),
            exact=bool(data.get("exact", False)),
        )


@functools.cache
def register_network_flow_pytree() -> None:
    """NetworkFlow as a pytree of its numbers (``nqf.core.pytrees``). Called by
    ``nqf.theory.predict.result`` when a Prediction is first flattened, not when this module loads:
    registering here at import would change when a lone NetworkFlow stops being a leaf."""
    register_fields(
        NetworkFlow,
        ("steps", "loss", "occupations", "switch_steps", "spread", "plateau_losses", "plateau_spread")
        + ("plateau_timing", "seconds"),
        ("particles", "notes", "sets", "ensemble", "exact"),
    )


def is_exact(arch: Architecture, expansion) -> bool:
    """Whether the network of ``arch`` is its quadratic model at every scale: no router and the
    expansion check's ``exactly_quadratic`` (``expansion``: an ExpansionReport, or None: unknown).
    Then every construction of the network's own prediction (the mean field, the networks sharing
    M0) is the M-flow itself (tests/test_network_flow.py), and :func:`quadratic_network` gives it
    for nothing."""
    return arch.router is None and expansion is not None and expansion.exactly_quadratic


def quadratic_network(steps, loss, occupations, switch_steps) -> NetworkFlow:
    """The network's own prediction of an exactly quadratic unit (:func:`is_exact`): the M-flow's
    record steps (R,), loss (R,), occupations (R, g) (NaN where not kept) and switch steps (g,),
    its plateau losses read as the trained network's (``measured_plateau_losses``), no spread."""
    steps = np.asarray(steps)
    loss = np.asarray(loss, dtype=np.float64)
    switch = np.array(switch_steps, dtype=np.float64)
    plateau = measured_plateau_losses(steps, loss, switch, float(steps[-1]))
    return NetworkFlow(
        steps=steps,
        loss=loss,
        occupations=np.asarray(occupations, dtype=np.float64),
        switch_steps=switch,
        spread=np.where(np.isfinite(switch), 0.0, np.nan),
        plateau_losses=plateau,
        plateau_spread=np.where(np.isfinite(switch), 0.0, np.nan),
        plateau_timing=np.where(np.isfinite(plateau), 0.0, np.nan),
        particles=0,
        seconds=0.0,
        sets=0,
        exact=True,
    )


def uses_networks(arch: Architecture, method: str = "auto") -> bool:
    """Whether the network's own prediction of ``arch`` by ``method`` (``PredictConfig.network_method``)
    is the networks sharing M0 (asked for, or ``auto`` with units coupled by a router) rather than
    the mean field (module docstring)."""
    return method == "networks" or (method == "auto" and arch.router is not None)


def flow_label(arch: Architecture, method: str = "auto") -> str:
    """What the network's own prediction of ``arch`` by ``method`` is called in notes."""
    return _LABELS[uses_networks(arch, method)]


def not_computed_note(arch: Architecture, why: str | None, method: str = "auto") -> str:
    """The note a prediction carries when the network's own prediction is not computed."""
    return f"network ({flow_label(arch, method)}): not computed: {why}; the predictions are the quadratic model's"


def not_applicable(arch: Architecture, optimizer: str) -> str | None:
    """Why the mean-field flow is not computed for ``arch`` under ``optimizer``, or None."""
    record = optimizer_record(optimizer)
    if not record.closes_on_m:
        closed = ", ".join(name for name, o in OPTIMIZER_RECORDS.items() if o.closes_on_m)
        return (
            f"{optimizer}'s step of a unit is not a function of that unit's own gradient alone; the mean-field flow "
            f"is computed for {closed}"
        )
    return None


def flow_bytes(arch: Architecture, samples: int, units: int) -> float:
    """Bytes a step holds: units (all sets') * samples * (d + K) numbers, _HELD times (module docstring)."""
    itemsize = jnp.dtype(jnp.result_type(float)).itemsize
    return _HELD * itemsize * units * samples * (arch.dim + arch.outputs)


def unit_flops(arch: Architecture, x) -> float:
    """Flops of one unit on one sample (XLA's cost analysis of the lowered unit; nothing compiled;
    lowered once per architecture, sample shape and dtype)."""
    return _unit_flops(arch, tuple(np.shape(x)), jnp.dtype(jnp.result_type(float)).name)


@functools.cache
def _unit_flops(arch: Architecture, shape: tuple, dtype: str) -> float:
    unit = network_unit(arch)
    w = jax.ShapeDtypeStruct((arch.dim,), dtype)  # shapes only: no eager zeros to compile
    analysis = jax.jit(lambda w, x: jnp.sum(unit(w, x))).lower(w, jax.ShapeDtypeStruct(shape, dtype)).cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return float((analysis or {}).get("flops", 10.0 * (arch.dim + arch.outputs)))


def flow_seconds(arch: Architecture, X, steps: int, units: int, networks: int = 0, points: int = 1) -> float:
    """Estimated time of a first call of the particle flow (the constants' comment): COMPILE_SECONDS
    + points x steps x (STEP_SECONDS + units (all sets') x N samples x (3 x a unit's flops
    (:func:`unit_flops`, forward and backward) / FLOPS_PER_SECOND + PAIR_SECONDS) + networks x N x
    ROUTED_SECONDS for units coupled by a router). ``networks``: the networks sharing M0 run (0 for
    particles); ``points``: the flows one plan runs (``predict_grid``'s points; one program compiled)."""
    N = int(X.shape[0])
    per_pair = 3.0 * unit_flops(arch, X[0]) / FLOPS_PER_SECOND + PAIR_SECONDS
    routed = networks * N * ROUTED_SECONDS if arch.router is not None else 0.0
    return COMPILE_SECONDS + points * steps * (STEP_SECONDS + units * N * per_pair + routed)


def estimate_refuses(estimate: float, budget: float | None) -> bool:
    """Whether a flow estimated at ``estimate`` seconds (:func:`flow_seconds`) is refused before it
    compiles under ``budget`` (None: never): where COMPILE_SECONDS + (estimate - COMPILE_SECONDS) /
    ESTIMATE_SLACK exceeds it (the constants' comment; below, its watch decides as it runs)."""
    return budget is not None and COMPILE_SECONDS + (estimate - COMPILE_SECONDS) / ESTIMATE_SLACK > budget


def points_budget(budget: float | None, points: int) -> float | None:
    """The ``network_budget`` of ``points`` flows planned together (``predict_grid``) that refuses
    exactly the points whose own flow :func:`plan_flow` refuses alone: one program compiles for all,
    so points x budget - (points - 1) x COMPILE_SECONDS (:func:`flow_seconds`); None stays None."""
    if budget is None or budget <= COMPILE_SECONDS:  # (below the compile every point is refused alone too)
        return budget
    return points * budget - (points - 1) * COMPILE_SECONDS


def whitened_draws(d: int, particles: int, sets: int = SETS, seed: int = _SEED) -> np.ndarray:
    """(sets, d, particles) standard normal draws, each set centred and whitened so that
    (1/particles) xi xi^T = I exactly (needs particles > d)."""
    out = np.empty((sets, d, particles))
    for k in range(sets):
        xi = np.random.default_rng(seed + k).standard_normal((d, particles))
        xi -= xi.mean(axis=1, keepdims=True)
        chol = np.linalg.cholesky(xi @ xi.T / particles)
        out[k] = np.linalg.solve(chol, xi)
    return out


def rotated_inits(W0: np.ndarray, networks: int, seed: int = _SEED) -> np.ndarray:
    """(networks, d, n): W0 O_k with O_k Haar-distributed on O(n) (QR of a Gaussian matrix, the
    signs fixed by R's diagonal), so that every network has W W^T = W0 W0^T exactly."""
    rng = np.random.default_rng(seed)
    n = W0.shape[1]
    out = np.empty((networks, *W0.shape))
    for k in range(networks):
        Q, R = np.linalg.qr(rng.standard_normal((n, n)))
        out[k] = W0 @ (Q * np.sign(np.diag(R)))
    return out


def support_root(M: np.ndarray) -> np.ndarray:
    """A factor L (d, r) with L L^T = M for a positive semidefinite M, r its numerical rank (eigh;
    eigenvalues below d eps max|lambda| dropped, as numpy's matrix_rank): the directions the
    distribution N(0, M) occupies. An init of n < d units has M0 of rank n."""
    lam, U = np.linalg.eigh(0.5 * (M + M.T))
    keep = lam > M.shape[0] * np.finfo(np.float64).eps * np.max(np.abs(lam), initial=0.0)
    return U[:, keep] * np.sqrt(lam[keep])


@partial(jax.jit, static_argnames=("arch", "loss", "optimizer", "width", "batch_size"))
def _particle_sets(
    arch, loss, optimizer, width, batch_size, state, bounds, X, Y, lr, beta, basis, record, batch_key=None
):
    """The steps bounds[0] <= t < bounds[1] of the K particle sets' flow: its ``state`` (carry,
    (occupations (R, K, g), loss (R, K)), i) after them. carry: (the particles (K, d, S), the
    optimizer's buffers like them); the readings at the record steps ``record`` (R,): ascending,
    the horizon last, padded after it with -1 (rows left at zero); i: the row being written. A run
    from the start (:func:`initial_state`) over steps 0 .. horizon, in one call or in segments
    (the same numbers: the loop's state is all there is), reads every record row.

    ``batch_size`` None: full batch. Otherwise (minibatch SGD) step t's gradient is the mean over
    the minibatch training draws at step t, ``minibatch_indices(batch_key, N, batch_size, .)``
    row t (drawn here, step by step: the same rows, without holding steps x batch indices), and
    the loss read at a record step is the full-data loss, computed at those steps only.

    One flat loop over the steps 0 .. horizon, one forward and backward pass of every set each
    (vmapped over the sets inside the step). Every step writes its loss (the one its gradient
    computes anyway) and occupations into the row of the next record step, and moves to the next
    row when it is that step: a row ends with the readings of its own step, with no conditional,
    gather or scatter in the loop; the horizon's step is taken and dropped. Against one loop per
    set vmapped from outside, with a conditional write and the horizon read after the loop (a
    second copy of the forward pass), in the README's first ``predict`` (medians of 6 alternating
    fresh processes, the 2-core Intel machine): tracing 0.06 s against 0.11 s, compiling 0.44 s
    against 0.55 s; the same readings. (A scan over the records' segments, a conditional and an
    inner loop each, compiled slower than the per-set loop: 0.48 s against 0.40 s.)"""
    S = state[0][0].shape[2]
    scale = width / S

    def loss_of(W, inputs=X, targets=Y):
        return jnp.mean(per_sample_loss(loss, scale * network_batch(arch, W, inputs), targets))

    if batch_size is None:
        value_and_grad = jax.vmap(jax.value_and_grad(loss_of))
    else:
        full_loss = jax.vmap(loss_of)
        batch_grad = jax.vmap(jax.grad(loss_of), in_axes=(0, None, None))

        def value_and_grad_at(W, t, read):
            rows = minibatch_row(batch_key, X.shape[0], batch_size, t)
            value = jax.lax.cond(read, full_loss, lambda W: jnp.zeros(W.shape[0], W.dtype), W)
            return value, batch_grad(W, X[rows], Y[rows])

    def occupations(W):  # q_k^T M q_k with M = (n / S) W W^T, every set: (K, g)
        P = jnp.einsum("dg,kds->kgs", basis, W)
        return scale * jnp.sum(P * P, axis=2)

    def step(t, state):
        carry, (occ, values), i = state
        if batch_size is None:
            value, grad = value_and_grad(carry[0])
        else:  # the full-data loss only where a row is read: the step of record[i]
            value, grad = value_and_grad_at(carry[0], t, record[i] == t)
        occ = jax.lax.dynamic_update_index_in_dim(occ, occupations(carry[0]), i, 0)
        values = jax.lax.dynamic_update_index_in_dim(values, value, i, 0)
        # the optimizer's own step with each particle's per-unit gradient
        return optimizer.flow_step(grad / scale, carry, lr, beta), (occ, values), i + (record[i] == t).astype(i.dtype)

    return jax.lax.fori_loop(bounds[0], bounds[1], step, state)


def initial_state(draws: np.ndarray, buffers: int, rows: int, growing: int) -> tuple:
    """The flow's state at step 0 (:func:`_particle_sets`), host arrays of ``draws``' float dtype:
    the particles ``draws`` (K, d, S), ``buffers`` zero optimizer buffers like them, zero readings
    for ``rows`` record rows and ``growing`` modes, row 0."""
    K = draws.shape[0]
    carry = (draws, *(np.zeros_like(draws) for _ in range(buffers)))
    readings = (np.zeros((rows, K, growing), draws.dtype), np.zeros((rows, K), draws.dtype))
    return carry, readings, np.zeros((), np.int32)


def network_flow(
    arch: Architecture, X, Y, prediction, W0, particles: int | None = None
) -> tuple[NetworkFlow | None, str | None]:
    """(the mean-field flow of the network of ``prediction``, None) or (None, why it is not computed).

    An exactly quadratic unit (:func:`is_exact`, by the prediction's expansion check) is its own
    quadratic model: its prediction is the M-flow's (:func:`quadratic_network`), for any optimizer
    the prediction has an M-flow of, with nothing computed. Otherwise
    X (N, ...), Y: the checked samples (all of them: the flow is full-batch, as training);
    W0 (d, n): the prediction's init. Reasons: :func:`not_applicable`, memory beyond half of what
    is available (:func:`flow_bytes`). ``particles``: per set, default max(PARTICLES, 2 min(n, d))
    (rank(M0) <= min(n, d): the directions the init's units occupy).
    """
    config = prediction.config
    g = prediction.num_growing
    if is_exact(arch, prediction.expansion):
        flow = prediction.flow
        steps = np.asarray(flow.steps)
        occupations = (
            np.full((steps.size, g), np.nan) if flow.occupations is None else np.asarray(flow.occupations)[:, :g]
        )
        return quadratic_network(steps, flow.loss, occupations, prediction.mflow_switch_steps), None
    basis = np.asarray(prediction.modes.full_basis)[:, :g]
    return point_flow(
        arch, X, Y, W0, config, np.asarray(prediction.flow.steps), basis, prediction.thresholds, particles
    )


def point_flow(
    arch: Architecture,
    X,
    Y,
    W0,
    config,
    record,
    basis,
    thresholds,
    particles: int | None = None,
    budget: float | None = None,
) -> tuple[NetworkFlow | None, str | None]:
    """:func:`network_flow` from its pieces: ``config`` (a PredictConfig: lr, optimizer, beta,
    loss, network_budget), the record steps (R,), the growing modes' basis (d, g) and
    thresholds (g,), so that ``nqf.predict_grid`` runs it per point with one compiled program.
    ``budget``: seconds the estimate (:func:`flow_seconds`) may take, default the config's
    ``network_budget`` (None: no limit). :func:`plan_flow` then :meth:`FlowPlan.run`."""
    basis = np.asarray(basis)
    plan, why = plan_flow(arch, X, Y, np.shape(W0)[1], config, record, basis.shape[1], particles, budget)
    if plan is None:
        return None, why
    found = plan.run(W0, basis, thresholds)
    return (None, found) if isinstance(found, str) else (found, None)


def plan_flow(
    arch: Architecture,
    X,
    Y,
    width: int,
    config,
    record,
    growing: int,
    particles: int | None = None,
    budget: float | None = None,
    points: int = 1,
) -> tuple[FlowPlan | None, str | None]:
    """(the particle flow of ``width`` units on (X, Y) under ``config``, its program compiling in
    the background, None) or (None, why it is not computed): the checks of :func:`point_flow`
    (the optimizer, a router under ``mean_field``, the particles, the time budget, the memory)
    before anything is compiled. Only shapes are needed: the record steps (R,) and the number of
    growing modes; the init and the basis come with :meth:`FlowPlan.run`. ``predict`` plans it
    once the modes are known, so that the program compiles while the quadratic stages run.
    ``points``: how many flows the plan will run (``predict_grid``'s points): the time budget
    holds for all of them together, so a large grid does not spend points x budget unasked."""
    start = time.perf_counter()
    why = not_applicable(arch, config.optimizer)
    if why is not None:
        return None, why
    N = int(X.shape[0])
    # the init's distribution N(0, M0 / n) occupies rank(M0) <= min(n, d) directions: the particles
    # are whitened there, so their count is set by that bound, not by d (attention: d = 112, n = 8);
    # the root itself (an eigh of M0) is taken by run()
    directions = min(width, arch.dim)
    particles = max(PARTICLES, 2 * directions) if particles is None else int(particles)
    method = config.network_method
    if method == "mean_field" and arch.router is not None:
        return None, (
            "the mean field does not hold for units coupled by a router (the gate concentrates on the extreme "
            "units; docs/departure.md, part (d)): network_method 'networks' or 'auto' computes it"
        )
    ensemble = uses_networks(arch, method)
    if ensemble:  # networks of the n units each, sharing M0, at the mean field's cost
        sets, per_set = max(NETWORKS, -(-SETS * particles // width)), width
        what = f"{sets} networks x {width} units"
    else:
        if particles <= directions:
            return None, f"{particles} particles do not exceed the {directions} directions the init may occupy"
        sets, per_set = SETS, particles
        what = f"{SETS} x {particles} particles"
    record = np.asarray(record, dtype=np.int64)
    horizon = int(record[-1])
    budget = config.network_budget if budget is None else budget
    optimizer = closed_optimizer(config.optimizer)
    # a step of minibatch SGD evaluates the units on its batch (the full data at the record steps only)
    stepped = X[: int(config.batch_size)] if optimizer.minibatches else X
    networks = sets if ensemble else 0
    estimate = 0.0 if budget is None else flow_seconds(arch, stepped, horizon, sets * per_set, networks, points)
    if estimate_refuses(estimate, budget):
        at = f" x {points} points" if points > 1 else ""
        return None, (
            f"it would take about {estimate:.2g} s by its estimate ({what} x {int(stepped.shape[0])} samples x "
            f"{horizon} steps{at}), above network_budget = {budget:g} s by more than the estimate errs (x"
            f"{ESTIMATE_SLACK:g} on its run; raise it, or None for no limit)"
        )
    needed = flow_bytes(arch, N, sets * per_set)
    if needed > available_bytes() / 2:
        return None, f"it would hold about {size_text(needed)} for {N} samples (more than half the memory available)"
    dtype = jnp.result_type(float)
    # the record padded to a power of two (with -1, no step): fewer programs to compile
    padded = np.full(bucket_length(record.size, floor=64), -1, dtype=np.int32)
    padded[: record.size] = record
    # host data transferred as it is (to_device): jnp.asarray of a Python float compiled a
    # conversion, and of the record a copy, on the first call
    inputs = (to_device(np.asarray(X), dtype=dtype), to_device(np.asarray(Y), dtype=dtype))
    pieces, per_piece = set_pieces(sets)
    draws = np.zeros((per_piece, arch.dim, per_set), dtype=dtype)
    shapes = (
        jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
            initial_state(draws, optimizer.buffers, padded.size, int(growing)),
        ),
        jax.ShapeDtypeStruct((2,), np.int32),  # the steps' bounds
        *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs),
        jax.ShapeDtypeStruct((), dtype),
        jax.ShapeDtypeStruct((), dtype),
        jax.ShapeDtypeStruct((arch.dim, int(growing)), dtype),
        jax.ShapeDtypeStruct(padded.shape, padded.dtype),
    )
    batch_size: int | None = None
    batch_key: tuple[jax.Array, ...] = ()
    if optimizer.minibatches:  # the batches training draws: from its batch key, drawn in the loop
        batch_size, batch_key = int(config.batch_size), (training_keys(config.seed)[1],)
        shapes = (*shapes, *(jax.ShapeDtypeStruct(key.shape, key.dtype) for key in batch_key))
    program = background_compile(_particle_sets, (arch, config.loss, optimizer, width, batch_size), shapes)
    watch = (
        FlowWatch(budget - COMPILE_SECONDS, float(budget), points, horizon)
        if budget is not None and estimate > budget / WATCH_BELOW and horizon >= 2 * WATCH_SEGMENTS
        else None
    )
    return (
        FlowPlan(
            arch=arch,
            config=config,
            optimizer=optimizer,
            inputs=inputs,
            record=record,
            padded=to_device(padded),
            width=width,
            sets=sets,
            per_set=per_set,
            pieces=pieces,
            per_piece=per_piece,
            ensemble=ensemble,
            program=program,
            batch_key=batch_key,
            seconds=time.perf_counter() - start,
            watch=watch,
        ),
        None,
    )


def set_pieces(sets: int) -> tuple[int, int]:
    """(pieces, sets per piece): how the K particle sets (networks) are run. On the CPU in as many
    pieces as there are cores (at most K), one program per piece, run side by side in threads
    (``nqf.core.programs.background_calls``); elsewhere in one. Measured on the 2-core Intel Xeon
    (2 sets, 1000 steps of the staircase's 2 x 64 particles): the program of both sets (vmapped)
    0.28-0.35 s, using 1.5 cores; the program of one set run for each set in turn 0.23-0.26 s; the
    two side by side 0.13 s. The numbers are the vmapped program's to rounding (1e-16)."""
    pieces = 1 if jax.default_backend() != "cpu" else max(1, min(int(sets), usable_cores()))
    per_piece = -(-int(sets) // pieces)
    return -(-int(sets) // per_piece), per_piece


@dataclass(frozen=True)
class FlowWatch:
    """How the runs of a plan are judged against the time budget (module constants): ``allowed``
    the seconds they may take together, network_budget - COMPILE_SECONDS; ``points`` how many runs
    the plan makes (a grid's points, run one after another), ``budget`` for the note, ``horizon``
    their last step. One judgement for all of them, by the first run to make it (thread-safe)."""

    allowed: float
    budget: float
    points: int
    horizon: int
    _verdict: list = field(default_factory=list, compare=False)  # [] undecided, [None] run, [why] refused
    _lock: Any = field(default_factory=threading.Lock, compare=False)

    def judged(self) -> tuple[int, int]:
        """The end of the first segment and of the second, the timed one (steps)."""
        first = max(1, round((self.horizon + 1) / WATCH_SEGMENTS))
        return first, 2 * first

    def verdict(self) -> tuple[bool, str | None]:
        """(whether it is decided, why the runs are refused: None where they run on)."""
        with self._lock:
            return (True, self._verdict[0]) if self._verdict else (False, None)

    def refusal(self, done: int, seconds: float, rate: float) -> str | None:
        """Why the runs stop after ``done`` steps of the first took ``seconds``, the timed segment
        at ``rate`` seconds a step, or None: where its steps left and every other point's at that
        rate would take them past ``allowed``."""
        projected = seconds + rate * (self.horizon + 1 - done + (self.points - 1) * (self.horizon + 1))
        if projected <= self.allowed:
            return None
        runs = f"the grid's {self.points} flows" if self.points > 1 else "it"
        return (
            f"stopped after {done} of its {self.horizon} steps ({seconds:.2g} s): at their rate {runs} would take "
            f"about {projected:.2g} s, above network_budget = {self.budget:g} s (raise it, or None for no limit)"
        )

    def decide(self, done: int, seconds: float, rate: float) -> str | None:
        """The judgement (:meth:`refusal`), kept for every run of the plan; a run that judges
        after another keeps the first's."""
        why = self.refusal(done, seconds, rate)
        with self._lock:
            if not self._verdict:
                self._verdict.append(why)
            return self._verdict[0]


def _run_piece(program, state, shared, horizon: int, watch: FlowWatch | None):
    """One piece's (occupations (K, R, g), loss (K, R)) as host arrays, run in this thread once
    ``program`` (the future of the compiled flow) holds it, from ``state`` (``_particle_sets``) over
    steps 0 .. ``horizon``; with a ``watch`` not yet decided, its first two segments first (the
    second timed) and the judgement; the note of why not (a str) where the runs are refused."""
    run = program.result()

    def advance(state, start: int, stop: int):
        return run(state, to_device(np.array([start, stop], dtype=np.int32)), *shared)

    done = 0
    if watch is not None:
        decided, why = watch.verdict()
        if not decided:
            first, second = watch.judged()
            begin = time.perf_counter()
            state = jax.block_until_ready(advance(state, 0, first))
            start = time.perf_counter()
            state = jax.block_until_ready(advance(state, first, second))
            now = time.perf_counter()
            why, done = watch.decide(second, now - begin, (now - start) / (second - first)), second
        if why is not None:
            return why
    _, (occ, values), _ = advance(state, done, horizon + 1)
    return np.moveaxis(np.asarray(occ), 0, 1), np.asarray(values).T


@dataclass(frozen=True)
class FlowPlan:
    """A particle flow checked and its program compiling (:func:`plan_flow`); :meth:`start` starts
    it from an init, :meth:`run` runs it. ``program``: the future of the compiled ``_particle_sets``
    (``nqf.core.programs.background_compile``); ``batch_key``: (training's batch key,) under
    minibatch SGD, else (); ``seconds``: the planning's own wall time; ``watch``: how each run is
    watched against the time budget as it goes (None: it is not; module constants)."""

    arch: Architecture
    config: Any
    optimizer: Any
    inputs: tuple
    record: np.ndarray
    padded: jax.Array
    width: int
    sets: int
    per_set: int
    pieces: int
    per_piece: int
    ensemble: bool
    program: Any
    batch_key: tuple
    seconds: float
    watch: FlowWatch | None = None

    def start(self, W0, basis, lr: float | None = None) -> FlowRun:
        """The flow from the init W0 (d, n) with the growing modes' basis (d, g), at the learning
        rate ``lr`` (default the plan's config's: a grid runs one plan at each of its rates),
        started in the background: its pieces (:func:`set_pieces`) each in a thread, from the
        moment the program is compiled, while the caller goes on (``predict`` runs its M-flow and
        Lotka-Volterra stages meanwhile); :meth:`FlowRun.finish` reads it."""
        begin = time.perf_counter()
        config, sets = self.config, self.sets
        dtype = self.inputs[0].dtype
        W0 = np.asarray(W0, dtype=np.float64)
        if self.ensemble:
            draws = rotated_inits(W0, sets)  # (K, d, n)
        else:
            root = support_root(W0 @ W0.T / self.width)  # (d, r), r = rank(M0) <= min(n, d) < particles
            draws = root @ whitened_draws(root.shape[1], self.per_set)  # (SETS, d, S)
        beta = self.optimizer.beta_of(config.beta)
        shared = (
            *self.inputs,
            to_device(config.lr if lr is None else float(lr), dtype=dtype),
            to_device(beta, dtype=dtype),
            to_device(np.asarray(basis), dtype=dtype),
            self.padded,
            *self.batch_key,
        )
        # the sets in `pieces` pieces of equal size (the last padded with copies of the last set),
        # each run by the one program in its own thread (set_pieces)
        size = self.per_piece
        stacked = np.asarray(draws, dtype=dtype)[np.minimum(np.arange(self.pieces * size), sets - 1)]
        growing, rows = np.shape(basis)[1], self.padded.shape[0]
        states = [
            jax.tree.map(
                to_device, initial_state(stacked[i * size : (i + 1) * size], self.optimizer.buffers, rows, growing)
            )
            for i in range(self.pieces)
        ]
        runs = background_calls(
            [partial(_run_piece, self.program, state, shared, int(self.record[-1]), self.watch) for state in states]
        )
        return FlowRun(plan=self, runs=tuple(runs), seconds=self.seconds + time.perf_counter() - begin)

    def run(self, W0, basis, thresholds, lr: float | None = None) -> NetworkFlow | str:
        """The NetworkFlow from the init W0 (d, n), the growing modes' basis (d, g) and their
        thresholds (g,), at the learning rate ``lr``, or why it stopped (its watch):
        :meth:`start`, then :meth:`FlowRun.finish`."""
        return self.start(W0, basis, lr).finish(thresholds)


@dataclass(frozen=True)
class FlowRun:
    """A particle flow running in the background (:meth:`FlowPlan.start`): ``runs`` the futures
    of its pieces' (occupations, loss); ``seconds`` the planning's and the start's own wall time."""

    plan: FlowPlan
    runs: tuple
    seconds: float

    def finish(self, thresholds) -> NetworkFlow | str:
        """The NetworkFlow, read at the growing modes' thresholds (g,) once the pieces are done, or
        why it stopped (its watch: :class:`FlowWatch`). Its ``seconds``: the
        planning's, the start's and this call's wall time (waiting for the program and its run
        included; the quadratic stages that ran meanwhile are not)."""
        begin = time.perf_counter()
        plan = self.plan
        record, sets = plan.record, plan.sets
        runs = [future.result() for future in self.runs]
        refused = [r for r in runs if isinstance(r, str)]
        if refused:  # the watch's judgement (every piece has the same)
            return refused[0]
        occ = np.concatenate([r[0] for r in runs])[:sets, : record.size].astype(np.float64)  # (sets, R, g)
        loss = np.concatenate([r[1] for r in runs])[:sets, : record.size].astype(np.float64)
        thresholds = np.asarray(thresholds, dtype=np.float64)
        found = switch_steps(record, occ, thresholds)  # (sets, g)
        label = _LABELS[plan.ensemble]
        steps, spread, notes = (_ensemble_steps if plan.ensemble else _particle_steps)(found)
        curve = loss.mean(axis=0)
        if not np.isfinite(curve).all():
            notes.append(f"network ({label}): the loss left the finite numbers (the learning rate is too large for it)")
        # each set's (network's) own plateau readings, at its own steps, for the plateaus' spread
        horizon_step = float(record[-1])
        set_plateaus = np.stack([measured_plateau_losses(record, loss[k], found[k], horizon_step) for k in range(sets)])
        plateau, plateau_spread = _plateau_readings(
            measured_plateau_losses(record, curve, steps, horizon_step), set_plateaus, plan.ensemble, label, notes
        )
        return NetworkFlow(
            steps=record,
            loss=curve,
            occupations=occ.mean(axis=0),
            switch_steps=steps,
            spread=spread,
            plateau_losses=plateau,
            plateau_spread=plateau_spread,
            plateau_timing=np.where(
                np.isfinite(plateau), plateau_timing(record, curve, steps, horizon_step, TIMING_SHIFT), np.nan
            ),
            particles=plan.per_set,
            seconds=self.seconds + time.perf_counter() - begin,
            notes=tuple(notes),
            sets=sets,
            ensemble=plan.ensemble,
        )


def _particle_steps(per_set: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(steps, spread, notes) of the mean field from its particle sets' steps (SETS, g): their
    mean and half their difference; no step where they disagree by more than SPREAD_LIMIT."""
    steps = per_set.mean(axis=0)
    spread = 0.5 * np.abs(per_set[0] - per_set[-1])
    notes = []
    one_sided = np.isfinite(per_set).any(axis=0) & ~np.isfinite(steps)
    wide = np.isfinite(steps) & (spread > SPREAD_LIMIT * steps)
    for k in np.flatnonzero(one_sided | wide):
        what = "one particle set only" if one_sided[k] else f"steps {per_set[0][k]:.0f} and {per_set[-1][k]:.0f}"
        notes.append(
            f"network (mean field): mode {k + 1} has no step: its two particle sets disagree ({what}; more than "
            f"{SPREAD_LIMIT:.0%}); more particles would settle it"
        )
    return np.where(one_sided | wide, np.nan, steps), spread, notes


def _plateau_readings(
    plateau: np.ndarray, per_set: np.ndarray, ensemble: bool, label: str, notes: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(plateau losses, their spread), (g,) each, from the prediction's own readings ``plateau``
    (g,) and every set's (network's) at its own steps ``per_set`` (K, g): the spread is half the
    two particle sets' difference (the mean field: a numerical error) or half the interquartile
    range over the networks sharing M0 (how much one network's plateau varies given M0; NaN where
    fewer than half have one). A plateau whose spread exceeds SPREAD_LIMIT of it gets no number
    and a note, as a switch-on step does."""
    if ensemble:
        read = np.isfinite(per_set).sum(axis=0) * 2 >= per_set.shape[0]
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # a column with no reading at all
            low, high = np.nanpercentile(per_set, [25.0, 75.0], axis=0)
        spread = np.where(read, 0.5 * (high - low), np.nan)
    else:
        spread = 0.5 * np.abs(per_set[0] - per_set[-1])
    wide = np.isfinite(plateau) & np.isfinite(spread) & (spread > SPREAD_LIMIT * np.abs(plateau))
    for k in np.flatnonzero(wide):
        why = (
            "the networks that share the init's M0 read it between "
            f"{low[k]:.4g} and {high[k]:.4g} (quartiles): one network's plateau depends on the init beyond M0"
            if ensemble
            else f"its two particle sets read {per_set[0][k]:.4g} and {per_set[-1][k]:.4g}; more particles would "
            "settle it"
        )
        notes.append(
            f"network ({label}): the plateau after mode {k + 1} has no loss: {why} (a spread above {SPREAD_LIMIT:.0%})"
        )
    return np.where(wide, np.nan, plateau), spread


def _ensemble_steps(per_network: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(steps, spread, notes) of the networks sharing M0 from their steps (K, g): the median (a
    network that does not switch a mode on within the horizon counts as later than all) and half
    the interquartile range; no step where fewer than half switch the mode on, or the spread
    exceeds SPREAD_LIMIT of the step (the step depends on the init beyond M0 by more than that)."""
    later = np.where(np.isfinite(per_network), per_network, np.inf)
    steps = np.median(later, axis=0)
    with np.errstate(invalid="ignore"):
        low, high = np.percentile(later, [25.0, 75.0], axis=0)
        spread = 0.5 * (high - low)
    notes = []
    K = per_network.shape[0]
    for k in range(per_network.shape[1]):
        switched = int(np.isfinite(per_network[:, k]).sum())
        if not np.isfinite(steps[k]):
            if switched:
                notes.append(
                    f"network (networks sharing M0): mode {k + 1} has no step: {switched} of {K} networks that "
                    "share the init's M0 switch it on within the horizon (fewer than half)"
                )
        elif spread[k] > SPREAD_LIMIT * steps[k]:
            upper = f"{high[k]:.0f}" if np.isfinite(high[k]) else "beyond the horizon"
            notes.append(
                f"network (networks sharing M0): mode {k + 1} has no step: the networks that share the init's M0 "
                f"switch it on between steps {low[k]:.0f} and {upper} (quartiles; a spread above "
                f"{SPREAD_LIMIT:.0%}): the step depends on the init beyond M0"
            )
    wide = ~np.isfinite(steps) | ~np.isfinite(spread) | (spread > SPREAD_LIMIT * steps)
    return np.where(wide, np.nan, steps), np.where(np.isfinite(spread), spread, np.nan), notes
