"""What :func:`nqf.comparison.compare.compare` measured: :class:`Comparison`, and its JSON
(``Comparison.to_json``, printed by ``nqf compare --json``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.architectures.expansion import ExpansionReport, report_json
from nqf.comparison.config import CompareConfig
from nqf.core.measure import group_label
from nqf.core.pytrees import json_number, json_numbers, json_value, register_fields
from nqf.theory.predict.pipeline import Prediction
from nqf.theory.predict.result import PLATEAU_CONVENTION, SWITCH_CONVENTION
from nqf.training.closure import ClosureResult
from nqf.training.config import DIVERGENCE_FACTOR
from nqf.training.grid import TrainingGrid

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, eq=False)
class Comparison:
    """Everything :func:`compare` measured. Per-mode arrays have the modes last, in the
    order of ``growth`` (largest first); per-seed arrays have the seeds first. Where modes
    share c_k (a degenerate group: W0 decides how its occupation splits among its modes) a
    row of the per-mode arrays is the group, timed on its total occupation (``groups``).

    Attributes:
        task_name, task_options, arch: the task and the architecture.
        config: the CompareConfig; seeds: (S,) the seeds used.
        growth: (g,) c_k; thresholds: (g,) m_k*/2, the common switch thresholds.
        predictions: {flow: (Prediction per seed)} for every flow in ``config.flows``.
        predicted: {"lv", "mflow", "singular_limit", "closed_form"}: (S, g) GD switch steps.
        flow_switch: {optimizer: (S, g)} switch steps of the optimizer's M-flow (GD's for
            Adam/Muon, see ``reference_only``; NaN for a user's own optax transformation, which
            has none: ``config.own``).
        quadratic: TrainingGrid of the quadratic model (GD) or None;
        quadratic_switch, quadratic_switch_own: (S, g) or None.
        network: {optimizer: TrainingGrid}; network_switch, network_switch_own: {optimizer: (S, g)}.
        plateau_predicted: {"singular_limit", "lv", "mflow"}: (S, g) (GD);
        plateau_quadratic: (S, g) or None; plateau_network: {optimizer: (S, g)}.
        mean_field_switch, plateau_mean_field: {optimizer: (S, g)} the network's own prediction,
            the mean-field flow of its units (``Prediction.network``); NaN where predict did not
            compute it (its notes say why) or the optimizer has no flow. timing_mean_field:
            {optimizer: (S, g)} its plateaus' timing error bars, relative
            (``NetworkFlow.plateau_timing``; NaN for a group of several modes).
        closure: {optimizer: ClosureResult}; closure_until: {optimizer: step}.
        reference_only: optimizers without an M-flow of their own.
        notes: what a reader needs to know.
        expansion: the expansion check's verdict on the unit.
        groups: the modes of each row (``nqf.core.measure.mode_groups``); see ``mode_groups``.
    """

    task_name: str
    task_options: dict
    arch: Architecture
    config: CompareConfig
    seeds: np.ndarray
    growth: np.ndarray
    thresholds: np.ndarray
    predictions: dict[str, tuple[Prediction, ...]] = field(repr=False)
    predicted: dict[str, np.ndarray]
    flow_switch: dict[str, np.ndarray]
    quadratic: TrainingGrid | None = field(repr=False)
    quadratic_switch: np.ndarray | None
    quadratic_switch_own: np.ndarray | None
    network: dict[str, TrainingGrid] = field(repr=False)
    network_switch: dict[str, np.ndarray]
    network_switch_own: dict[str, np.ndarray]
    plateau_predicted: dict[str, np.ndarray]
    plateau_quadratic: np.ndarray | None
    plateau_network: dict[str, np.ndarray]
    mean_field_switch: dict[str, np.ndarray]
    plateau_mean_field: dict[str, np.ndarray]
    timing_mean_field: dict[str, np.ndarray]
    closure: dict[str, ClosureResult] = field(repr=False)
    closure_until: dict[str, int]
    reference_only: tuple[str, ...]
    notes: tuple[str, ...] = ()
    expansion: ExpansionReport | None = None
    groups: tuple[tuple[int, ...], ...] = ()

    @property
    def mode_groups(self) -> tuple[tuple[int, ...], ...]:
        """The modes (indices into the prediction's growing modes) of each row of the per-mode
        arrays: one per degenerate group (``groups``), else one mode per row."""
        return self.groups or tuple((k,) for k in range(self.num_modes))

    @property
    def diverged(self) -> dict[str, list[int]]:
        """{optimizer: seeds whose network run diverged (non-finite or > DIVERGENCE_FACTOR x initial loss)}."""
        return {
            opt: [int(s) for s, d in zip(self.seeds, sw.diverged_at[0], strict=False) if d >= 0]
            for opt, sw in self.network.items()
        }

    @property
    def num_modes(self) -> int:
        return int(self.growth.size)

    @property
    def prediction(self) -> Prediction:
        """The GD prediction of the first seed (the reference)."""
        return self.predictions["gd"][0]

    @property
    def closure_defect(self) -> dict[str, float]:
        """{optimizer: max M defect of the quadratic model up to the end of the last switch-on}."""
        return {opt: float(r.max_m_defect) for opt, r in self.closure.items()}

    def relative_errors(self) -> dict[str, Any]:
        """Mean over seeds of (t - t_mflow)/t_mflow, against the M-flow of the same seed:
        {"lv", "singular_limit", "quadratic": (g,), "network": {optimizer: (g,)}}."""
        mflow = self.predicted["mflow"]
        out: dict[str, Any] = {
            "lv": relative(self.predicted["lv"], mflow).mean(axis=0),
            "singular_limit": relative(self.predicted["singular_limit"], mflow).mean(axis=0),
        }
        if self.quadratic_switch is not None:
            out["quadratic"] = relative(self.quadratic_switch, mflow).mean(axis=0)
        out["network"] = {
            opt: relative(self.network_switch[opt], self.flow_switch[opt]).mean(axis=0) for opt in self.network
        }
        return out

    def loss_curves(self) -> list[dict[str, Any]]:
        """Curves for plotting, first seed: [{"source", "detail", "optimizer", "steps", "loss"}, ...].

        Network curves carry "band": (lo, hi) loss min/max over seeds when there are several.
        """
        curves = []
        for opt, sweep in self.network.items():
            loss = sweep.loss[0]
            entry = {"source": "network", "detail": opt, "optimizer": opt, "steps": sweep.steps, "loss": loss[0]}
            if loss.shape[0] > 1:
                entry["band"] = (np.nanmin(loss, axis=0), np.nanmax(loss, axis=0))
            curves.append(entry)
        if self.quadratic is not None:
            q = self.quadratic
            curves.append(
                {"source": "quadratic model", "detail": "gd", "optimizer": "gd", "steps": q.steps, "loss": q.loss[0, 0]}
            )
        for flow, preds in self.predictions.items():
            p = preds[0]
            steps, loss = np.asarray(p.flow.steps), np.asarray(p.flow.loss)
            curves.append({"source": "M-flow", "detail": flow, "optimizer": flow, "steps": steps, "loss": loss})
        p = self.prediction
        curves.append(
            {"source": "LV", "detail": "gd", "optimizer": "gd", "steps": p.lv_steps, "loss": np.asarray(p.lv_loss)}
        )
        return curves

    def all_loss_curves(self) -> list[dict[str, Any]]:
        """Every loss curve of every seed at its recorded steps (what ``to_json()["curves"]`` holds).

        Returns [{"source", "optimizer", "steps": (R,), "seeds": (S,), "loss": (S, R)}, ...]:
        source ``network`` per optimizer, ``quadratic`` (the quadratic model, GD), and ``mflow``
        and ``lv`` (the Lotka-Volterra map's loss) per flow of ``config.flows`` (the LV map of
        the SGD flow is its full-batch mean). The seeds of a source share its record steps.
        """
        seeds = np.asarray(self.seeds)

        def curve(source: str, optimizer: str, steps, loss) -> dict[str, Any]:
            return {"source": source, "optimizer": optimizer, "steps": np.asarray(steps), "seeds": seeds, "loss": loss}

        out = [curve("network", opt, sweep.steps, np.asarray(sweep.loss[0])) for opt, sweep in self.network.items()]
        if self.quadratic is not None:
            out.append(curve("quadratic", "gd", self.quadratic.steps, np.asarray(self.quadratic.loss[0])))
        for flow, preds in self.predictions.items():
            out.append(curve("mflow", flow, preds[0].flow.steps, np.stack([np.asarray(p.flow.loss) for p in preds])))
        for flow, preds in self.predictions.items():
            out.append(curve("lv", flow, preds[0].lv_steps, np.stack([np.asarray(p.lv_loss) for p in preds])))
        return out

    def to_dataframes(self) -> dict[str, pd.DataFrame]:
        """The tables of ``nqf compare --csv DIR`` as pandas DataFrames, ``{"curves", "modes"}``.

        ``"curves"``: columns source, optimizer, seed, step, loss; one row per (source,
        optimizer, seed, recorded step): every curve of :meth:`all_loss_curves` (sources
        ``network``, ``quadratic``, ``mflow``, ``lv``). ``"modes"``: columns source, optimizer,
        seed, mode, convention, switch_step, plateau_loss; one row per (source, optimizer,
        seed, mode, convention): the measured switch-on steps (``network``, ``quadratic``;
        conventions ``occupation`` and ``own_occupation``) and every flow's predicted ones, per
        seed (not the means over seeds of :meth:`to_json`). The rows and columns of curves.csv
        and modes.csv (``nqf.report.curve_tables``, which says what each holds), cells as
        numbers: NaN where the CSV cell is empty (never switched, diverged, not available);
        ``nqf.core.dataframes`` gives the dtypes. Needs pandas (``pip install
        'nqf[dataframe]'``): NqfError without it.
        """
        from nqf.comparison.tables import comparison_tables
        from nqf.core.dataframes import require_pandas, tables_frames

        require_pandas()
        return tables_frames(comparison_tables(self))

    def to_dataframe(self, table: str = "curves") -> pd.DataFrame:
        """One table of :meth:`to_dataframes` as a pandas DataFrame: ``"curves"`` (the
        default; one row per source, optimizer, seed and recorded step, long format) or
        ``"modes"`` (one row per source, optimizer, seed, mode and convention). NqfError for
        another name, or without pandas."""
        from nqf.core.dataframes import check_table

        name = check_table(table)
        return self.to_dataframes()[name]

    def to_json(self) -> dict:
        """The stable JSON form printed by ``nqf compare --json`` (null: never switched / not available).

        ``curves`` holds every loss curve of every seed at the recorded steps (``all_loss_curves``).
        """
        errors = self.relative_errors()
        modes = [_mode_json(self, k, errors) for k in range(self.num_modes)]
        return _comparison_json(self, modes)


def relative(measured: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """(measured - reference) / reference elementwise; NaN / inf where the reference is 0 or NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(measured, dtype=np.float64) - reference) / reference


def _seed_mean(a) -> np.ndarray:
    """Mean over the seeds (axis 0); NaN if any seed is NaN."""
    return np.asarray(a, dtype=np.float64).mean(axis=0)


def _mode_json(c: Comparison, k: int, errors: dict[str, Any]) -> dict:
    """The JSON row of mode k: growth, threshold, predicted and measured switch steps,
    relative errors and plateau losses (means over seeds; null: never / not available)."""
    members = c.mode_groups[k]
    return {
        "mode": members[0] + 1,
        "modes": [int(m) + 1 for m in members],  # a degenerate group's modes, timed as one
        "label": group_label(members),
        "growth": float(c.growth[k]),
        "threshold": float(c.thresholds[k]),
        **_mode_predicted_json(c, k),
        **_mode_measured_json(c, k),
        "relative_error": {
            "lv": json_number(errors["lv"][k]),
            "singular_limit": json_number(errors["singular_limit"][k]),
            "quadratic": json_number(errors["quadratic"][k]) if "quadratic" in errors else None,
            "network": {opt: json_number(e[k]) for opt, e in errors["network"].items()},
        },
        "plateau_loss": {
            "predicted": {name: json_number(_seed_mean(v)[k]) for name, v in c.plateau_predicted.items()},
            "measured": _measured_json(c.plateau_quadratic, c.plateau_network, k),
        },
    }


def _mode_predicted_json(c: Comparison, k: int) -> dict:
    """Mode k's predicted switch steps: "predicted" (GD: LV, M-flow, singular limit, closed
    form) and "predicted_by_optimizer" (each optimizer's M-flow, or GD's as a reference)."""
    return {
        "predicted": {
            name: json_number(_seed_mean(c.predicted[name])[k])
            for name in ("lv", "mflow", "singular_limit", "closed_form")
        },
        "predicted_by_optimizer": {
            opt: {
                "mflow": json_number(_seed_mean(c.flow_switch[opt])[k]),
                "mean_field": json_number(_seed_mean(c.mean_field_switch[opt])[k]),
                "mean_field_plateau_loss": json_number(_seed_mean(c.plateau_mean_field[opt])[k]),
                "mean_field_plateau_timing": json_number(_seed_mean(c.timing_mean_field[opt])[k]),
                "flow": c.config.flow_of(opt),  # null: a user's own transformation (no M-flow)
                "reference": opt in c.reference_only,
            }
            for opt in c.network
        },
    }


def _mode_measured_json(c: Comparison, k: int) -> dict:
    """Mode k's measured switch steps: "measured" (common threshold), "measured_own_threshold"
    (half each run's own final occupation) and "network_seeds" (per-seed steps and spread)."""
    spread = {
        opt: {
            "steps": json_numbers(s[:, k]),
            "std": json_number(np.std(s[:, k])),
            "min": json_number(np.min(s[:, k])),
            "max": json_number(np.max(s[:, k])),
        }
        for opt, s in c.network_switch.items()
    }
    return {
        "measured": _measured_json(c.quadratic_switch, c.network_switch, k),
        "measured_own_threshold": _measured_json(c.quadratic_switch_own, c.network_switch_own, k),
        "network_seeds": spread,
    }


def _measured_json(quadratic: np.ndarray | None, network: dict[str, np.ndarray], k: int) -> dict:
    """Mode k's means over seeds of the quadratic model's (S, g) numbers (null: not trained) and each network's."""
    return {
        "quadratic": None if quadratic is None else json_number(_seed_mean(quadratic)[k]),
        "network": {opt: json_number(_seed_mean(s)[k]) for opt, s in network.items()},
    }


def _comparison_json(c: Comparison, modes: list[dict]) -> dict:
    """The whole JSON object around the per-mode rows ``modes``: task, architecture, config,
    expansion verdict, seeds, closure, divergence, notes, curves and departure."""
    p = c.prediction
    return {
        "prediction": _prediction_json(modes),
        "task": c.task_name,
        "task_options": json_value(c.task_options),
        "arch": c.arch.name,
        "arch_options": json_value(dict(c.arch.options)),
        "config": json_value({**_config_json(c.config), "arch": c.arch.name, "arch_options": dict(c.arch.options)}),
        "expansion": report_json(c.expansion),
        "seeds": [int(s) for s in c.seeds],
        # null: a user's own optax transformation (its learning rate is its own)
        "learning_rates": {opt: c.config.stated_lr(opt) for opt in c.config.optimizers},
        "lv_applies": bool(p.lv_applies),
        "defect": float(p.defect),
        "fixed_point": json_numbers(2.0 * c.thresholds),
        "modes": modes,
        "closure_defect": {opt: json_number(v) for opt, v in c.closure_defect.items()},
        "closure_update_defect": {opt: json_number(r.max_update_defect) for opt, r in c.closure.items()},
        "closure_until": json_value(c.closure_until),  # leaves: arrays after jax.tree.map
        "reference_only": list(c.reference_only),
        "diverged": c.diverged,
        "divergence_factor": DIVERGENCE_FACTOR,
        "notes": list(c.notes),
        # {source: {optimizer: {"steps", "seeds", "loss": one list per seed}}} (all_loss_curves)
        "curves": _curves_json(c.all_loss_curves()),
        # per flow, one block per seed (null unless config.departure)
        "departure": None
        if not c.config.departure
        else {flow: [p.departure.to_json() for p in preds] for flow, preds in c.predictions.items()},
    }


def _prediction_json(modes: list[dict]) -> dict:
    """The ``prediction`` block that leads the JSON: per mode (per degenerate group), each
    optimizer's M-flow switch-on step (the prediction; null where the optimizer has no M-flow of
    its own: a GD reference or a user's transformation) against the network's (mean over seeds),
    their relative gap, and the plateau losses: the prediction first, as in ``nqf predict
    --json``; the other readings are the rows' ``predicted`` (the analysis)."""
    rows = []
    for row in modes:
        by_optimizer = row["predicted_by_optimizer"]
        own = {opt: flow["flow"] is not None and not flow["reference"] for opt, flow in by_optimizer.items()}
        errors = row["relative_error"]["network"]
        rows.append(
            {
                "modes": row["modes"],
                "growth": row["growth"],
                "fixed_point": 2.0 * row["threshold"],
                "switch_step": {opt: flow["mflow"] if own[opt] else None for opt, flow in by_optimizer.items()},
                "network_switch_step": row["measured"]["network"],
                "relative_error": {opt: error if own[opt] else None for opt, error in errors.items()},
                "plateau_loss": row["plateau_loss"]["predicted"].get("mflow"),
                "network_plateau_loss": row["plateau_loss"]["measured"]["network"],
            }
        )
    return {
        "source": "mflow",
        "switch_convention": SWITCH_CONVENTION,
        "plateau_convention": PLATEAU_CONVENTION,
        "modes": rows,
        "analysis": "each row of modes: predicted (GD: lv, singular_limit, closed_form), the quadratic model, "
        "each optimizer's M-flow (the GD M-flow as a reference where it has none)",
    }


def _config_json(config: CompareConfig) -> dict:
    """The config's fields as JSON values; ``transforms`` (a user's own optax transformations,
    functions) by their names only, under ``own_optimizers``."""
    out: dict[str, Any] = {}
    for f in fields(config):
        if f.name != "transforms":
            out[f.name] = getattr(config, f.name)
    if config.transforms:
        out["own_optimizers"] = [name for name, _ in config.transforms]
    return out


def _curves_json(curves: list[dict[str, Any]]) -> dict:
    """``all_loss_curves()`` nested as {source: {optimizer: {"steps", "seeds", "loss"}}}; null: not finite."""
    out: dict[str, dict] = {}
    for entry in curves:
        out.setdefault(entry["source"], {})[entry["optimizer"]] = {
            "steps": [round(float(t)) for t in np.asarray(entry["steps"]).ravel()],
            "seeds": [int(s) for s in entry["seeds"]],
            "loss": [json_numbers(row) for row in np.asarray(entry["loss"], dtype=np.float64)],
        }
    return out


# A Comparison is a pytree of what it measured (issue 20): its leaves are the arrays and numbers
# of the predictions, the trained runs (``TrainingGrid``), the closure checks and the switch-on
# and plateau tables; the task, the architecture, the config, the notes and the expansion report
# are static metadata (``nqf.core.pytrees``).
register_fields(
    Comparison,
    ("seeds", "growth", "thresholds", "predictions", "predicted", "flow_switch", "quadratic", "quadratic_switch")
    + ("quadratic_switch_own", "network", "network_switch", "network_switch_own", "plateau_predicted")
    + ("plateau_quadratic", "plateau_network", "mean_field_switch", "plateau_mean_field", "timing_mean_field")
    + ("closure", "closure_until"),
    ("task_name", "task_options", "arch", "config", "reference_only", "notes", "expansion", "groups"),
)
