r"""Predict training without training: one call from (architecture, data, init, optimizer).

:func:`predict` chains the pieces of docs/theory.md sections 2-4:

1. data matrices C, K[.] of (X, Y) (``nqf.theory.data_matrices.build``), never an N x d x d stack;
2. the order-parameter flow: the exact map on M = W W^T of the chosen optimizer
   (GD, minibatch SGD with the training batches, heavy-ball momentum), whose cost does
   not depend on the width n (``nqf.theory.flow``);
3. the Lotka-Volterra reduction in the eigenbasis of C with its defects, growth rates,
   interactions and initial occupations (``nqf.theory.lotka_volterra.modes``), solved as the optimizer's
   own discrete map restricted to diagonal M (exact when the defects vanish) and as the
   gradient-flow ODE in log variables (``nqf.theory.lotka_volterra.system``);
4. the vanishing-init limit: step times, order, plateau losses (``nqf.theory.singular_limit``); an
   init that is not small (mean ln m_k(0) >= 0) has none: NaN there and a note, the rest stands;
5. with many modes, a power-law fit of the predicted loss curve (``nqf.theory.scaling``).

Switch-on step of mode k (one convention everywhere): the first step at which
m_k = q_k^T M q_k reaches half of the LV fixed-point occupation m_k*.

Every prediction knows its own validity:

- the theory gate: the unit must pass the expansion check of ``nqf structure``
  (``nqf.architectures.expansion.theory_gate``, cached); otherwise :func:`predict` refuses, unless
  ``allow_inapplicable`` (then the verdict is in the output and in a note);
- the init must be resolvable in the working dtype: every growing mode's initial
  occupation m_k(0) = |W0^T q_k|^2 (~ n sigma0^2) at least ``occupation_floor(dtype)``
  = tiny / u (1.0e-292 in float64, 9.9e-32 in float32; ``nqf.core.precision``), else
  :func:`predict` refuses with the numbers and the remedy. m_k(0) is computed from W0 in
  log space, so an underflowing W0 W0^T is seen, never floored silently;
- a mode with m_k(0) = 0 exactly (W0 = 0, or W0 orthogonal to q_k) never switches: NaN
  in the M-flow, the LV map and ODE, the closed form and the singular limit alike;
- the M-flow's rounding: while mode k is small, rounding of the O(1) components of the
  leading modes (relative size u) seeds it. Mode k is *unresolved* by the M-flow when its
  weight share r_k = min_t sqrt(m_k(t) / sum_j m_j(t)) before its switch-on (read from the
  LV map, which runs in log occupations and has no such floor) falls below
  ``MFLOW_RESOLUTION * u``, u the working dtype's unit roundoff; its M-flow switch step is
  then NaN and a note names the mode. Measured on the staircase (GD, lr 0.05, n = 32,
  mode 4 or 3, M-flow against the LV map, sigma0 1e-6 ... 1e-22): r >= 0.37 u agrees within
  0.6% (float32 and float64); r = 0.21 u is 1.3% early, 0.13 u 3%, 0.02 u 10%, 0.003 u 15%
  (float32), 0.008 u 6% (float64). The bound 0.25 u keeps the error below about 1%.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Real

from nqf.architectures.architecture import Architecture
from nqf.core.arguments import check_entry_arguments
from nqf.core.cache import ensure_default_cache
from nqf.core.errors import NqfError, PrecisionWarning
from nqf.core.sampling import prepare_standard_normal
from nqf.optimizers import optimizer_record
from nqf.theory.data_matrices.moments import MomentDataMatrices, RouteChoice
from nqf.theory.data_matrices.protocol import AbstractDataMatrices
from nqf.theory.lotka_volterra.maps import lv_occupations
from nqf.theory.predict import stages as stage
from nqf.theory.predict.init import check_init_scale, initial_weights, log_occupations
from nqf.theory.predict.result import PREDICT_OPTIMIZERS, STEPPINGS, PredictConfig, Prediction
from nqf.theory.predict.sizes import check_predict_memory, sample_count
from nqf.theory.predict.stages import (
    LV_DEFECT_TOLERANCE,
    MFLOW_RESOLUTION,
    first_crossing,
    mflow_resolution,
    record_steps,
)

__all__ = [
    "LV_DEFECT_TOLERANCE",
    "MFLOW_RESOLUTION",
    "PREDICT_OPTIMIZERS",
    "STEPPINGS",
    "PredictConfig",
    "Prediction",
    "check_init_scale",
    "first_crossing",
    "log_occupations",
    "mflow_resolution",
    "lv_occupations",
    "predict",
]


def predict(
    arch: Architecture | str,
    X: Float[ArrayLike, " N *input"] | None,
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"] | None,
    config: PredictConfig,
    W0: Float[ArrayLike, "d n"] | None = None,
    data: AbstractDataMatrices | None = None,
    route_choice: RouteChoice | None = None,
) -> Prediction:
    """Predict the training of ``arch`` on (X (N, *input_shape), Y (N, K)) under ``config``.

    ``arch`` is an Architecture or a built-in architecture's name (``"mlp"``): a name takes its
    default options, with ``inputs`` and ``outputs`` from X (N, D) and Y (N, K) where it has those
    options (``nqf.architectures.architecture_for_data``).

    W0 (d, n) overrides the random init (its columns are units, flattened in
    ``arch.blocks`` order). ``data`` may pass precomputed data matrices of (X, Y) (then X
    and Y are not used), with ``route_choice`` from ``nqf.theory.data_matrices.build.flow_data`` to report it.

    Raises NqfError for bad inputs (shapes, non-finite values, width != experts for a
    mixture of experts), for a width or data too large for the memory available (the
    estimate of ``nqf.theory.predict.sizes``, before anything is built), for a learning
    rate above the linear-stability bound, for an init that underflows the working dtype,
    and (TheoryDoesNotApply) for a unit the expansion check rejects unless
    ``config.allow_inapplicable`` (module docstring).

    Precision: predict computes in JAX's default float, float32 unless ``jax_enable_x64`` is
    on; in float32 it warns once per process (``nqf.core.errors.PrecisionWarning``): its
    switch-on steps can differ from float64's by a few percent.

    The stages (``nqf.theory.predict.stages``): the gate and the data route; W0 and its
    occupations; the mode basis and the LV system; the stability bound; the M-flow; the LV
    map and flow; the M-flow's switch steps; the closed form; the singular limit; the power
    law; then the Prediction, and the departure when ``config.departure``.
    """
    check_entry_arguments("predict", arch, config, Architecture, PredictConfig)
    if isinstance(arch, str):
        from nqf.architectures import architecture_for_data

        arch = architecture_for_data(arch, X, Y, config.loss)
    # before the gate compiles anything: W0 alone is d x width numbers
    check_predict_memory(
        arch,
        sample_count(X, data),
        config.width,
        config.loss,
        config.route,
        optimizer_record(config.optimizer).minibatches,
    )
    ensure_default_cache()
    if W0 is None:  # the init's draw compiles beside the gate and the data's moments
        prepare_standard_normal(arch.dim * config.width, jnp.result_type(float))
    expansion = stage.gate(arch, config)
    dtype = jnp.result_type(float)
    if dtype == np.float32:
        _warn_float32_once()
    data, choice = stage.data_route(arch, X, Y, config, data, route_choice, dtype)
    engine, engine_reason = stage.engine_of(data, config)
    # the stages below read ``flow_data``: numpy twins of the moments for the numpy engine
    flow_data = data.on_host() if engine == "numpy" and isinstance(data, MomentDataMatrices) else data
    notes: list[str] = []
    stage.inapplicable_note(arch, expansion, notes)
    modes = stage.modes_of(flow_data, arch, expansion)
    g = modes.num_growing
    record = record_steps(config.steps)
    # the network's particle flow compiles in the background from here (its shapes are known)
    network = stage.network_plan(arch, X, Y, config, expansion, record, g) if config.network else None
    W0, given_W0 = initial_weights(arch, config, W0, dtype)
    log_m0, never = stage.initial_occupations(modes, W0, dtype, config, given_W0, notes)
    system = stage.lv_system(modes, flow_data, W0, log_m0, config, notes)
    stable = stage.stability(flow_data, modes, system.m_star, config)
    # the network's particle flow runs from here, beside the M-flow and Lotka-Volterra stages
    network = stage.network_start(network, modes, W0)
    flow = stage.mflow(flow_data, config, modes, W0, dtype, record, system.thresholds, stable, notes)
    lv_occ, lv_switch, continuous, lv_stats = stage.lv_map(system, config, record, never, g, engine)
    mflow_switch, resolution = stage.mflow_switches(
        flow, system.thresholds, record, lv_occ, lv_switch, never, dtype, notes
    )
    closed = stage.closed_form(modes, system.lv.m0, config.lr, never)
    sigma0 = None if given_W0 else float(config.sigma0)
    limit, singular_switch, plateau = stage.vanishing_init(system.lv, never, g, notes, sigma0)
    fit = stage.power_law(flow.steps, flow.loss, system, g, notes)
    stage.degenerate_note(modes, notes)
    prediction = Prediction(
        config=config,
        modes=modes,
        lv_applies=system.applies,
        defect=system.defect,
        init_defect=system.init_defect,
        flow=flow,
        thresholds=system.thresholds,
        mflow_switch_steps=mflow_switch,
        lv=system.lv,
        lv_steps=record,
        lv_loss=system.lv.loss(lv_occ),
        lv_switch_steps=lv_switch,
        lv_continuous_switch_steps=continuous,
        closed_form_switch_steps=closed,
        lv_plateau_losses=plateau,
        singular=limit,
        singular_switch_steps=singular_switch,
        stable_lr=float(stable.bound),
        power_law=fit,
        notes=tuple(notes),
        route=choice.route,
        route_reason=choice.reason,
        flow_stats={**dict(flow.stats or {}), "lv_map": lv_stats},
        expansion=expansion,
        arch_name=arch.name,
        arch_options=tuple(arch.options),
        initial_occupations=np.exp(log_m0),
        mflow_resolution=resolution,
        engine=engine,
        engine_reason=engine_reason,
    )
    if config.network:
        found = stage.network_finish(
            network, arch, config, flow.steps, flow.loss, flow.occupations, mflow_switch, system.thresholds
        )
        prediction = stage.with_network(prediction, found)
    return with_departure(prediction, arch, X, Y, W0, data) if config.departure else prediction


FLOAT32_WARNING = (
    "nqf.predict runs in float32 (JAX's default: jax_enable_x64 is off); switch-on steps can differ "
    "from float64's by a few percent (the README's staircase: 91, 132, 260, 488 against 93, 136, 256, 491). "
    "For float64, call jax.config.update('jax_enable_x64', True) before computing anything "
    "(the nqf command always does; nqf never flips it). Shown once per process."
)
_float32_warned = False


def _warn_float32_once() -> None:
    """The PrecisionWarning of a float32 prediction, the first time in this process (the
    caller of :func:`predict` is the warning's location)."""
    global _float32_warned
    if not _float32_warned:
        _float32_warned = True
        warnings.warn(FLOAT32_WARNING, PrecisionWarning, stacklevel=3)


def with_departure(
    prediction: Prediction, arch: Architecture, X, Y, W0, data: AbstractDataMatrices | None
) -> Prediction:
    """``prediction`` with the network along its path and the corrected switch-on steps
    (``nqf.theory.departure.estimate``) and their notes; NqfError without the samples X, Y."""
    from nqf.theory.departure.estimate import departure

    if X is None or Y is None:
        raise NqfError("departure needs the samples X, Y (the network is evaluated on them)")
    found = departure(arch, X, Y, prediction, W0=W0, data=data)
    return replace(prediction, departure=found, notes=prediction.notes + found.notes)
