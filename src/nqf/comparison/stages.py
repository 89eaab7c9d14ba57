"""The stages of :func:`nqf.comparison.compare.compare`, in the order it runs them:

1. :func:`prepare`: check the input, pass the theory gate, generate the data;
2. :func:`theory`: predict every flow of ``config.flows`` for every seed (``nqf.predict``);
3. :func:`reference_modes` and :func:`predicted`: the modes, thresholds and the predicted
   switch steps and plateau losses read off the GD predictions;
4. :func:`train_quadratic` and :func:`train_networks`: ``train_grid`` per source, each
   run measured by :func:`trained` (switch steps and plateau losses);
5. :func:`closure`: the closure diagnostic of each optimizer;

and ``compare`` assembles the :class:`~nqf.comparison.result.Comparison` of their outputs.

What is measured and how: ``nqf.comparison.compare``'s module docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from nqf.architectures.architecture import Architecture, check_width
from nqf.architectures.expansion import ExpansionReport, theory_gate
from nqf.comparison.checks import check_compare_memory
from nqf.comparison.config import CompareConfig
from nqf.core.errors import NqfError
from nqf.core.measure import (
    ModeGroups,
    group_members,
    group_thresholds,
    measured_plateau_losses,
    switch_steps,
    switch_steps_own,
)
from nqf.core.precision import resolve_dtype
from nqf.optimizers import PREDICT_OPTIMIZERS, optimizer_record
from nqf.theory.data_matrices.build import DataMatrices, data_matrices, flow_data
from nqf.theory.predict.pipeline import PredictConfig, Prediction, predict
from nqf.training.closure import ClosureResult, closure_diagnostic
from nqf.training.config import DIVERGENCE_FACTOR
from nqf.training.grid import TrainingGrid

Predictions = dict[str, tuple[Prediction, ...]]


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` hands on: the architecture, the data and the gate's verdict.

    Attributes:
        arch: the architecture compared (the task's natural one when none was given).
        X, Y: the task's data (``task.generate(config.data_seed)``).
        dtype: the float dtype everything runs in.
        full_batch: the data as the full-batch flows read it (``flow_data``).
        per_sample: the per-sample data matrices when ``full_batch`` is them, else None
            (SGD needs the samples; :func:`theory` builds them when asked).
        expansion: the expansion check's verdict on the unit.
    """

    arch: Architecture
    X: Any
    Y: Any
    dtype: Any
    full_batch: Any
    per_sample: DataMatrices | None
    expansion: ExpansionReport


@dataclass(frozen=True)
class Modes:
    """The growing modes of the GD reference prediction (first seed), which every source is measured on.

    Attributes:
        growth: (g,) c_k, largest first; thresholds: (g,) m_k*/2.
        measure_at: (g,) the thresholds, inf where m_k* = 0 (such a mode never switches on).
        basis: (d, g) the eigenvectors q_k the occupations are read along.
        groups: the degenerate groups of the modes (equal c_k); every source is timed per
            group, on the group's total occupation (groups of one: per mode).
    """

    growth: np.ndarray
    thresholds: np.ndarray
    measure_at: np.ndarray
    basis: np.ndarray
    groups: ModeGroups

    @property
    def group_growth(self) -> np.ndarray:
        """(G,) c_k of each degenerate group (``nqf.core.measure.mode_groups``)."""
        return np.array([self.growth[group[0]] for group in self.groups])

    @property
    def group_thresholds(self) -> np.ndarray:
        """(G,) half each group's total fixed-point occupation (inf: none)."""
        return group_thresholds(self.thresholds, self.groups)


@dataclass(frozen=True)
class Predicted:
    """The predicted numbers :func:`predicted` reads off the predictions, each (S, g).

    Attributes:
        switch: {"lv", "mflow", "singular_limit", "closed_form"}: GD switch steps.
        flow_switch: {optimizer: switch steps of its M-flow (GD's for Adam/Muon)}.
        plateau: {"singular_limit", "lv", "mflow"}: GD plateau losses.
        mean_field_switch, mean_field_plateau, mean_field_timing: {optimizer: the network's own
            prediction, the mean-field flow of its units (``Prediction.network``), switch steps,
            plateau losses and the plateaus' timing error bars (``NetworkFlow.plateau_timing``;
            NaN for a group of several modes)}; NaN where predict did not compute it (a router, over
            its budget) or the optimizer has no flow.
    """

    switch: dict[str, np.ndarray]
    flow_switch: dict[str, np.ndarray]
    plateau: dict[str, np.ndarray]
    mean_field_switch: dict[str, np.ndarray]
    mean_field_plateau: dict[str, np.ndarray]
    mean_field_timing: dict[str, np.ndarray]


@dataclass(frozen=True)
class Measured:
    """One source trained by ``train_grid`` and measured (:func:`trained`); per-seed arrays have the seeds first.

    Attributes:
        sweep: the runs; switch: (S, g) switch steps at the common thresholds;
        own: (S, g) switch steps at half each run's own final occupation (NaN for a run that
            diverged and for a mode that never reached its common threshold);
        plateau: (S, g) plateau losses after each switch.
    """

    sweep: TrainingGrid
    switch: np.ndarray
    own: np.ndarray
    plateau: np.ndarray


def prepare(task, arch: Architecture | None, config: CompareConfig) -> Prepared:
    """Stage 1: check the input, pass the theory gate and generate the data.

    task: a ``nqf`` Task; arch: the architecture or None (the task's natural one).
    Raises NqfError for a config or task of the wrong type, a bad width, a comparison too
    large for the memory available (``nqf.comparison.checks``), and TheoryDoesNotApply when
    the expansion check fails (unless ``config.allow_inapplicable``).
    """
    if not isinstance(config, CompareConfig):
        raise NqfError(f"compare needs a CompareConfig, got {type(config).__name__}")
    if not hasattr(task, "generate"):
        raise NqfError(f"compare needs a task (nqf.get_task), got {type(task).__name__}")
    arch = task.architecture() if arch is None else arch
    check_width(arch, config.width)
    # before the gate compiles anything: every seed's runs are held at once
    check_compare_memory(task, arch, config.width, config.seeds)
    expansion = theory_gate(arch, config.allow_inapplicable)
    dtype = resolve_dtype(None)
    X, Y = task.generate(config.data_seed, dtype=dtype)
    # the full-batch flows read the data by the cheaper route; SGD needs the samples
    full_batch, _ = flow_data(arch, X, Y, dtype=dtype)
    per_sample = full_batch if isinstance(full_batch, DataMatrices) else None
    return Prepared(arch, X, Y, dtype, full_batch, per_sample, expansion)


def _predict_config(config: CompareConfig, flow: str, seed: int) -> PredictConfig:
    """The PredictConfig of ``flow`` for one seed."""
    return PredictConfig(
        width=int(config.width),
        lr=config.flow_lr(flow),
        steps=int(config.steps),
        sigma0=float(config.sigma0),
        optimizer=flow,
        beta=(optimizer_record(flow).default_beta or 0.0) if config.beta is None else float(config.beta),
        batch_size=config.batch_size if optimizer_record(flow).minibatches else None,
        seed=seed,
        allow_inapplicable=bool(config.allow_inapplicable),
        departure=bool(config.departure),
        network=bool(config.network),
        network_budget=config.network_budget,
        network_method=config.network_method,
    )


def theory(prep: Prepared, config: CompareConfig) -> Predictions:
    """Stage 2: the predictions, {flow: (Prediction per seed)} for every flow of ``config.flows``.

    The SGD flow reads the per-sample data matrices (built here when the full-batch data
    are not them); the others read ``prep.full_batch``.
    """
    per_sample = prep.per_sample
    predictions: Predictions = {}
    for flow in config.flows:
        minibatches = optimizer_record(flow).minibatches
        if minibatches and per_sample is None:
            per_sample = data_matrices(prep.arch, prep.X, prep.Y, dtype=prep.dtype)
        data = per_sample if minibatches else prep.full_batch
        predictions[flow] = tuple(
            predict(prep.arch, prep.X, prep.Y, _predict_config(config, flow, seed), data=data)
            for seed in config.seed_list
        )
    return predictions


def reference_modes(predictions: Predictions) -> Modes:
    """Stage 3a: the growing modes, thresholds and basis of the GD prediction of the first seed."""
    reference = predictions["gd"][0]
    g = reference.num_growing
    thresholds = np.asarray(reference.thresholds, dtype=np.float64)
    return Modes(
        growth=np.asarray(reference.modes.growth[:g], dtype=np.float64),
        thresholds=thresholds,
        # a mode with m_k* = 0 (suppressed by the others) has no switch-on: never counted as reached
        measure_at=np.where(thresholds > 0, thresholds, np.inf),
        basis=np.asarray(reference.modes.basis[:, :g]),
        groups=reference.groups,
    )


def predicted(predictions: Predictions, config: CompareConfig) -> Predicted:
    """Stage 3b: the predicted switch steps and plateau losses per degenerate group (per mode
    where no two modes share c_k), read off the predictions (:class:`Predicted`,
    ``Prediction.group_readings``)."""
    readings = {flow: [p.group_readings() for p in preds] for flow, preds in predictions.items()}  # once per flow
    gd = readings["gd"]
    horizon = float(config.steps)
    # an optimizer's own flow only: GD's mean field is no prediction for Adam or Muon (their M-flow reference)
    mean_field = {
        opt: _mean_field(predictions, opt if config.flow_of(opt) == opt else None) for opt in config.optimizers
    }
    return Predicted(
        switch={name: np.stack([r[name] for r in gd]) for name in ("lv", "mflow", "singular_limit", "closed_form")},
        flow_switch={opt: _flow_switch(readings, config.flow_of(opt)) for opt in config.optimizers},
        plateau={
            "singular_limit": np.stack([r["plateau_singular_limit"] for r in gd]),
            "lv": np.stack(
                [
                    measured_plateau_losses(p.lv_steps, p.lv_loss, r["lv"], horizon)
                    for p, r in zip(predictions["gd"], gd, strict=True)
                ]
            ),
            "mflow": np.stack([r["plateau_mflow"] for r in gd]),
        },
        mean_field_switch={opt: steps for opt, (steps, _, _) in mean_field.items()},
        mean_field_plateau={opt: plateaus for opt, (_, plateaus, _) in mean_field.items()},
        mean_field_timing={opt: timing for opt, (_, _, timing) in mean_field.items()},
    )


def _mean_field(predictions: Predictions, flow: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(S, G) switch steps, plateau losses and the plateaus' timing error bars of ``flow``'s
    mean-field flows per seed (NaN: none; a group of several modes has no timing bar, as
    ``nqf predict`` shows none)."""
    gd = predictions["gd"]
    G = len(gd[0].groups)
    steps, plateaus, timing = (np.full((len(gd), G), np.nan) for _ in range(3))
    if flow is None:
        return steps, plateaus, timing
    for s, p in enumerate(predictions[flow]):
        if (readings := p.network_group_readings()) is not None:
            assert p.network is not None
            steps[s], plateaus[s] = readings
            own = np.asarray(p.network.plateau_timing, dtype=np.float64)
            bars = [own[group[0]] if len(group) == 1 else np.nan for group in p.groups]
            timing[s] = np.where(np.isfinite(plateaus[s]), bars, np.nan)
    return steps, plateaus, timing


def _flow_switch(readings: dict, flow: str | None) -> np.ndarray:
    """(S, g) switch steps of ``flow``'s M-flow per seed; NaN (none) for no flow (a user's own transformation)."""
    gd = np.stack([r["mflow"] for r in readings["gd"]])
    return np.full_like(gd, np.nan) if flow is None else np.stack([r["mflow"] for r in readings[flow]])


def reference_notes(config: CompareConfig) -> tuple[tuple[str, ...], list[str]]:
    """The optimizers without an M-flow of their own (Adam, Muon) and one note for each; one note
    for each user's own optax transformation, which has no M-flow and no reference either."""
    own = config.own
    notes = [
        f"{opt}: your own optax transformation; the theory has no M-flow for it (only for "
        f"{', '.join(PREDICT_OPTIMIZERS)}): its rows report the trained network alone"
        for opt in config.optimizers
        if opt in own
    ]
    reference_only = tuple(opt for opt in config.optimizers if opt not in own and not optimizer_record(opt).closes_on_m)
    for opt in reference_only:
        record = optimizer_record(opt)
        if not record.equivariant:
            why = "its update is not equivariant under W -> W O, M does not close"
        else:
            why = f"nqf has no {record.label} map on M"
        notes.append(
            f"{opt}: no M-flow ({why}); its rows compare with the GD M-flow at lr {config.flow_lr('gd'):g} "
            "as a reference"
        )
    return reference_only, notes


def trained(prep: Prepared, config: CompareConfig, modes: Modes, train, optimizer: str, model: str) -> Measured:
    """Stage 4, per source: ``optimizer``'s ``model`` trained by ``train`` over the seeds, and the switch
    steps (common and own thresholds) and plateau losses of every seed."""
    tc = config.train_config(optimizer, model)
    sweep = train(prep.arch, prep.X, prep.Y, tc, [float(config.sigma0)], config.seed_list, basis=modes.basis)
    horizon = float(config.steps)
    # per degenerate group: its total occupation (a group of one is its mode)
    occupations = np.asarray(sweep.occupations[0], dtype=np.float64) @ group_members(modes.groups, modes.growth.size)
    switch = switch_steps(sweep.steps, occupations, modes.group_thresholds)
    # NaN where the run diverged or the mode never switched on (never reached the common threshold)
    own = switch_steps_own(
        sweep.steps, occupations, thresholds=modes.group_thresholds, diverged=sweep.diverged_at[0] >= 0
    )
    plateau = np.stack(
        [measured_plateau_losses(sweep.steps, sweep.loss[0, j], switch[j], horizon) for j in range(switch.shape[0])]
    )
    return Measured(sweep, switch, own, plateau)


def train_quadratic(prep: Prepared, config: CompareConfig, modes: Modes, train) -> Measured | None:
    """Stage 4a: the quadratic model trained by GD over the seeds and measured; None unless ``include_quadratic``.

    ``train`` runs the grid (``train_grid``'s signature; see :func:`nqf.comparison.compare.compare`)."""
    return trained(prep, config, modes, train, "gd", "quadratic") if config.include_quadratic else None


def train_networks(prep: Prepared, config: CompareConfig, modes: Modes, train) -> tuple[dict[str, Measured], list[str]]:
    """Stage 4b: the network trained by each optimizer over the seeds (by ``train``) and measured.

    Returns ({optimizer: Measured}, notes): one note per optimizer whose run diverged for some seed.
    """
    out: dict[str, Measured] = {}
    notes: list[str] = []
    for opt in config.optimizers:
        out[opt] = trained(prep, config, modes, train, opt, "network")
        diverged_at = out[opt].sweep.diverged_at[0]
        diverged = [(int(s), int(d)) for s, d in zip(config.seed_list, diverged_at, strict=False) if d >= 0]
        if diverged:
            listed = ", ".join(f"{s} (step {d})" for s, d in diverged)
            rate = config.stated_lr(opt)
            shown = "its own" if rate is None else f"{rate:g}"
            notes.append(
                f"network ({opt}, lr {shown}) diverged for seed(s) {listed}: its loss became "
                f"non-finite or exceeded {DIVERGENCE_FACTOR:g} x its initial loss; its records from there on are NaN, "
                "so modes not switched on before are null, not switches; lower its learning rate"
            )
    return out, notes


def closure_until(record_steps, occupations, m_star: np.ndarray, fraction: float, steps: int) -> int:
    """First step at which every mode of a run (occupations (R, g)) reached fraction * m_k*; else ``steps``."""
    reached = switch_steps(record_steps, occupations, fraction * m_star)
    if not np.all(np.isfinite(reached)):
        return int(steps)
    return int(min(steps, max(1, math.ceil(float(np.max(reached))))))


def closure(
    prep: Prepared, config: CompareConfig, predictions: Predictions, networks: dict[str, Measured], modes: Modes
) -> tuple[dict[str, ClosureResult], dict[str, int]]:
    """Stage 5: the closure diagnostic of each optimizer on the quadratic model, up to the end
    of the last switch-on. Returns ({optimizer: ClosureResult}, {optimizer: that step}); both
    empty unless ``config.closure``."""
    results: dict[str, ClosureResult] = {}
    until_of: dict[str, int] = {}
    if not config.closure:
        return results, until_of
    m_star = 2.0 * modes.thresholds
    for opt in config.optimizers:
        flow_name = config.flow_of(opt)
        if flow_name is not None and config.record(opt).closes_on_m:  # its M-flow: the quadratic model's trajectory
            flow = predictions[flow_name][0].flow
            record, occupations = np.asarray(flow.steps), np.asarray(flow.occupations)
        else:  # no M-flow: the network run of the first seed times the switch-ons
            sweep = networks[opt].sweep
            record, occupations = sweep.steps, sweep.occupations[0, 0]
        until = closure_until(record, occupations, m_star, config.closure_fraction, config.steps)
        until_of[opt] = until
        tc = config.train_config(opt, "quadratic")
        tc = replace(tc, steps=until, checkpoints=None)  # the same optimizer object (a user's own, kept)
        results[opt] = closure_diagnostic(prep.arch, prep.X, prep.Y, tc, until=until, W0=None)
    return results, until_of
