"""What :func:`nqf.theory.predict.pipeline.predict` takes besides architecture and data
(:class:`PredictConfig`, checked on construction) and what it returns (:class:`Prediction`,
with the stable JSON form of ``nqf predict --json``)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from nqf.architectures.expansion import ExpansionReport, report_json
from nqf.core.arguments import check_count, check_seed, check_steps, is_positive_finite, is_real_number
from nqf.core.errors import NqfError
from nqf.core.measure import (
    ModeGroups,
    group_first,
    group_last_value,
    group_thresholds,
    measured_plateau_losses,
    mode_groups,
    occupation_group_steps,
)
from nqf.core.names import ENGINES as ENGINES
from nqf.core.names import NETWORK_METHODS as NETWORK_METHODS
from nqf.core.names import ROUTES as ROUTES
from nqf.core.names import STEPPINGS as STEPPINGS
from nqf.core.pytrees import json_number, json_numbers, json_value, register_fields
from nqf.optimizers import PREDICT_OPTIMIZERS as PREDICT_OPTIMIZERS
from nqf.optimizers import is_transform, optimizer_record
from nqf.theory.flow.base import FlowResult
from nqf.theory.lotka_volterra.modes import ModeBasis
from nqf.theory.lotka_volterra.system import LotkaVolterra
from nqf.theory.scaling import PowerLawFit
from nqf.theory.singular_limit import SingularLimit

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class PredictConfig:
    """What a prediction depends on besides architecture and data.

    Attributes:
        width: n, the number of units (the M-flow cost does not depend on it).
        lr: learning rate.
        steps: horizon in optimizer steps.
        sigma0: init scale, W0 ~ N(0, sigma0^2) from ``training_keys(seed)[0]`` (the
            same W0 that ``nqf.train`` uses); ignored when W0 is given to :func:`predict`.
        optimizer: one that closes on M (``PREDICT_OPTIMIZERS``: gd, sgd with minibatches from
            ``training_keys(seed)[1]``, and those with a momentum, ``nqf.optimizers``).
        beta: the momentum of an optimizer with one (its ``beta``, e.g. optax.sgd(lr, momentum=beta)).
        batch_size: minibatch size for ``sgd``.
        seed: init and minibatch seed.
        loss: ``squared`` (LV applies) or ``cross_entropy`` (M-flow only).
        check_lr: refuse a learning rate above the linear-stability bound.
        route: how the M-flow reads the data: ``moments`` (S, u once; no N per step),
            ``samples`` (the structured A(x_n) of every sample per step) or ``auto`` (the
            cheaper allowed one; ``Prediction.route`` says which and why).
        stepping: ``adaptive`` (jump the stretches where the map is linear to 1e-12, step
            through the switch-ons) or ``every`` (the step-by-step map, the reference).
        allow_inapplicable: run even when the expansion check says the quadratic-form
            theory does not apply to the unit (the verdict is reported either way).
        departure: also evaluate the network along the predicted path: the departure curve,
            the relative gap between the network and its quadratic form there
            (``nqf.theory.departure.estimate``; off by default: it steps the map one step at a
            time and runs the network).
        network: also predict the network itself, not only its quadratic model: the mean-field
            flow of its units (``nqf.theory.departure.mean_field``: switch-on steps, plateau
            losses and loss curve where the network leaves the quadratic model). On by default;
            computed where it applies (a full-batch optimizer, the samples X, Y given) and within
            ``network_budget``, else a note says why not.
        network_budget: seconds the mean-field flow of one call may take (None: no limit): one
            prediction's, or the flows of all the points of ``nqf.predict_grid`` together. Refused
            before anything compiles where its estimate (its compiling, and particles x samples x
            steps x a unit's flops: ``mean_field.flow_seconds``) exceeds it, and stopped as it runs
            where its own steps' time says it would (``mean_field.FlowWatch``); a note says so.
        network_method: how the network's own prediction is computed: ``mean_field`` (the
            units' distribution, n -> infinity at the init's M0), ``networks`` (16 or more
            networks sharing the init's M0, W0 O with O drawn: their median, and half their
            interquartile range as ``spread``, the finite-width error bar), or ``auto`` (the
            mean field, the networks where a router couples the units: docs/departure.md (d)).
        engine: how the stages after the data matrices run: ``compiled`` (JAX programs),
            ``numpy`` (nothing compiled: ``nqf.theory.flow.host``; the moments route, a
            full-batch optimizer, small S and horizon) or ``auto`` (numpy where it applies; the two give
            the same numbers to rounding, ``Prediction.engine`` says which ran and why).
    """

    width: int
    lr: float
    steps: int
    sigma0: float = 1e-6
    optimizer: str = "gd"
    beta: float = 0.9
    batch_size: int | None = None
    seed: int = 0
    loss: str = "squared"
    check_lr: bool = True
    route: str = "auto"
    stepping: str = "adaptive"
    allow_inapplicable: bool = False
    departure: bool = False
    engine: str = "auto"
    network: bool = True
    network_budget: float | None = 5.0
    network_method: str = "auto"

    def __post_init__(self):
        for name in ("allow_inapplicable", "departure", "network", "check_lr"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise NqfError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.network_budget is not None and not _traced(self.network_budget):
            if not is_positive_finite(self.network_budget):
                raise NqfError(
                    f"network_budget must be a positive number of seconds or None, got {self.network_budget!r}"
                )
        if is_transform(self.optimizer):  # a user's own optax transformation: trained, never predicted
            raise NqfError(
                f"the M-flow exists only for the named optimizers {', '.join(PREDICT_OPTIMIZERS)}; a user's own optax "
                "transformation has none (nqf.train and nqf.compare train the network with it)"
            )
        for name in ("optimizer", "loss", "route", "stepping", "engine", "network_method"):  # before `in`
            if not isinstance(getattr(self, name), str):
                raise NqfError(f"{name} must be a name (a str), got {type(getattr(self, name)).__name__}")
        if self.optimizer not in PREDICT_OPTIMIZERS:
            raise NqfError(
                f"the M-flow predicts {', '.join(PREDICT_OPTIMIZERS)} (equivariant optimizers); got {self.optimizer!r}"
            )
        check_count("width", self.width)
        check_steps("steps", self.steps)
        if not _traced(self.seed):  # a pytree leaf, as lr below
            check_seed("seed", self.seed)
        # lr, sigma0 and beta are pytree leaves: under jax.jit or vmap they are tracers, whose
        # values cannot be checked (a config rebuilt by dataclasses.replace inside a traced function)
        if not _traced(self.lr) and not is_positive_finite(self.lr):
            raise NqfError(f"learning rate must be a positive finite number, got {self.lr!r}")
        if not _traced(self.sigma0) and not is_positive_finite(self.sigma0):
            raise NqfError(f"sigma0 must be a positive finite number, got {self.sigma0!r}")
        if optimizer_record(self.optimizer).minibatches and self.batch_size is None:
            raise NqfError("optimizer sgd needs a batch size (--batch)")
        if self.batch_size is not None:
            check_count("batch_size", self.batch_size)
        if self.route not in ROUTES:
            raise NqfError(f"unknown data route {self.route!r}; choose one of {', '.join(ROUTES)}")
        if self.stepping not in STEPPINGS:
            raise NqfError(f"unknown stepping {self.stepping!r}; choose one of {', '.join(STEPPINGS)}")
        if self.engine not in ENGINES:
            raise NqfError(f"unknown engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        if self.network_method not in NETWORK_METHODS:
            raise NqfError(f"network_method must be one of {', '.join(NETWORK_METHODS)}, got {self.network_method!r}")
        beta = self.beta
        if optimizer_record(self.optimizer).flow_takes_beta and not _traced(beta) and not _unit_interval(beta):
            raise NqfError(f"{self.optimizer} beta must lie in [0, 1), got {self.beta!r}")


def _traced(value: object) -> bool:
    return isinstance(value, jax.core.Tracer)


def _unit_interval(value: object) -> bool:
    """A real number in [0, 1)."""
    return is_real_number(value) and 0 <= float(value) < 1  # type: ignore[arg-type]


@dataclass(frozen=True, eq=False)
class Prediction:
    """Everything :func:`predict` computes. Modes are the eigenvectors of C with c_k > 0,
    sorted by growth rate, largest first; per-mode arrays use that order.

    Attributes:
        config: the PredictConfig.
        modes: the ModeBasis (basis, growth c_k, interactions K_kj, defect); it also holds
            the decaying modes (c_k < 0) after the growing ones.
        lv_applies: defect <= LV_DEFECT_TOLERANCE and squared loss.
        defect, init_defect: how far C, K[.] and M(0) are from diagonal in the mode basis.
        flow: the M-flow (loss and mode occupations at ``flow.steps``).
        thresholds: (g,) m_k*/2, the switch-on thresholds (LV fixed point).
        mflow_switch_steps, lv_switch_steps, lv_continuous_switch_steps,
        closed_form_switch_steps, singular_switch_steps: (g,) switch-on steps (NaN: not
            within the horizon / never).
        lv: the LotkaVolterra system; lv_steps, lv_loss: its discrete-map loss curve.
        lv_plateau_losses: (g,) the loss on the plateau reached when mode k switches on (NaN
            for modes that never activate).
        singular: the vanishing-init limit; for an init that is not small (mean ln m_k(0) >= 0)
            there is none: ``nqf.theory.singular_limit.no_limit`` (eps NaN, no events; a note says so).
        power_law: fit of the M-flow loss curve when there are many modes, else None.
        notes: what the numbers rest on, for a reader.
        route, route_reason: the data route of the M-flow (``moments`` or ``samples``) and why.
        flow_stats: how the M-flow got to the horizon: steps taken one by one and steps
            jumped (``stepping="adaptive"``), and the jumps made.
        expansion: the expansion check's verdict on the unit (``nqf.architectures.expansion``).
        arch_name, arch_options: the architecture, echoed in the JSON config.
        initial_occupations: (m,) m_k(0) = |W0^T q_k|^2 as computed in log space (0: the
            mode has no initial component and never switches; ``lv.m0`` floors it).
        mflow_resolution: (g,) r_k / u, the weight share of each mode in rounding units
            (``nqf.theory.predict.pipeline``'s docstring); below MFLOW_RESOLUTION its M-flow switch step is NaN.
        departure: the network along the predicted path and the corrected switch-on steps
            (``nqf.theory.departure.estimate.Departure``) when ``config.departure``, else None.
        engine, engine_reason: ``compiled`` or ``numpy`` (``PredictConfig.engine``) and why.
        network: the network's own prediction, the mean-field flow of its units
            (``nqf.theory.departure.mean_field.NetworkFlow``: switch_steps, plateau_losses, loss
            at ``flow.steps``) when ``config.network`` and it applies, else None.
        mflow_group_switch_steps: (G,) the M-flow's step of each degenerate group where the
            occupations are not kept (a ``predict_grid`` point: the grid's program timed each
            group's total); None: ``group_readings`` times the groups from ``flow.occupations``.
    """

    config: PredictConfig
    modes: ModeBasis
    lv_applies: bool
    defect: float
    init_defect: float
    flow: FlowResult
    thresholds: np.ndarray
    mflow_switch_steps: np.ndarray
    lv: LotkaVolterra
    lv_steps: np.ndarray
    lv_loss: np.ndarray
    lv_switch_steps: np.ndarray
    lv_continuous_switch_steps: np.ndarray
    closed_form_switch_steps: np.ndarray
    lv_plateau_losses: np.ndarray
    singular: SingularLimit
    singular_switch_steps: np.ndarray
    stable_lr: float
    power_law: PowerLawFit | None
    notes: tuple[str, ...] = field(default=())
    route: str = "samples"
    route_reason: str = ""
    flow_stats: dict = field(default_factory=dict)
    expansion: ExpansionReport | None = None
    arch_name: str = ""
    arch_options: tuple = ()
    initial_occupations: np.ndarray | None = None
    mflow_resolution: np.ndarray | None = None
    departure: Any = None
    engine: str = "compiled"
    engine_reason: str = ""
    network: Any = None
    mflow_group_switch_steps: np.ndarray | None = None

    @property
    def num_growing(self) -> int:
        return self.modes.num_growing

    @property
    def groups(self) -> ModeGroups:
        """The degenerate groups of the growing modes (``nqf.core.measure.mode_groups``): index
        tuples, e.g. ``((0, 1), (2,))``; all of size one when no two c_k coincide."""
        return mode_groups(self.modes.growth[: self.num_growing])

    @property
    def degenerate(self) -> bool:
        """Whether some growing modes share their c_k (a group of two or more)."""
        return any(len(group) > 1 for group in self.groups)

    def group_readings(self) -> dict[str, np.ndarray]:
        """The switch-on steps and plateau losses per degenerate group, (G,) each.

        Inside a group W0 decides how the occupation splits among the modes (one m_k* can
        be 0), so a member's own step is not a prediction; the group's is. ``fixed_point``:
        the group's total m*. ``mflow``: the first step at which the group's total M-flow
        occupation reaches half of it (docs/theory.md 5.1; a mode of its own: its
        ``mflow_switch_steps``). ``lv``, ``lv_flow``,
        ``closed_form``, ``singular_limit``: the earliest member's step (each member is timed
        from its own m_k(0); the group is on when the first is). ``plateau_singular_limit``:
        the limit's plateau once the group's last member is on; ``plateau_mflow``: the
        M-flow's loss at the log-midpoint to the next group's step. Groups of one give the
        per-mode numbers.
        """
        groups = self.groups
        # a mode of its own keeps its step (NaN where the M-flow cannot resolve it: pipeline's docstring);
        # a grid point keeps no occupations, but its program timed the groups' totals
        mflow = (
            occupation_group_steps(
                self.mflow_switch_steps, self.flow.steps, self.flow.occupations, self.thresholds, groups
            )
            if self.mflow_group_switch_steps is None
            else np.asarray(self.mflow_group_switch_steps, dtype=np.float64)
        )
        return {
            "growth": np.array([float(self.modes.growth[g[0]]) for g in groups]),
            "fixed_point": 2.0 * np.where(np.isfinite(t := group_thresholds(self.thresholds, groups)), t, 0.0),
            "mflow": mflow,
            "lv": group_first(self.lv_switch_steps, groups),
            "lv_flow": group_first(self.lv_continuous_switch_steps, groups),
            "closed_form": group_first(self.closed_form_switch_steps, groups),
            "singular_limit": group_first(self.singular_switch_steps, groups),
            "plateau_singular_limit": group_last_value(self.lv_plateau_losses, self.singular_switch_steps, groups),
            "plateau_mflow": measured_plateau_losses(
                np.asarray(self.flow.steps), np.asarray(self.flow.loss), mflow, float(self.config.steps)
            ),
        }

    def network_group_readings(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The network's own prediction per degenerate group: (switch steps, plateau losses), (G,)
        each; None where it was not computed. An exactly quadratic unit's is the M-flow's own group
        readings (``mflow``, ``plateau_mflow``: a grid point keeps no occupations to re-read); any
        other's ``NetworkFlow.group_readings`` at this prediction's thresholds."""
        if self.network is None:
            return None
        if self.network.exact:
            readings = self.group_readings()
            return readings["mflow"], readings["plateau_mflow"]
        return self.network.group_readings(self.groups, self.thresholds)

    @property
    def growth_rates(self) -> np.ndarray:
        """r_k = 4 lr c_k of the growing modes."""
        return 4.0 * self.config.lr * self.modes.growth[: self.num_growing]

    def to_dataframes(self) -> dict[str, pd.DataFrame]:
        """The tables of ``nqf predict --csv DIR`` as pandas DataFrames, ``{"curves", "modes"}``.

        ``"curves"``: columns source, optimizer, seed, step, loss; one row per (source, step),
        sources ``mflow`` (the M-flow), ``lv`` (the Lotka-Volterra map) and ``mean_field`` (the
        network's own prediction, where computed), optimizer and seed those of ``config``.
        ``"modes"``: columns source, optimizer, seed, mode, convention, switch_step, plateau_loss;
        one row per (source, mode), sources ``mflow``, ``lv``, ``lv_flow``, ``closed_form``,
        ``singular_limit`` and ``mean_field`` (where computed), convention ``occupation``. The rows
        and columns of curves.csv and modes.csv (``nqf.report.curve_tables``, which says what
        each holds), cells as numbers: NaN where the CSV cell is empty (never switched, not
        available); ``nqf.core.dataframes`` gives the dtypes. Needs pandas (``pip install
        'nqf[dataframe]'``): NqfError without it.
        """
        from nqf.core.dataframes import require_pandas, tables_frames
        from nqf.theory.predict.tables import prediction_tables

        require_pandas()
        return tables_frames(prediction_tables(self))

    def to_dataframe(self, table: str = "curves") -> pd.DataFrame:
        """One table of :meth:`to_dataframes` as a pandas DataFrame: ``"curves"`` (the
        default; one row per source and recorded step, long format) or ``"modes"`` (one row
        per source and mode). NqfError for another name, or without pandas."""
        from nqf.core.dataframes import check_table

        name = check_table(table)
        return self.to_dataframes()[name]

    def to_json(self) -> dict:
        """The stable JSON form printed by ``nqf predict --json``."""
        g = self.num_growing
        # numpy leaves whatever arrays jax.tree.map made of them: SingularLimit's methods return numpy
        singular = jax.tree.map(np.asarray, self.singular)
        order = [int(k) for k in singular.activation_order]
        m0 = self.lv.m0 if self.initial_occupations is None else self.initial_occupations
        resolution = None if self.mflow_resolution is None else json_numbers(self.mflow_resolution)
        readings = self.group_readings()
        return {
            # the prediction first: the M-flow's switch-on steps and plateau losses, per mode or degenerate
            # group; the blocks after it are the run and the analysis (LV, closed form, singular limit)
            "prediction": _prediction_json(self.groups, readings, self.network, self.network_group_readings()),
            "config": {
                **json_value(asdict(self.config)),  # its numbers are leaves: arrays after jax.tree.map
                "arch": self.arch_name,
                "arch_options": json_value(dict(self.arch_options)),
            },
            "expansion": report_json(self.expansion),
            "mflow": {
                "steps": _ints(self.flow.steps),
                "loss": json_numbers(self.flow.loss),
                "switch_steps": json_numbers(self.mflow_switch_steps),
                "resolution": resolution,
            },
            "lv": {
                "steps": _ints(self.lv_steps),  # the LV map's loss curve at the recorded steps
                "loss": json_numbers(self.lv_loss),
                "applies": bool(self.lv_applies),
                "defect": float(self.defect),
                "init_defect": float(self.init_defect),
                "growth": json_numbers(self.modes.growth[:g]),
                "growth_rates": json_numbers(self.growth_rates),
                "interactions": [json_numbers(row) for row in self.modes.interactions[:g, :g]],
                "initial_occupations": json_numbers(m0[:g]),
                "fixed_point": json_numbers(2.0 * self.thresholds),
                "switch_steps": json_numbers(self.lv_switch_steps),
                "continuous_switch_steps": json_numbers(self.lv_continuous_switch_steps),
                "closed_form_switch_steps": json_numbers(self.closed_form_switch_steps),
                "plateau_losses": json_numbers(self.lv_plateau_losses),
            },
            "singular_limit": {
                "eps": json_number(singular.eps) if np.any(m0[:g] > 0) else None,  # no mode there: no eps
                "step_times": json_numbers(singular.steps()),
                "rescaled_times": json_numbers(singular.step_times),
                "order": order,
                "plateau_losses": json_numbers(singular.plateau_losses),
                "suppressed": [int(k) for k in singular.suppressed],
                "switch_steps": json_numbers(self.singular_switch_steps),
            },
            "power_law": None
            if self.power_law is None
            else {
                "exponent": float(self.power_law.exponent),
                "ci": json_numbers(self.power_law.ci),
                "window": json_numbers(self.power_law.window),
                "is_power_law": bool(self.power_law.is_power_law),
                "reason": self.power_law.reason,
            },
            "stable_lr": float(self.stable_lr),
            "route": self.route,
            "route_reason": self.route_reason,
            "engine": self.engine,
            "engine_reason": self.engine_reason,
            "flow_stats": _int_tree(self.flow_stats),
            "notes": list(self.notes),
            "departure": None if self.departure is None else self.departure.to_json(),
            "network": None if self.network is None else self.network.to_json(),
            "groups": _groups_json(self.groups, readings),
        }


SWITCH_CONVENTION = (
    "switch-on step: the first step at which the occupation m_k = q_k^T M q_k (a degenerate group's total) "
    "reaches half its LV fixed point m_k* (docs/theory.md 5.1)"
)
PLATEAU_CONVENTION = "plateau loss: the M-flow's loss at the log-midpoint between this switch-on and the next"


def _prediction_json(groups, readings: dict[str, np.ndarray], network, mean_field) -> dict:
    """The ``prediction`` block: the M-flow's switch-on step and plateau loss per mode (per degenerate
    group where modes share c_k), with the conventions; null: not within the horizon. With the
    network's mean-field flow (``config.network``, where it applies) each mode also has the
    network's predicted switch-on step and plateau loss (``network_switch_step``,
    ``network_plateau_loss``; a group's: when its total occupation reaches half its fixed point,
    as the M-flow's, and the plateau after it: ``mean_field``, :meth:`Prediction.network_group_readings`)."""
    rows = [
        {
            "modes": [int(k) + 1 for k in group],
            "growth": float(readings["growth"][j]),
            "fixed_point": float(readings["fixed_point"][j]),
            "switch_step": json_number(readings["mflow"][j]),
            "plateau_loss": json_number(readings["plateau_mflow"][j]),
            **(
                {}
                if mean_field is None
                else {
                    "network_switch_step": json_number(mean_field[0][j]),
                    "network_plateau_loss": json_number(mean_field[1][j]),
                }
            ),
        }
        for j, group in enumerate(groups)
    ]
    return {
        "source": "mflow",
        **({} if network is None else {"network_source": network.method}),
        "switch_convention": SWITCH_CONVENTION,
        "plateau_convention": PLATEAU_CONVENTION,
        "modes": rows,
        "analysis": "lv (the Lotka-Volterra map and ODE in C's eigenbasis, the logistic closed form) and "
        "singular_limit (sigma0 -> 0) read the same modes; groups: every reading per degenerate group",
    }


def _groups_json(groups, readings: dict[str, np.ndarray]) -> list[dict]:
    """One entry per degenerate group of :meth:`Prediction.group_readings` (null: never)."""
    out = []
    for j, group in enumerate(groups):
        out.append(
            {
                "modes": [int(k) + 1 for k in group],
                "growth": float(readings["growth"][j]),
                "fixed_point": float(readings["fixed_point"][j]),
                "switch_steps": {
                    name: json_number(readings[name][j])
                    for name in ("mflow", "lv", "lv_flow", "closed_form", "singular_limit")
                },
                "plateau_losses": {
                    "mflow": json_number(readings["plateau_mflow"][j]),
                    "singular_limit": json_number(readings["plateau_singular_limit"][j]),
                },
            }
        )
    return out


def _int_tree(tree):
    """A dict of (dicts of) counts with plain ints (numpy integers are not JSON)."""
    return {k: _int_tree(v) if isinstance(v, dict) else int(v) for k, v in tree.items()}


def _ints(a) -> list:
    return [int(round(float(v))) for v in np.asarray(a).ravel()]


# -- Prediction as a pytree ----------------------------------------------------------------
#
# A Prediction is a pytree whose leaves are its numbers: every array, the scalar results (defect,
# stable lr, the fit's exponent, ...), the flow's step counts and the config's lr, sigma0, beta
# and seed, so that ``jax.tree.map`` reaches all of them (to a device, to numpy, a function of
# the results under ``jax.jit``). Everything else (names, notes, the expansion report, the route,
# the settings that set shapes) is static metadata: two predictions share a tree structure, and
# so stack with ``jax.tree.map``, when it is equal (their notes can differ: they quote numbers);
# a grid of predictions is ``nqf.predict_grid``.
# The nested results are registered here, not in their modules: SingularLimit and PowerLawFit live
# in JAX-free modules, and their pytree form belongs to the Prediction it is part of
# (``nqf.core.pytrees``: rebuilt without their constructors' checks). Departure and NetworkFlow are
# registered by their own modules, on first flattening (:func:`_register_departure`).


@functools.cache
def _register_departure() -> None:
    """Departure's and NetworkFlow's pytree forms, registered when a Prediction is first flattened
    (importing the departure's modules when this one loads would slow every ``import nqf``'s first predict)."""
    from nqf.theory.departure.estimate import register_departure_pytree
    from nqf.theory.departure.mean_field import register_network_flow_pytree

    register_network_flow_pytree()
    register_departure_pytree()


def _register_singular_limit() -> None:
    """SingularLimit: its events (s, mode, "on" | "off") are split, each time a leaf of its own
    and the (mode, kind) pairs metadata, so that two limits with the same order of events share a
    structure. The times are passed through as they are, never gathered into one array: a gather
    would fail on tracers (jit), and its axis would swap with a stack's when the stacked times are
    split again (an identity ``jax.tree.map`` would transpose them)."""
    arrays = tuple(f.name for f in dataclasses.fields(SingularLimit) if f.name not in ("events", "suppressed"))

    def flatten_with_keys(limit):
        children = tuple((jax.tree_util.GetAttrKey(name), getattr(limit, name)) for name in arrays)
        times = tuple(event[0] for event in limit.events)
        kinds = tuple((event[1], event[2]) for event in limit.events)
        return (*children, (jax.tree_util.GetAttrKey("event_times"), times)), (kinds, limit.suppressed)

    def flatten(limit):
        children, meta = flatten_with_keys(limit)
        return tuple(child for _, child in children), meta

    def unflatten(meta, children):
        kinds, suppressed = meta
        limit = object.__new__(SingularLimit)
        for name, value in zip(arrays, children[:-1], strict=True):
            object.__setattr__(limit, name, value)
        events = tuple((time, mode, kind) for time, (mode, kind) in zip(children[-1], kinds, strict=True))
        object.__setattr__(limit, "events", events)
        object.__setattr__(limit, "suppressed", suppressed)
        return limit

    jax.tree_util.register_pytree_with_keys(SingularLimit, flatten_with_keys, unflatten, flatten)


def _register_prediction() -> None:
    register_fields(
        PredictConfig,
        ("lr", "sigma0", "beta", "seed"),
        ("width", "steps", "optimizer", "batch_size", "loss", "check_lr", "route", "stepping")
        + ("allow_inapplicable", "departure", "engine", "network", "network_budget", "network_method"),
    )
    register_fields(ModeBasis, ("basis", "growth", "interactions", "defect", "full_basis"), ())
    register_fields(LotkaVolterra, ("c", "K", "m0", "lr", "loss0"), ())
    _register_singular_limit()
    register_fields(
        PowerLawFit,
        ("exponent", "ci", "prefactor", "window", "decades", "effective_points", "residual_autocorrelation")
        + ("max_residual", "relative_residual", "exponent_drift"),
        ("num_points", "is_power_law", "reason"),
    )
    register_fields(
        Prediction,
        ("modes", "defect", "init_defect", "flow", "thresholds", "mflow_switch_steps", "lv", "lv_steps", "lv_loss")
        + ("lv_switch_steps", "lv_continuous_switch_steps", "closed_form_switch_steps", "lv_plateau_losses")
        + ("singular", "singular_switch_steps", "stable_lr", "power_law", "initial_occupations", "mflow_resolution")
        + ("flow_stats", "departure", "network", "config", "mflow_group_switch_steps"),
        ("lv_applies", "notes", "route", "route_reason", "expansion", "arch_name", "arch_options")
        + ("engine", "engine_reason"),
        before=_register_departure,
    )


_register_prediction()
