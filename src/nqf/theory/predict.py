r"""Predict training without training: one call from (architecture, data, init, optimizer).

:func:`predict` chains the pieces of THEORY.md sections 2-4:

1. data matrices C, K[.] of (X, Y) (``nqf.theory.data_matrices``), never an N x d x d stack;
2. the order-parameter flow: the exact map on M = W W^T of the chosen optimizer
   (GD, minibatch SGD with the training batches, heavy-ball momentum), whose cost does
   not depend on the width n (``nqf.theory.flow``);
3. the Lotka-Volterra reduction in the eigenbasis of C with its defects, growth rates,
   interactions and initial occupations (``nqf.theory.modes``), solved as the optimizer's
   own discrete map restricted to diagonal M (exact when the defects vanish) and as the
   gradient-flow ODE in log variables (``nqf.theory.lotka_volterra``);
4. the vanishing-init limit: step times, order, plateau losses (``nqf.theory.singular_limit``);
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

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, check_width, init_weights
from nqf.theory.data_matrices import DataMatrices, flow_data
from nqf.core.errors import NqfError
from nqf.architectures.expansion import ExpansionReport, label, report_json, theory_gate
from nqf.core.precision import occupation_floor, underflow_remedy
from nqf.theory.flow import FlowResult, gd_map, momentum_map, sgd_map, square_factor, stable_lr_bound
from nqf.theory.lv_maps import lv_map_records, momentum_block
from nqf.theory.moments import ROUTES, MomentDataMatrices, RouteChoice
from nqf.theory.lotka_volterra import LotkaVolterra, fixed_point, logistic_switch_time
from nqf.theory.lv_solve import flow_switch_times
from nqf.theory.modes import ModeBasis, mode_basis
from nqf.theory.scaling import PowerLawFit, fit_power_law
from nqf.theory.singular_limit import SingularLimit, singular_limit
from nqf.core.sampling import training_keys

PREDICT_OPTIMIZERS = ("gd", "sgd", "momentum")
STEPPINGS = ("adaptive", "every")
# Defects below this count as "the data matrices share an eigenbasis" (float64 rounding is ~1e-15).
LV_DEFECT_TOLERANCE = 1e-6
# Record every step up to this horizon; beyond it, log+linear checkpoints.
_EVERY_STEP_LIMIT = 20000
_MIN_MODES_FOR_POWER_LAW = 10
# A mode whose weight share r_k (module docstring) falls below this many rounding units is
# not resolved by the M-flow.
MFLOW_RESOLUTION = 0.25


@dataclass(frozen=True)
class PredictConfig:
    """What a prediction depends on besides architecture and data.

    Attributes:
        width: n, the number of units (the M-flow cost does not depend on it).
        lr: learning rate.
        steps: horizon in optimizer steps.
        sigma0: init scale, W0 ~ N(0, sigma0^2) from ``training_keys(seed)[0]`` (the
            same W0 that ``nqf.train`` uses); ignored when W0 is given to :func:`predict`.
        optimizer: ``gd``, ``sgd`` (minibatches from ``training_keys(seed)[1]``) or ``momentum``.
        beta: heavy-ball momentum (optax.sgd(lr, momentum=beta)).
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
        departure: also evaluate the network along the predicted path and correct the
            switch-on steps by the network's plateau states (``nqf.theory.departure``; off by default:
            it steps the map one step at a time and runs the network).
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

    def __post_init__(self):
        if not isinstance(self.allow_inapplicable, (bool, np.bool_)):
            raise NqfError(f"allow_inapplicable must be True or False, got {self.allow_inapplicable!r}")
        if not isinstance(self.departure, (bool, np.bool_)):
            raise NqfError(f"departure must be True or False, got {self.departure!r}")
        if self.optimizer not in PREDICT_OPTIMIZERS:
            raise NqfError(
                f"the M-flow predicts {', '.join(PREDICT_OPTIMIZERS)} (equivariant optimizers); got {self.optimizer!r}"
            )
        if isinstance(self.width, bool) or int(self.width) != self.width or self.width < 1:
            raise NqfError(f"width must be a positive integer, got {self.width!r}")
        if isinstance(self.steps, bool) or int(self.steps) != self.steps or self.steps < 1:
            raise NqfError(f"steps must be a positive integer, got {self.steps!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise NqfError(f"learning rate must be a positive finite number, got {self.lr!r}")
        if not (math.isfinite(self.sigma0) and self.sigma0 > 0):
            raise NqfError(f"sigma0 must be a positive finite number, got {self.sigma0!r}")
        if self.optimizer == "sgd" and self.batch_size is None:
            raise NqfError("optimizer sgd needs a batch size (--batch)")
        if self.route not in ROUTES:
            raise NqfError(f"unknown data route {self.route!r}; choose one of {', '.join(ROUTES)}")
        if self.stepping not in STEPPINGS:
            raise NqfError(f"unknown stepping {self.stepping!r}; choose one of {', '.join(STEPPINGS)}")
        if self.optimizer == "momentum" and not 0 <= self.beta < 1:
            raise NqfError(f"momentum beta must lie in [0, 1), got {self.beta!r}")


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
        singular: the vanishing-init limit.
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
            (module docstring); below MFLOW_RESOLUTION its M-flow switch step is NaN.
        departure: the network along the predicted path and the corrected switch-on steps
            (``nqf.theory.departure.Departure``) when ``config.departure``, else None.
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

    @property
    def num_growing(self) -> int:
        return self.modes.num_growing

    @property
    def growth_rates(self) -> np.ndarray:
        """r_k = 4 lr c_k of the growing modes."""
        return 4.0 * self.config.lr * self.modes.growth[: self.num_growing]

    def to_json(self) -> dict:
        """The stable JSON form printed by ``nqf predict --json``."""
        g = self.num_growing
        order = [int(k) for k in self.singular.activation_order]
        m0 = self.lv.m0 if self.initial_occupations is None else self.initial_occupations
        resolution = None if self.mflow_resolution is None else _floats(self.mflow_resolution)
        return {
            "config": {**asdict(self.config), "arch": self.arch_name, "arch_options": _jsonable(dict(self.arch_options))},
            "expansion": report_json(self.expansion),
            "mflow": {
                "steps": _ints(self.flow.steps),
                "loss": _floats(self.flow.loss),
                "switch_steps": _floats(self.mflow_switch_steps),
                "resolution": resolution,
            },
            "lv": {
                "steps": _ints(self.lv_steps),  # the LV map's loss curve at the recorded steps
                "loss": _floats(self.lv_loss),
                "applies": bool(self.lv_applies),
                "defect": float(self.defect),
                "init_defect": float(self.init_defect),
                "growth": _floats(self.modes.growth[:g]),
                "growth_rates": _floats(self.growth_rates),
                "interactions": [_floats(row) for row in self.modes.interactions[:g, :g]],
                "initial_occupations": _floats(m0[:g]),
                "fixed_point": _floats(2.0 * self.thresholds),
                "switch_steps": _floats(self.lv_switch_steps),
                "continuous_switch_steps": _floats(self.lv_continuous_switch_steps),
                "closed_form_switch_steps": _floats(self.closed_form_switch_steps),
                "plateau_losses": _floats(self.lv_plateau_losses),
            },
            "singular_limit": {
                "eps": _floats([self.singular.eps])[0] if np.any(m0[:g] > 0) else None,  # no mode there: no eps
                "step_times": _floats(self.singular.steps()),
                "rescaled_times": _floats(self.singular.step_times),
                "order": order,
                "plateau_losses": _floats(self.singular.plateau_losses),
                "suppressed": [int(k) for k in self.singular.suppressed],
                "switch_steps": _floats(self.singular_switch_steps),
            },
            "power_law": None
            if self.power_law is None
            else {
                "exponent": float(self.power_law.exponent),
                "ci": _floats(self.power_law.ci),
                "window": _floats(self.power_law.window),
                "is_power_law": bool(self.power_law.is_power_law),
                "reason": self.power_law.reason,
            },
            "stable_lr": float(self.stable_lr),
            "route": self.route,
            "route_reason": self.route_reason,
            "flow_stats": _int_tree(self.flow_stats),
            "notes": list(self.notes),
            "departure": None if self.departure is None else self.departure.to_json(),
        }


def _floats(a) -> list:
    """JSON-safe floats: NaN/inf become None."""
    out = []
    for v in np.asarray(a, dtype=np.float64).ravel():
        out.append(float(v) if math.isfinite(v) else None)
    return out


def _jsonable(obj):
    """Options as JSON: tuples become lists, numpy scalars plain numbers, non-finite floats None."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, (str, int)) or obj is None:
        return obj
    return repr(obj)


def _int_tree(tree):
    """A dict of (dicts of) counts with plain ints (numpy integers are not JSON)."""
    return {k: _int_tree(v) if isinstance(v, dict) else int(v) for k, v in tree.items()}


def _ints(a) -> list:
    return [int(round(float(v))) for v in np.asarray(a).ravel()]


def first_crossing(steps, occupations, thresholds) -> np.ndarray:
    """First recorded step at which occupations[:, k] >= thresholds[k], (g,); NaN if never.

    steps: (R,), occupations: (R, g). With every step recorded this is exact; otherwise it
    is linearly interpolated between the two checkpoints around the crossing.
    """
    steps = np.asarray(steps, dtype=np.float64)
    occ = np.asarray(occupations, dtype=np.float64)
    out = np.full(occ.shape[1], np.nan)
    for k, thr in enumerate(np.asarray(thresholds, dtype=np.float64)):
        if not (thr > 0):
            continue
        hit = np.flatnonzero(occ[:, k] >= thr)
        if hit.size == 0:
            continue
        i = hit[0]
        if i == 0 or steps[i] - steps[i - 1] <= 1:
            out[k] = steps[i]
        else:
            a, b = occ[i - 1, k], occ[i, k]
            out[k] = steps[i - 1] + (thr - a) / (b - a) * (steps[i] - steps[i - 1])
    return out


def momentum_occupations(system: LotkaVolterra, beta: float, num_steps: int) -> np.ndarray:
    r"""Heavy-ball momentum (optax.sgd(lr, momentum=beta)) on a diagonal M, exactly.

    With G = diag(g), g = K m - c, the closed state (M, P = W V^T, Q = V V^T) of
    ``nqf.theory.flow.momentum_map`` stays diagonal: per mode

        R = 2 m g + beta p,   q+ = 4 g^2 m + 4 beta g p + beta^2 q,
        m+ = m - 2 lr R + lr^2 q+,   p+ = R - lr q+.

    Returns (num_steps + 1, modes) occupations.
    """
    m0 = jnp.asarray(system.m0)
    zero = jnp.zeros_like(m0)
    ms = momentum_block(
        jnp.asarray(system.c), jnp.asarray(system.K), jnp.asarray(system.lr), jnp.asarray(beta), (m0, zero, zero),
        int(num_steps),
    )[0]
    return np.concatenate([np.asarray(m0)[None], np.asarray(ms)], axis=0)


def _record_steps(steps: int) -> np.ndarray:
    if steps <= _EVERY_STEP_LIMIT:
        return np.arange(steps + 1)
    log = np.rint(np.geomspace(1, steps, 1000))
    lin = np.rint(np.linspace(0, steps, 1000))
    return np.unique(np.concatenate([[0, steps], log, lin]).astype(np.int64))


def predict(
    arch: Architecture,
    X,
    Y,
    config: PredictConfig,
    W0=None,
    data: DataMatrices | None = None,
    route_choice: RouteChoice | None = None,
) -> Prediction:
    """Predict the training of ``arch`` on (X (N, *input_shape), Y (N, K)) under ``config``.

    W0 (d, n) overrides the random init (its columns are units, flattened in
    ``arch.blocks`` order). ``data`` may pass precomputed data matrices of (X, Y) (then X
    and Y are not used), with ``route_choice`` from ``nqf.theory.data_matrices.flow_data`` to report it.

    Raises NqfError for bad inputs (shapes, non-finite values, width != experts for a
    mixture of experts), for a learning rate above the linear-stability bound, for an
    init that underflows the working dtype, and (TheoryDoesNotApply) for a unit the
    expansion check rejects unless ``config.allow_inapplicable`` (module docstring).
    """
    check_width(arch, config.width)
    expansion = theory_gate(arch, config.allow_inapplicable)
    dtype = jnp.result_type(float)
    if data is None:
        data, choice = flow_data(
            arch, X, Y, loss=config.loss, route=config.route, minibatches=config.optimizer == "sgd", dtype=dtype
        )
    elif route_choice is not None:
        choice = route_choice
    elif isinstance(data, MomentDataMatrices):
        choice = RouteChoice("moments", "moments route (data matrices given)")
    else:
        choice = RouteChoice("samples", "per-sample route (data matrices given)")
    notes: list[str] = []
    if not expansion.applies:
        notes.append(
            f"the theory does not apply to {label(arch)}: {expansion.reason}; run anyway (allow_inapplicable): "
            "every number here is the quadratic form's (autodiff's A(x) at w = 0), not the network's"
        )
    given_W0 = W0 is not None
    if W0 is None:
        W0 = init_weights(arch, training_keys(config.seed)[0], config.width, config.sigma0, dtype)
    else:
        W0 = np.asarray(W0)
        if W0.ndim != 2 or W0.shape[0] != arch.dim:
            raise NqfError(f"{arch.name}: W0 must have shape (d={arch.dim}, n), got {W0.shape}")
        if not np.all(np.isfinite(W0)):
            raise NqfError("W0 contains non-finite values")
        if W0.shape[1] != config.width:
            raise NqfError(f"W0 has {W0.shape[1]} units (columns) but the width is {config.width}")
        check_width(arch, W0.shape[1])
        W0 = jnp.asarray(W0, dtype=dtype)
    M0 = W0 @ W0.T
    factor = square_factor(W0=np.asarray(W0))

    why = "" if expansion.applies else f" (the theory does not apply to {arch.name}: {expansion.reason})"
    try:
        modes = mode_basis(data)
    except NqfError as err:  # e.g. A = 0 for relu (autodiff's relu''(0) = 0): say why it is meaningless
        if expansion.applies:
            raise
        raise NqfError(f"{err}{why}") from None
    g = modes.num_growing
    if g == 0:
        raise NqfError(f"no mode grows: C = E[y A(x)] has no positive eigenvalue for these data{why}")
    log_m0 = log_occupations(modes.basis, W0)
    check_init_scale(log_m0[:g], dtype, config, given_W0)
    never = np.isneginf(log_m0)  # no initial component along q_k: the mode stays at 0
    if never[:g].any():
        missing = ", ".join(str(k + 1) for k in np.flatnonzero(never[:g]))
        which = "every growing mode" if never[:g].all() else f"mode(s) {missing}"
        notes.append(
            f"W0 has no component along {which} (m_k(0) = 0 exactly): such a mode never switches on, in every source"
        )
    # from W0 itself, not from M0 = W0 W0^T (whose rounding, ~u |M0|, would hide a tiny m_k(0))
    m0 = np.exp(log_m0)
    loss0 = float(data.loss(jnp.zeros_like(M0)))
    lv = modes.lotka_volterra(m0, config.lr, loss0)
    m_star = fixed_point(lv)
    thresholds = 0.5 * m_star[:g]
    defect, init_defect = modes.defect, modes.init_defect(M0)
    lv_applies = config.loss == "squared" and defect <= LV_DEFECT_TOLERANCE
    if config.loss != "squared":
        notes.append("cross-entropy loss: G(M) is not affine in M, the LV reduction is only its linearisation")
    elif not lv_applies:
        notes.append(
            f"the data matrices do not share an eigenbasis (defect {defect:.2e}): predictions come from the M-flow; "
            "LV numbers are an approximation in the eigenbasis of C"
        )
    if init_defect > 1e-3:
        notes.append(f"M(0) is not diagonal in the mode basis (init defect {init_defect:.2e}): LV uses its diagonal")

    stable = stable_lr_bound(
        data,
        points=(modes.basis * m_star) @ modes.basis.T,
        beta=config.beta if config.optimizer == "momentum" else 0.0,
    )
    if config.check_lr and config.lr >= stable.bound:
        raise NqfError(
            f"learning rate {config.lr:g} is unstable for these data: GD on M is linearly stable only for lr < {stable.bound:.4g}"
        )

    record = _record_steps(config.steps)
    basis = jnp.asarray(modes.basis[:, :g], dtype=dtype)
    if config.optimizer == "gd":
        flow = gd_map(
            data, None, config.lr, config.steps, checkpoints=record, basis=basis, factor=factor, stepping=config.stepping,
            jump_from=thresholds,
        )
    elif config.optimizer == "sgd":
        key = training_keys(config.seed)[1]
        flow = sgd_map(
            data, None, config.lr, config.steps, config.batch_size, key=key, checkpoints=record, basis=basis, factor=factor
        )
        notes.append("SGD: the M-flow replays the training minibatches; the LV numbers are its full-batch (GD) mean")
    else:
        flow = momentum_map(
            data, None, config.lr, config.beta, config.steps, checkpoints=record, basis=basis, factor=factor,
            stepping=config.stepping, jump_from=thresholds,
        )
    if not np.all(np.isfinite(np.asarray(flow.loss))):
        raise NqfError(
            f"the M-flow diverged (non-finite loss) although lr {config.lr:g} is below the linear-stability bound "
            f"{stable.bound:.4g} at M = 0 and at the fixed point: lower the learning rate (an intermediate plateau may be less stable)"
        )

    flow_stats = dict(flow.stats or {})
    # the LV map at the M-flow's recorded steps; its switch-ons exact to the step
    lv_optimizer = "momentum" if config.optimizer == "momentum" else "gd"
    horizon = float(config.steps)
    if not never.any():
        lv_occ, lv_switch, lv_stats = lv_map_records(
            lv, config.steps, record, thresholds, optimizer=lv_optimizer, beta=config.beta
        )
        continuous = flow_switch_times(lv, horizon, m_star)[:g]
    else:  # the LV of the modes that are there; the others stay at m_k = 0
        lv_occ, lv_switch, continuous = np.zeros((record.size, lv.num_modes)), np.full(g, np.nan), np.full(g, np.nan)
        lv_stats = {"stepped": 0, "extrapolated": 0}
        live = np.flatnonzero(~never)
        live_g = live[live < g]
        if live_g.size:
            sub = _subsystem(lv, live)
            occ, switch, lv_stats = lv_map_records(
                sub, config.steps, record, thresholds[live_g], optimizer=lv_optimizer, beta=config.beta
            )
            lv_occ[:, live], lv_switch[live_g] = occ, switch
            continuous[live_g] = flow_switch_times(sub, horizon, m_star[live])[: live_g.size]
    flow_stats["lv_map"] = lv_stats
    lv_steps = record
    lv_loss = lv.loss(lv_occ)
    mflow_switch = first_crossing(flow.steps, flow.occupations, thresholds)
    resolution = mflow_resolution(record, lv_occ, lv_switch, g, dtype)
    unresolved = np.flatnonzero((resolution < MFLOW_RESOLUTION) & ~never[:g])
    if unresolved.size:
        listed = ", ".join(f"{k + 1} (at {mflow_switch[k]:g})" for k in unresolved)
        mflow_switch = mflow_switch.copy()
        mflow_switch[unresolved] = np.nan
        notes.append(
            f"the M-flow cannot resolve mode(s) {listed}: before switching on, the mode's weight share "
            f"sqrt(m_k / tr M) falls to {resolution[unresolved].min():.2g} u ({np.dtype(dtype).name} rounding unit u), "
            f"below {MFLOW_RESOLUTION:g} u, so rounding of the leading modes seeds it and it switches early; its M-flow "
            "switch step is left out (null); the LV map (log occupations) and the singular limit stand"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        diag_k = np.diag(modes.interactions)[:g]
        closed = np.asarray(logistic_switch_time(lv.c[:g], diag_k, lv.m0[:g], config.lr), dtype=np.float64)
    closed[never[:g]] = np.nan
    limit = singular_limit(lv, never=never)
    singular_switch = limit.switch_steps()[:g]
    plateau = np.full(g, np.nan)
    for step_index, mode in enumerate(limit.activation_order):
        if mode < g and np.isnan(plateau[mode]):
            plateau[mode] = limit.plateau_losses[step_index]

    power_law = None
    if g >= _MIN_MODES_FOR_POWER_LAW:
        loss_inf = float(lv.loss(m_star))
        try:
            power_law = fit_power_law(np.asarray(flow.steps), np.asarray(flow.loss), loss_inf=loss_inf)
        except NqfError as err:
            notes.append(f"power-law fit not possible: {err}")

    prediction = Prediction(
        config=config,
        modes=modes,
        lv_applies=lv_applies,
        defect=defect,
        init_defect=init_defect,
        flow=flow,
        thresholds=thresholds,
        mflow_switch_steps=mflow_switch,
        lv=lv,
        lv_steps=lv_steps,
        lv_loss=lv_loss,
        lv_switch_steps=lv_switch,
        lv_continuous_switch_steps=continuous,
        closed_form_switch_steps=closed,
        lv_plateau_losses=plateau,
        singular=limit,
        singular_switch_steps=singular_switch,
        stable_lr=float(stable.bound),
        power_law=power_law,
        notes=tuple(notes),
        route=choice.route,
        route_reason=choice.reason,
        flow_stats=flow_stats,
        expansion=expansion,
        arch_name=arch.name,
        arch_options=tuple(arch.options),
        initial_occupations=np.exp(log_m0),
        mflow_resolution=resolution,
    )
    if config.departure:
        from nqf.theory.departure import departure

        if X is None or Y is None:
            raise NqfError("departure needs the samples X, Y (the network is evaluated on them)")
        found = departure(arch, X, Y, prediction, W0=W0, data=data)
        prediction = replace(prediction, departure=found, notes=prediction.notes + found.notes)
    return prediction


def _subsystem(system: LotkaVolterra, idx: np.ndarray) -> LotkaVolterra:
    """The LV system of the modes ``idx`` (sorted); exact when the others stay at m = 0."""
    K = system.K[idx] if system.K.ndim == 1 else system.K[np.ix_(idx, idx)]
    return LotkaVolterra(system.c[idx], K, system.m0[idx], system.lr, system.loss0)


def log_occupations(basis, W0) -> np.ndarray:
    """ln m_k(0) = ln |W0^T q_k|^2 for every column q_k of basis (d, m), without underflow: (m,).

    Computed in float64 as 2 ln s + ln |(W0 / s)^T q_k|^2 with s = max |W0_ij|, so that
    W0 W0^T may underflow (sigma0 = 1e-300) and m_k(0) is still known; -inf where the
    component is exactly zero (W0 = 0, or W0 orthogonal to q_k).
    """
    W = np.asarray(W0, dtype=np.float64)
    Q = np.asarray(basis, dtype=np.float64)
    scale = float(np.max(np.abs(W))) if W.size else 0.0
    if scale == 0.0:
        return np.full(Q.shape[1], -np.inf)
    proj = Q.T @ (W / scale)
    with np.errstate(divide="ignore"):
        return 2.0 * math.log(scale) + np.log(np.sum(proj * proj, axis=1))


def _exp_text(log_value: float) -> str:
    """e^log_value as 'a.bce-N', also far outside float64's range."""
    exponent10 = log_value / math.log(10.0)
    e = math.floor(exponent10)
    return f"{10 ** (exponent10 - e):.2g}e{e:+d}".replace("e+", "e")


def check_init_scale(log_m0, dtype, config: PredictConfig, given_W0: bool) -> None:
    """Refuse an init whose smallest growing-mode occupation underflows ``dtype`` (module docstring).

    log_m0: (g,) ln m_k(0) of the growing modes (-inf: exactly zero, allowed: never switches).
    The floor is ``occupation_floor(dtype)`` = tiny / u. The message gives m_k(0), n sigma0^2,
    the floor, and the smallest sigma0 that passes: sigma0 sqrt(floor / min_k m_k(0)) (m_k(0)
    scales with sigma0^2 for a fixed draw).
    """
    log_m0 = np.asarray(log_m0, dtype=np.float64)
    present = np.isfinite(log_m0)
    if not present.any():
        return
    floor = occupation_floor(dtype)
    k = int(np.flatnonzero(present)[np.argmin(log_m0[present])])
    low = float(log_m0[k])
    if low >= math.log(floor):
        return
    name = np.dtype(dtype).name
    info = np.finfo(np.dtype(dtype))
    factor = math.exp(0.5 * (math.log(floor) - low))
    if given_W0:
        subject = "the given W0"
        remedy = underflow_remedy(dtype, None).replace("scale W0 up", f"scale W0 up by at least {factor:.2g}")
    else:
        s0 = float(config.sigma0)
        n_s2 = _exp_text(math.log(config.width) + 2.0 * math.log(s0))
        subject = f"sigma0 = {s0:g} (n sigma0^2 = {config.width} * {s0:g}^2 = {n_s2})"
        remedy = underflow_remedy(dtype, s0 * factor)
    raise NqfError(
        f"{subject}: the initial occupation of mode {k + 1}, m_k(0) = |W0^T q_k|^2 = {_exp_text(low)}, underflows "
        f"{name} (smallest normal {info.tiny:.2g}; the M-flow and the LV need m_k(0) >= tiny / u = {floor:.2g}); {remedy}"
    )


def mflow_resolution(steps, occupations, switch, g: int, dtype) -> np.ndarray:
    """r_k / u for the g growing modes: r_k = min over t <= t_k of sqrt(m_k(t) / sum_j m_j(t)).

    steps (R,), occupations (R, m) of the LV map (log occupations: no rounding floor),
    switch (g,) the LV switch steps (NaN: the horizon), u the unit roundoff of ``dtype``.
    """
    steps = np.asarray(steps, dtype=np.float64)
    occ = np.asarray(occupations, dtype=np.float64)
    total = occ.sum(axis=1)
    u = float(np.finfo(np.dtype(dtype)).eps)
    switch = np.asarray(switch, dtype=np.float64)
    until = np.where(np.isfinite(switch), switch, steps[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        share = occ[:, :g] / total[:, None]
    share = np.where((steps[:, None] <= until[None, :]) & np.isfinite(share), share, np.inf)
    return np.sqrt(share.min(axis=0)) / u
