r"""Train the real networks side by side with the theory (THEORY.md section 5).

:func:`compare` runs, on one task, with the same data, seeds and initial weights
W0 = ``init_weights(arch, training_keys(seed)[0], width, sigma0)``:

- the predictions (``nqf.predict``): the M-flow of the optimizer (GD; minibatch SGD
  replaying the training batches; heavy-ball momentum), the Lotka-Volterra map and the
  singular limit. Adam and Muon have no M-flow here (Adam's update is not equivariant
  under W -> W O, so M does not close; Muon's is, but ``predict`` has no Muon map), so
  their rows show the GD prediction as a *reference*, marked as such;
- the quadratic model f = <W W^T, A(x)> trained by GD (it must reproduce the GD M-flow:
  same W0, exact map);
- the full network trained by each optimizer (``nqf.train_sweep`` over the seeds);
- the closure diagnostic of each optimizer on the quadratic model (``nqf.closure_diagnostic``).

Measurements, per mode k (the eigenvectors q_k of C with c_k > 0, sorted by growth,
largest first; occupations m_k = q_k^T M q_k = ||W^T q_k||^2):

- switch-on step: the first step with m_k >= thresholds_k = m_k*/2, half the theory's
  (LV) fixed point, one threshold for every source; and, side by side, the step at half
  of each run's own final occupation (``own``), which differs when a model converges to
  a different occupation (the tanh network's m_1 ends near 10.4, the theory's at 6).
  A mode with m_k* = 0 (suppressed by the others) has no switch-on: NaN / null;
- relative error of a switch step: (t - t_mflow) / t_mflow per seed against the M-flow of
  the same seed and optimizer (the GD M-flow for Adam and Muon: a reference, not a
  prediction), then averaged over seeds;
- plateau loss after switch k: the loss at the geometric mean sqrt(t_k t_next) of the
  source's own switch step t_k and its next switch step t_next (the earliest switch of
  any mode after t_k; the horizon when none follows), the middle of the plateau on the
  log-time axis. Predicted plateau losses: the singular limit's equilibrium loss after
  mode k activates, and the LV map and M-flow curves read the same way as the runs;
- closure defect: max_t ||M(t) - M'(t)||_F / ||M(t)||_F of the quadratic model trained
  from W0 and W0 O (O random orthogonal) with the optimizer, up to the end of the last
  switch-on: the first step at which every mode has reached ``closure_fraction`` (0.9)
  of m_k* in the optimizer's M-flow (first seed; the quadratic model's exact trajectory),
  or, for Adam and Muon, in the optimizer's network run (first seed); the horizon if
  some mode never does.

Validity: the unit must pass the expansion check (``nqf.architectures.expansion.theory_gate``, the
one gate of ``predict`` and ``nqf structure``) unless ``allow_inapplicable``; the verdict
is in ``Comparison.expansion`` and the JSON either way. A network run has diverged when
its loss becomes non-finite or exceeds ``DIVERGENCE_FACTOR`` (100) times its initial loss
(``nqf.training.runs``); its seed is listed in ``diverged``, its records from that step on are
NaN (so it has no switch-on steps there: null) and a note says so.

Seeds: runs use seeds ``seed, seed + 1, ..., seed + seeds - 1`` for W0 and minibatches;
every per-mode number is the mean over seeds (NaN when some seed never switched within
the horizon) and per-seed values and spreads are kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from nqf.architectures.architecture import Architecture, check_width
from nqf.training.closure import ClosureResult, closure_diagnostic
from nqf.theory.data_matrices import DataMatrices, data_matrices, flow_data
from nqf.core.errors import NqfError
from nqf.architectures.expansion import ExpansionReport, report_json, theory_gate
from nqf.core.measure import switch_steps, switch_steps_own
from nqf.theory.predict import PREDICT_OPTIMIZERS, Prediction, PredictConfig, predict
from nqf.core.precision import resolve_dtype
from nqf.training.runs import DIVERGENCE_FACTOR, OPTIMIZERS, SweepResult, TrainConfig, train_sweep

COMPARE_OPTIMIZERS = OPTIMIZERS
# The M-flow each optimizer is compared with; Adam and Muon get the GD flow as a reference.
FLOW_OF = {"gd": "gd", "sgd": "sgd", "momentum": "momentum", "adam": "gd", "muon": "gd"}
# Records every step up to this horizon (as ``predict`` does), else ~2000 log+linear checkpoints.
_EVERY_STEP_LIMIT = 20000
_CHECKPOINTS = 2000
_DEFAULT_MOMENTUM = 0.9


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _positive_finite(value) -> bool:
    number = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class CompareConfig:
    """What a comparison depends on besides task and architecture.

    Attributes:
        width: n, the number of units.
        sigma0: init scale, W0 ~ N(0, sigma0^2).
        lr: learning rate of every optimizer (and of the GD reference flow) unless
            overridden in ``learning_rates``.
        steps: horizon in optimizer steps (the same for every source).
        optimizers: which optimizers train the network: any of gd, sgd, momentum, adam, muon.
        learning_rates: per-optimizer overrides, (optimizer, lr) pairs (a mapping is
            accepted and stored sorted), e.g. (("adam", 1e-3),). An override for ``gd``
            also sets the GD reference flow's learning rate.
        beta: heavy-ball momentum of ``momentum`` (None: 0.9); Adam (b1 0.9) and Muon
            (beta 0.95) keep their optax defaults.
        batch_size: minibatch size of ``sgd`` (required with sgd, refused without it; the
            other optimizers are full batch, as their M-flows are).
        seeds: number of seeds K (init and minibatches): seed, seed + 1, ..., seed + K - 1.
        seed: the first seed.
        data_seed: seed of ``task.generate``.
        include_quadratic: also train the quadratic model (GD).
        closure: run the closure diagnostic per optimizer.
        closure_fraction: the closure window ends when every mode has reached this
            fraction of its fixed-point occupation (module docstring).
        allow_inapplicable: run even when the expansion check says the quadratic-form
            theory does not apply to the unit (the verdict is reported either way).
        departure: also predict where the network leaves the quadratic model, per flow
            and seed, without training (``PredictConfig.departure``, ``nqf.theory.departure``):
            the relative gap along the predicted path and the corrected switch-on steps.
    """

    width: int = 32
    sigma0: float = 1e-6
    lr: float = 0.05
    steps: int = 1000
    optimizers: tuple[str, ...] = ("gd",)
    learning_rates: tuple[tuple[str, float], ...] = ()
    beta: float | None = None
    batch_size: int | None = None
    seeds: int = 1
    seed: int = 0
    data_seed: int = 0
    include_quadratic: bool = True
    closure: bool = True
    closure_fraction: float = 0.9
    allow_inapplicable: bool = False
    departure: bool = False

    def __post_init__(self):
        if not isinstance(self.allow_inapplicable, (bool, np.bool_)):
            raise NqfError(f"allow_inapplicable must be True or False, got {self.allow_inapplicable!r}")
        if not isinstance(self.departure, (bool, np.bool_)):
            raise NqfError(f"departure must be True or False, got {self.departure!r}")
        opts = (self.optimizers,) if isinstance(self.optimizers, str) else tuple(self.optimizers)
        object.__setattr__(self, "optimizers", opts)
        if not opts:
            raise NqfError("give at least one optimizer")
        for opt in opts:
            if opt not in COMPARE_OPTIMIZERS:
                raise NqfError(f"unknown optimizer {opt!r}; choose from {', '.join(COMPARE_OPTIMIZERS)}")
        if len(set(opts)) != len(opts):
            raise NqfError(f"optimizer listed twice in {', '.join(opts)}")
        rates = self.learning_rates
        pairs = tuple(sorted(rates.items())) if isinstance(rates, Mapping) else tuple(tuple(p) for p in rates)
        for pair in pairs:
            if len(pair) != 2:
                raise NqfError(f"learning_rates must be (optimizer, lr) pairs, got {pair!r}")
            opt, lr = pair
            if opt not in opts:
                raise NqfError(
                    f"a learning rate is given for {opt!r}, which is not among the optimizers ({', '.join(opts)})"
                )
            if not _positive_finite(lr):
                raise NqfError(f"learning rate of {opt} must be a positive finite number, got {lr!r}")
        if len({p[0] for p in pairs}) != len(pairs):
            raise NqfError("a learning rate is given twice for the same optimizer")
        object.__setattr__(self, "learning_rates", tuple((str(o), float(lr)) for o, lr in pairs))
        if not _is_int(self.width) or self.width < 1:
            raise NqfError(f"width must be a positive integer, got {self.width!r}")
        if not _is_int(self.steps) or self.steps < 1:
            raise NqfError(f"steps must be a positive integer, got {self.steps!r}")
        if not _positive_finite(self.lr):
            raise NqfError(f"learning rate must be a positive finite number, got {self.lr!r}")
        if not _positive_finite(self.sigma0):
            raise NqfError(f"sigma0 must be a positive finite number, got {self.sigma0!r}")
        if not _is_int(self.seeds) or self.seeds < 1:
            raise NqfError(f"seeds must be a positive integer, got {self.seeds!r}")
        for name in ("seed", "data_seed"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise NqfError(f"{name} must be an integer >= 0, got {value!r}")
        if self.beta is not None and not (isinstance(self.beta, (int, float)) and 0 <= self.beta < 1):
            raise NqfError(f"momentum beta must lie in [0, 1), got {self.beta!r}")
        if "sgd" in opts and self.batch_size is None:
            raise NqfError("optimizer sgd needs a batch size (--batch)")
        if self.batch_size is not None:
            if "sgd" not in opts:
                raise NqfError(
                    "a batch size is used by sgd only (the other optimizers are full batch); add sgd or drop it"
                )
            if not _is_int(self.batch_size) or self.batch_size < 1:
                raise NqfError(f"batch size must be a positive integer, got {self.batch_size!r}")
        if not (isinstance(self.closure_fraction, (int, float)) and 0 < self.closure_fraction <= 1):
            raise NqfError(f"closure_fraction must lie in (0, 1], got {self.closure_fraction!r}")

    def lr_for(self, optimizer: str) -> float:
        """The learning rate of ``optimizer`` (its override, else ``lr``)."""
        return dict(self.learning_rates).get(optimizer, float(self.lr))

    @property
    def seed_list(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))

    @property
    def flows(self) -> tuple[str, ...]:
        """The M-flows computed: gd (always, the reference) then sgd/momentum as asked."""
        out = ["gd"]
        for opt in self.optimizers:
            if FLOW_OF[opt] not in out:
                out.append(FLOW_OF[opt])
        return tuple(out)

    def flow_lr(self, flow: str) -> float:
        return self.lr_for(flow) if flow in self.optimizers else float(self.lr)

    def train_config(self, optimizer: str, model: str) -> TrainConfig:
        """The TrainConfig of ``optimizer`` (seed and sigma0 are set per run)."""
        steps = self.steps
        return TrainConfig(
            optimizer=optimizer,
            lr=self.lr_for(optimizer),
            steps=steps,
            batch_size=self.batch_size if optimizer == "sgd" else None,
            beta=self.beta if optimizer == "momentum" else None,
            seed=self.seed,
            sigma0=float(self.sigma0),
            width=int(self.width),
            model=model,
            checkpoints=None if steps <= _EVERY_STEP_LIMIT else _CHECKPOINTS,
        )


def measured_plateau_losses(steps, loss, switch, horizon: float) -> np.ndarray:
    """Loss on the plateau after each switch: loss at sqrt(t_k t_next) (module docstring).

    steps: (R,) record steps; loss: (R,); switch: (g,) switch steps (NaN: never).
    t_next is the earliest switch step > t_k of any mode, else ``horizon``; t_k is floored
    at 1 (a log-time midpoint). The loss is linearly interpolated between records.
    Returns (g,), NaN where t_k is NaN or the loss there is not finite.
    """
    steps = np.asarray(steps, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    switch = np.asarray(switch, dtype=np.float64)
    out = np.full(switch.shape, np.nan)
    for k, t in enumerate(switch):
        if not math.isfinite(t):
            continue
        later = switch[np.isfinite(switch) & (switch > t)]
        t_next = float(later.min()) if later.size else float(horizon)
        at = math.sqrt(max(t, 1.0) * max(t_next, 1.0))
        out[k] = np.interp(at, steps, loss)
    return out


def _relative(measured: np.ndarray, reference: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(measured, dtype=np.float64) - reference) / reference


@dataclass(frozen=True, eq=False)
class Comparison:
    """Everything :func:`compare` measured. Per-mode arrays have the modes last, in the
    order of ``growth`` (largest first); per-seed arrays have the seeds first.

    Attributes:
        task_name, task_options, arch: the task and the architecture.
        config: the CompareConfig; seeds: (S,) the seeds used.
        growth: (g,) c_k; thresholds: (g,) m_k*/2, the common switch thresholds.
        predictions: {flow: (Prediction per seed)} for every flow in ``config.flows``.
        predicted: {"lv", "mflow", "singular_limit", "closed_form"}: (S, g) GD switch steps.
        flow_switch: {optimizer: (S, g)} switch steps of the optimizer's M-flow (GD's for
            Adam/Muon, see ``reference_only``).
        quadratic: SweepResult of the quadratic model (GD) or None;
        quadratic_switch, quadratic_switch_own: (S, g) or None.
        network: {optimizer: SweepResult}; network_switch, network_switch_own: {optimizer: (S, g)}.
        plateau_predicted: {"singular_limit", "lv", "mflow"}: (S, g) (GD);
        plateau_quadratic: (S, g) or None; plateau_network: {optimizer: (S, g)}.
        closure: {optimizer: ClosureResult}; closure_until: {optimizer: step}.
        reference_only: optimizers without an M-flow of their own.
        notes: what a reader needs to know.
        expansion: the expansion check's verdict on the unit.
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
    quadratic: SweepResult | None = field(repr=False)
    quadratic_switch: np.ndarray | None
    quadratic_switch_own: np.ndarray | None
    network: dict[str, SweepResult] = field(repr=False)
    network_switch: dict[str, np.ndarray]
    network_switch_own: dict[str, np.ndarray]
    plateau_predicted: dict[str, np.ndarray]
    plateau_quadratic: np.ndarray | None
    plateau_network: dict[str, np.ndarray]
    closure: dict[str, ClosureResult] = field(repr=False)
    closure_until: dict[str, int]
    reference_only: tuple[str, ...]
    notes: tuple[str, ...] = ()
    expansion: ExpansionReport | None = None

    @property
    def diverged(self) -> dict[str, list[int]]:
        """{optimizer: seeds whose network run diverged (non-finite or > DIVERGENCE_FACTOR x initial loss)}."""
        return {
            opt: [int(s) for s, d in zip(self.seeds, sw.diverged_at[0]) if d >= 0] for opt, sw in self.network.items()
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
            "lv": _relative(self.predicted["lv"], mflow).mean(axis=0),
            "singular_limit": _relative(self.predicted["singular_limit"], mflow).mean(axis=0),
        }
        if self.quadratic_switch is not None:
            out["quadratic"] = _relative(self.quadratic_switch, mflow).mean(axis=0)
        out["network"] = {
            opt: _relative(self.network_switch[opt], self.flow_switch[opt]).mean(axis=0) for opt in self.network
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
        curves.append({"source": "LV", "detail": "gd", "optimizer": "gd", "steps": p.lv_steps, "loss": np.asarray(p.lv_loss)})
        return curves

    def all_loss_curves(self) -> list[dict[str, Any]]:
        """Every loss curve of every seed at its recorded steps (what ``to_json()["curves"]`` holds).

        Returns [{"source", "optimizer", "steps": (R,), "seeds": (S,), "loss": (S, R)}, ...]:
        source ``network`` per optimizer, ``quadratic`` (the quadratic model, GD), and ``mflow``
        and ``lv`` (the Lotka-Volterra map's loss) per flow of ``config.flows`` (the LV map of
        the SGD flow is its full-batch mean). The seeds of a source share its record steps.
        """
        seeds = np.asarray(self.seeds)
        out: list[dict[str, Any]] = []
        for opt, sweep in self.network.items():
            out.append({"source": "network", "optimizer": opt, "steps": np.asarray(sweep.steps), "seeds": seeds,
                        "loss": np.asarray(sweep.loss[0])})
        if self.quadratic is not None:
            out.append({"source": "quadratic", "optimizer": "gd", "steps": np.asarray(self.quadratic.steps),
                        "seeds": seeds, "loss": np.asarray(self.quadratic.loss[0])})
        for flow, preds in self.predictions.items():
            out.append({"source": "mflow", "optimizer": flow, "steps": np.asarray(preds[0].flow.steps), "seeds": seeds,
                        "loss": np.stack([np.asarray(p.flow.loss) for p in preds])})
        for flow, preds in self.predictions.items():
            out.append({"source": "lv", "optimizer": flow, "steps": np.asarray(preds[0].lv_steps), "seeds": seeds,
                        "loss": np.stack([np.asarray(p.lv_loss) for p in preds])})
        return out

    def to_json(self) -> dict:
        """The stable JSON form printed by ``nqf compare --json`` (null: never switched / not available).

        ``curves`` holds every loss curve of every seed at the recorded steps (``all_loss_curves``).
        """
        errors = self.relative_errors()
        g = self.num_modes
        mean = lambda a: np.asarray(a, dtype=np.float64).mean(axis=0)  # noqa: E731 (NaN if any seed is NaN)
        modes = []
        for k in range(g):
            network = {opt: _num(mean(s)[k]) for opt, s in self.network_switch.items()}
            spread = {
                opt: {
                    "steps": _floats(s[:, k]),
                    "std": _num(np.std(s[:, k])),
                    "min": _num(np.min(s[:, k])),
                    "max": _num(np.max(s[:, k])),
                }
                for opt, s in self.network_switch.items()
            }
            row = {
                "mode": k + 1,
                "growth": float(self.growth[k]),
                "threshold": float(self.thresholds[k]),
                "predicted": {
                    "lv": _num(mean(self.predicted["lv"])[k]),
                    "mflow": _num(mean(self.predicted["mflow"])[k]),
                    "singular_limit": _num(mean(self.predicted["singular_limit"])[k]),
                    "closed_form": _num(mean(self.predicted["closed_form"])[k]),
                },
                "predicted_by_optimizer": {
                    opt: {
                        "mflow": _num(mean(self.flow_switch[opt])[k]),
                        "flow": FLOW_OF[opt],
                        "reference": opt in self.reference_only,
                    }
                    for opt in self.network
                },
                "measured": {
                    "quadratic": None if self.quadratic_switch is None else _num(mean(self.quadratic_switch)[k]),
                    "network": network,
                },
                "measured_own_threshold": {
                    "quadratic": None if self.quadratic_switch_own is None else _num(mean(self.quadratic_switch_own)[k]),
                    "network": {opt: _num(mean(s)[k]) for opt, s in self.network_switch_own.items()},
                },
                "network_seeds": spread,
                "relative_error": {
                    "lv": _num(errors["lv"][k]),
                    "singular_limit": _num(errors["singular_limit"][k]),
                    "quadratic": _num(errors["quadratic"][k]) if "quadratic" in errors else None,
                    "network": {opt: _num(e[k]) for opt, e in errors["network"].items()},
                },
                "plateau_loss": {
                    "predicted": {name: _num(mean(v)[k]) for name, v in self.plateau_predicted.items()},
                    "measured": {
                        "quadratic": None if self.plateau_quadratic is None else _num(mean(self.plateau_quadratic)[k]),
                        "network": {opt: _num(mean(v)[k]) for opt, v in self.plateau_network.items()},
                    },
                },
            }
            modes.append(row)
        p = self.prediction
        return {
            "task": self.task_name,
            "task_options": _jsonable(self.task_options),
            "arch": self.arch.name,
            "arch_options": _jsonable(dict(self.arch.options)),
            "config": _jsonable(
                {**asdict(self.config), "arch": self.arch.name, "arch_options": dict(self.arch.options)}
            ),
            "expansion": report_json(self.expansion),
            "seeds": [int(s) for s in self.seeds],
            "learning_rates": {opt: self.config.lr_for(opt) for opt in self.config.optimizers},
            "lv_applies": bool(p.lv_applies),
            "defect": float(p.defect),
            "fixed_point": _floats(2.0 * self.thresholds),
            "modes": modes,
            "closure_defect": {opt: _num(v) for opt, v in self.closure_defect.items()},
            "closure_update_defect": {opt: _num(r.max_update_defect) for opt, r in self.closure.items()},
            "closure_until": dict(self.closure_until),
            "reference_only": list(self.reference_only),
            "diverged": self.diverged,
            "divergence_factor": DIVERGENCE_FACTOR,
            "notes": list(self.notes),
            # {source: {optimizer: {"steps", "seeds", "loss": one list per seed}}} (all_loss_curves)
            "curves": _curves_json(self.all_loss_curves()),
            # per flow, one block per seed (null unless config.departure)
            "departure": None
            if not self.config.departure
            else {flow: [p.departure.to_json() for p in preds] for flow, preds in self.predictions.items()},
        }


def _curves_json(curves: list[dict[str, Any]]) -> dict:
    """``all_loss_curves()`` nested as {source: {optimizer: {"steps", "seeds", "loss"}}}; null: not finite."""
    out: dict[str, dict] = {}
    for entry in curves:
        out.setdefault(entry["source"], {})[entry["optimizer"]] = {
            "steps": [round(float(t)) for t in np.asarray(entry["steps"]).ravel()],
            "seeds": [int(s) for s in entry["seeds"]],
            "loss": [_floats(row) for row in np.asarray(entry["loss"], dtype=np.float64)],
        }
    return out


def _num(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def _floats(a) -> list:
    return [_num(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _num(obj)
    return obj


def _closure_until(record_steps, occupations, m_star: np.ndarray, fraction: float, steps: int) -> int:
    """First step at which every mode of a run (occupations (R, g)) reached fraction * m_k*; else ``steps``."""
    reached = switch_steps(record_steps, occupations, fraction * m_star)
    if not np.all(np.isfinite(reached)):
        return int(steps)
    return int(min(steps, max(1, math.ceil(float(np.max(reached))))))


def compare(task, arch: Architecture | None, config: CompareConfig) -> Comparison:
    """Train the network (each optimizer), the quadratic model and the theory's flows side by side.

    task: a ``nqf`` Task (``get_task``); arch: the architecture (None: the task's natural one).
    See the module docstring for what is measured and how. Raises NqfError for bad input
    (width != experts for a mixture of experts, a learning rate above the GD stability
    bound, data for which no mode grows, ...).
    """
    if not isinstance(config, CompareConfig):
        raise NqfError(f"compare needs a CompareConfig, got {type(config).__name__}")
    if not hasattr(task, "generate"):
        raise NqfError(f"compare needs a task (nqf.get_task), got {type(task).__name__}")
    arch = task.architecture() if arch is None else arch
    check_width(arch, config.width)
    expansion = theory_gate(arch, config.allow_inapplicable)
    dtype = resolve_dtype(None)
    X, Y = task.generate(config.data_seed, dtype=dtype)
    # the full-batch flows read the data by the cheaper route; SGD needs the samples
    full_batch, _ = flow_data(arch, X, Y, dtype=dtype)
    per_sample = full_batch if isinstance(full_batch, DataMatrices) else None
    seeds = config.seed_list
    notes: list[str] = []

    predictions: dict[str, tuple[Prediction, ...]] = {}
    for flow in config.flows:
        if flow == "sgd" and per_sample is None:
            per_sample = data_matrices(arch, X, Y, dtype=dtype)
        predictions[flow] = tuple(
            predict(
                arch,
                X,
                Y,
                PredictConfig(
                    width=int(config.width),
                    lr=config.flow_lr(flow),
                    steps=int(config.steps),
                    sigma0=float(config.sigma0),
                    optimizer=flow,
                    beta=_DEFAULT_MOMENTUM if config.beta is None else float(config.beta),
                    batch_size=config.batch_size if flow == "sgd" else None,
                    seed=seed,
                    allow_inapplicable=bool(config.allow_inapplicable),
                    departure=bool(config.departure),
                ),
                data=full_batch if flow != "sgd" else per_sample,
            )
            for seed in seeds
        )
    reference = predictions["gd"][0]
    g = reference.num_growing
    thresholds = np.asarray(reference.thresholds, dtype=np.float64)
    # a mode with m_k* = 0 (suppressed by the others) has no switch-on: never counted as reached
    measure_at = np.where(thresholds > 0, thresholds, np.inf)
    basis = np.asarray(reference.modes.basis[:, :g])
    for note in reference.notes:
        notes.append(note)

    gd_preds = predictions["gd"]
    predicted = {
        "lv": np.stack([p.lv_switch_steps for p in gd_preds]),
        "mflow": np.stack([p.mflow_switch_steps for p in gd_preds]),
        "singular_limit": np.stack([p.singular_switch_steps for p in gd_preds]),
        "closed_form": np.stack([p.closed_form_switch_steps for p in gd_preds]),
    }
    flow_switch = {
        opt: np.stack([p.mflow_switch_steps for p in predictions[FLOW_OF[opt]]]) for opt in config.optimizers
    }
    reference_only = tuple(opt for opt in config.optimizers if opt not in PREDICT_OPTIMIZERS)
    for opt in reference_only:
        if opt == "adam":
            why = "its update is not equivariant under W -> W O, M does not close"
        else:
            why = "nqf has no Muon map on M"
        notes.append(
            f"{opt}: no M-flow ({why}); its rows compare with the GD M-flow at lr {config.flow_lr('gd'):g} as a reference"
        )

    horizon = float(config.steps)
    plateau_predicted = {
        "singular_limit": np.stack([p.lv_plateau_losses for p in gd_preds]),
        "lv": np.stack([measured_plateau_losses(p.lv_steps, p.lv_loss, p.lv_switch_steps, horizon) for p in gd_preds]),
        "mflow": np.stack(
            [
                measured_plateau_losses(np.asarray(p.flow.steps), np.asarray(p.flow.loss), p.mflow_switch_steps, horizon)
                for p in gd_preds
            ]
        ),
    }

    sigma0s = [float(config.sigma0)]
    quadratic = quadratic_switch = quadratic_own = plateau_quadratic = None
    if config.include_quadratic:
        quadratic = train_sweep(arch, X, Y, config.train_config("gd", "quadratic"), sigma0s, seeds, basis=basis)
        quadratic_switch = switch_steps(quadratic.steps, quadratic.occupations[0], measure_at)
        quadratic_own = switch_steps_own(quadratic.steps, quadratic.occupations[0])
        plateau_quadratic = np.stack(
            [
                measured_plateau_losses(quadratic.steps, quadratic.loss[0, j], quadratic_switch[j], horizon)
                for j in range(len(seeds))
            ]
        )

    network: dict[str, SweepResult] = {}
    network_switch, network_own, plateau_network = {}, {}, {}
    for opt in config.optimizers:
        sweep = train_sweep(arch, X, Y, config.train_config(opt, "network"), sigma0s, seeds, basis=basis)
        network[opt] = sweep
        network_switch[opt] = switch_steps(sweep.steps, sweep.occupations[0], measure_at)
        network_own[opt] = switch_steps_own(sweep.steps, sweep.occupations[0])
        plateau_network[opt] = np.stack(
            [
                measured_plateau_losses(sweep.steps, sweep.loss[0, j], network_switch[opt][j], horizon)
                for j in range(len(seeds))
            ]
        )
        diverged = [(int(s), int(d)) for s, d in zip(seeds, sweep.diverged_at[0]) if d >= 0]
        if diverged:
            listed = ", ".join(f"{s} (step {d})" for s, d in diverged)
            notes.append(
                f"network ({opt}, lr {config.lr_for(opt):g}) diverged for seed(s) {listed}: its loss became non-finite "
                f"or exceeded {DIVERGENCE_FACTOR:g} x its initial loss; its records from there on are NaN, so modes not "
                "switched on before are null, not switches; lower its learning rate"
            )

    closure: dict[str, ClosureResult] = {}
    closure_until: dict[str, int] = {}
    if config.closure:
        m_star = 2.0 * thresholds
        for opt in config.optimizers:
            if opt in PREDICT_OPTIMIZERS:  # the optimizer's M-flow is the quadratic model's exact trajectory
                flow = predictions[FLOW_OF[opt]][0].flow
                record, occupations = np.asarray(flow.steps), np.asarray(flow.occupations)
            else:  # no M-flow: the network run of the first seed times the switch-ons
                record, occupations = network[opt].steps, network[opt].occupations[0, 0]
            until = _closure_until(record, occupations, m_star, config.closure_fraction, config.steps)
            closure_until[opt] = until
            tc = config.train_config(opt, "quadratic")
            tc = TrainConfig(**{**asdict(tc), "steps": until, "checkpoints": None})
            closure[opt] = closure_diagnostic(arch, X, Y, tc, until=until, W0=None)

    return Comparison(
        task_name=getattr(task, "name", type(task).__name__),
        task_options=task.options() if hasattr(task, "options") else {},
        arch=arch,
        config=config,
        seeds=np.asarray(seeds),
        growth=np.asarray(reference.modes.growth[:g], dtype=np.float64),
        thresholds=thresholds,
        predictions=predictions,
        predicted=predicted,
        flow_switch=flow_switch,
        quadratic=quadratic,
        quadratic_switch=quadratic_switch,
        quadratic_switch_own=quadratic_own,
        network=network,
        network_switch=network_switch,
        network_switch_own=network_own,
        plateau_predicted=plateau_predicted,
        plateau_quadratic=plateau_quadratic,
        plateau_network=plateau_network,
        closure=closure,
        closure_until=closure_until,
        reference_only=reference_only,
        notes=tuple(notes),
        expansion=expansion,
    )
