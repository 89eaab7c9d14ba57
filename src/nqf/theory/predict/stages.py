"""The stages of :func:`nqf.theory.predict.pipeline.predict`, in pipeline order, and the helpers they read
switch-on steps with. Each stage takes what the ones before it produced and appends what a
reader needs to know to ``notes`` (the prediction's notes, in order)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, check_width
from nqf.architectures.expansion import ExpansionReport, label, theory_gate
from nqf.core.errors import NqfError
from nqf.core.measure import group_label, mode_groups, switch_steps
from nqf.core.programs import to_device
from nqf.core.sampling import training_keys
from nqf.optimizers import closed_optimizer, optimizer_record
from nqf.theory.data_matrices.build import flow_data
from nqf.theory.data_matrices.moments import HostMoments, MomentDataMatrices, RouteChoice
from nqf.theory.data_matrices.protocol import AbstractDataMatrices, AbstractSampleDataMatrices
from nqf.theory.flow.base import FlowResult
from nqf.theory.flow.host import HOST_BUDGET_S, HOST_MAX_STEPS, host_map, host_seconds
from nqf.theory.flow.maps import optimizer_map, sgd_map, square_factor
from nqf.theory.flow.stability import LearningRateBound, stable_lr_bound
from nqf.theory.lotka_volterra.maps import lv_map_records
from nqf.theory.lotka_volterra.modes import ModeBasis, mode_basis
from nqf.theory.lotka_volterra.solve import flow_switch_times
from nqf.theory.lotka_volterra.system import LotkaVolterra, fixed_point, logistic_switch_time
from nqf.theory.predict.init import check_init_scale, log_occupations
from nqf.theory.predict.result import PredictConfig, Prediction
from nqf.theory.scaling import PowerLawFit, fit_power_law
from nqf.theory.singular_limit import SingularLimit, limit_eps, no_limit, singular_limit

# Defects below this count as "the data matrices share an eigenbasis" (float64 rounding is ~1e-15).
LV_DEFECT_TOLERANCE = 1e-6
# Record every step up to this horizon; beyond it, log+linear checkpoints.
_EVERY_STEP_LIMIT = 20000
MIN_MODES_FOR_POWER_LAW = 10
# A mode whose weight share r_k (``nqf.theory.predict.pipeline``'s docstring) falls below this many
# rounding units is not resolved by the M-flow.
MFLOW_RESOLUTION = 0.25


def first_crossing(steps, occupations, thresholds) -> np.ndarray:
    """First recorded step at which occupations[:, k] >= thresholds[k], (g,); NaN if never, and
    where thresholds[k] is not positive (m_k* = 0: no switch-on).

    steps: (R,), occupations: (R, g). With every step recorded this is exact; otherwise it
    is linearly interpolated between the two checkpoints around the crossing
    (``nqf.core.measure.switch_steps``).
    """
    thresholds = np.asarray(thresholds, dtype=np.float64)
    return np.where(thresholds > 0, switch_steps(steps, occupations, thresholds), np.nan)


def record_steps(steps: int) -> np.ndarray:
    """The steps the M-flow and the LV map record: every one up to _EVERY_STEP_LIMIT, else log + linear."""
    if steps <= _EVERY_STEP_LIMIT:
        return np.arange(steps + 1)
    log = np.rint(np.geomspace(1, steps, 1000))
    lin = np.rint(np.linspace(0, steps, 1000))
    return np.unique(np.concatenate([[0, steps], log, lin]).astype(np.int64))


@jax.jit
def _loss_at_zero(data: AbstractDataMatrices):
    """L(M = 0) as one compiled program (eager, the packing compiles op by op)."""
    return data.loss(jnp.zeros((data.dim, data.dim), dtype=data.dtype))


def _subsystem(system: LotkaVolterra, idx: np.ndarray) -> LotkaVolterra:
    """The LV system of the modes ``idx`` (sorted); exact when the others stay at m = 0."""
    K = system.K[idx] if system.K.ndim == 1 else system.K[np.ix_(idx, idx)]
    return LotkaVolterra(system.c[idx], K, system.m0[idx], system.lr, system.loss0)


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


# -- the stages, in pipeline order ------------------------------------------------------------


def gate(arch: Architecture, config: PredictConfig) -> ExpansionReport:
    """The width check and the theory gate: the expansion check's verdict on the unit.

    Raises NqfError for a width the architecture cannot take and (TheoryDoesNotApply) for a
    unit the expansion check rejects, unless ``config.allow_inapplicable``.
    """
    check_width(arch, config.width)
    return theory_gate(arch, config.allow_inapplicable)


def data_route(arch: Architecture, X, Y, config: PredictConfig, data: AbstractDataMatrices | None, route_choice, dtype):
    """(data matrices, RouteChoice): built from (X, Y) by the configured route, or ``data`` as
    given (with ``route_choice`` if given, else the route its type implies)."""
    if data is None:
        return flow_data(
            arch,
            X,
            Y,
            loss=config.loss,
            route=config.route,
            minibatches=optimizer_record(config.optimizer).minibatches,
            dtype=dtype,
        )
    if route_choice is not None:
        return data, route_choice
    if isinstance(data, MomentDataMatrices):
        return data, RouteChoice("moments", "moments route (data matrices given)")
    return data, RouteChoice("samples", "per-sample route (data matrices given)")


def engine_of(data: AbstractDataMatrices, config: PredictConfig) -> tuple[str, str]:
    """(engine, reason): ``numpy`` for the stages after the data matrices when the moments
    route, a full-batch optimizer, at most HOST_MAX_STEPS steps and an estimated numpy time below
    HOST_BUDGET_S (``nqf.theory.flow.host``), and ``config.engine`` allows it; else ``compiled``.

    Raises NqfError when ``config.engine == "numpy"`` and it does not apply.
    """
    if config.engine == "compiled":
        return "compiled", "compiled (asked for)"
    blockers = []
    if not isinstance(data, MomentDataMatrices):
        blockers.append("the numpy engine reads the data through their moments, not the per-sample route")
    if not optimizer_record(config.optimizer).deterministic_flow:
        blockers.append(f"{config.optimizer} replays minibatches (per-sample route)")
    if config.steps > min(HOST_MAX_STEPS, _EVERY_STEP_LIMIT):  # the numpy map records every step
        blockers.append(f"{config.steps} steps, above {HOST_MAX_STEPS} (the compiled map jumps long horizons)")
    elif isinstance(data, MomentDataMatrices) and host_seconds(data.size, config.steps) > HOST_BUDGET_S:
        estimate = host_seconds(data.size, config.steps)
        blockers.append(f"S is {data.size} x {data.size}: {config.steps} numpy steps would take ~{estimate:.2g} s")
    if blockers or not isinstance(data, MomentDataMatrices):  # (the second is among the blockers)
        if config.engine == "numpy":
            raise NqfError(f"the numpy engine does not apply here: {'; '.join(blockers)}")
        return "compiled", f"compiled: {'; '.join(blockers)}"
    why = "asked for" if config.engine == "numpy" else "nothing to compile"
    estimate = host_seconds(data.size, config.steps)
    return "numpy", f"numpy ({why}): S is {data.size} x {data.size}, {config.steps} steps in ~{estimate:.2g} s"


def inapplicable_note(arch: Architecture, expansion: ExpansionReport, notes: list[str]) -> None:
    """Append the note that the theory does not apply to the unit, when it does not."""
    if not expansion.applies:
        notes.append(
            f"the theory does not apply to {label(arch)}: {expansion.reason}; run anyway (allow_inapplicable): "
            "every number here is the quadratic form's (autodiff's A(x) at w = 0), not the network's"
        )


def modes_of(data: AbstractDataMatrices, arch: Architecture, expansion: ExpansionReport) -> ModeBasis:
    """The mode basis of the data matrices (eigenvectors of C, growing modes first).

    Raises NqfError when no mode grows, or when the basis cannot be built (with the
    expansion's verdict appended when the theory does not apply to the unit).
    """
    why = "" if expansion.applies else f" (the theory does not apply to {arch.name}: {expansion.reason})"
    try:
        modes = mode_basis(data)
    except NqfError as err:  # e.g. A = 0 for relu (autodiff's relu''(0) = 0): say why it is meaningless
        if expansion.applies:
            raise
        raise NqfError(f"{err}{why}") from None
    if modes.num_growing == 0:
        raise NqfError(f"no mode grows: C = E[y A(x)] has no positive eigenvalue for these data{why}")
    return modes


def network_plan(arch: Architecture, X, Y, config: PredictConfig, expansion, record, growing: int, points: int = 1):
    """The network's own prediction as far as it goes before the init: a FlowPlan (its particle
    flow checked and its program compiling in the background,
    ``nqf.theory.departure.mean_field.plan_flow``), the string "exact" for an exactly quadratic
    unit (the M-flow's readings, nothing to compute), or the reason it is not computed. Samples X, Y
    (N, ...) as given to ``predict``; ``record`` the record steps (R,); ``growing`` the number of
    growing modes; ``points`` the flows it will run (``network_budget`` holds for all of them together).
    ``predict`` and ``predict_grid`` plan it once the modes are known, so that its program compiles
    while their quadratic stages run."""
    from nqf.theory.data_matrices.build import checked_samples
    from nqf.theory.departure.mean_field import is_exact, plan_flow

    if is_exact(arch, expansion):
        return "exact"
    if X is None or Y is None:
        return "it needs the samples X, Y (only data matrices were given)"
    Xc, targets, _ = checked_samples(arch, X, Y, config.loss, jnp.result_type(float))
    plan, why = plan_flow(arch, Xc, targets, config.width, config, record, growing, points=points)
    return why if plan is None else plan


def network_start(network, modes: ModeBasis, W0, lr: float | None = None):
    """``network`` (what :func:`network_plan` returned) with its particle flow started in the
    background from the init W0 (d, n) along the growing modes, at ``lr`` (default the config's)
    (``FlowPlan.start``: a FlowRun, finished by :func:`network_finish`); anything
    else as it is. ``predict`` starts it once the learning rate has passed the stability check,
    before the M-flow and Lotka-Volterra stages; ``predict_grid`` at every point, before its program."""
    if network is None or isinstance(network, str):
        return network
    return network.start(W0, np.asarray(modes.full_basis)[:, : modes.num_growing], lr)


def network_finish(network, arch: Architecture, config: PredictConfig, steps, loss, occupations, switch, thresholds):
    """The network's own prediction from what :func:`network_start` returned (a FlowRun, finished
    here at the thresholds (g,)), or the note of why it is not computed. An exactly quadratic
    unit's ("exact") is the M-flow's (``mean_field.quadratic_network``): its record steps (R,),
    loss (R,), occupations (R, g) (None where not kept: a grid point) and switch steps (g,)."""
    from nqf.theory.departure.mean_field import not_computed_note, quadratic_network

    if network == "exact":
        g = np.size(thresholds)
        kept = np.full((np.size(steps), g), np.nan) if occupations is None else np.asarray(occupations)[:, :g]
        return quadratic_network(np.asarray(steps), loss, kept, switch)
    found = network if isinstance(network, str) else network.finish(thresholds)
    return not_computed_note(arch, found, config.network_method) if isinstance(found, str) else found


def with_network(prediction: Prediction, found) -> Prediction:
    """``prediction`` with the network's own prediction (``found``: a NetworkFlow, its notes
    appended) or with the note of why it is not computed (``found``: that note)."""
    if isinstance(found, str):
        return replace(prediction, notes=prediction.notes + (found,))
    return replace(prediction, network=found, notes=prediction.notes + found.notes)


def initial_occupations(modes: ModeBasis, W0, dtype, config: PredictConfig, given_W0: bool, notes: list[str]):
    """(ln m_k(0) (m,), never (m,) bool: the modes with m_k(0) = 0 exactly) from W0 (d, n).

    Raises NqfError when a growing mode's m_k(0) underflows ``dtype`` (``check_init_scale``).
    """
    g = modes.num_growing
    log_m0 = log_occupations(modes.basis, W0)
    check_init_scale(log_m0[:g], dtype, config, given_W0)
    never = np.isneginf(log_m0)  # no initial component along q_k: the mode stays at 0
    if never[:g].any():
        missing = ", ".join(str(k + 1) for k in np.flatnonzero(never[:g]))
        which = "every growing mode" if never[:g].all() else f"mode(s) {missing}"
        notes.append(
            f"W0 has no component along {which} (m_k(0) = 0 exactly): such a mode never switches on, in every source"
        )
    return log_m0, never


@dataclass(frozen=True, eq=False)
class LVStage:
    """The Lotka-Volterra reduction of one prediction (docs/theory.md section 3).

    lv: the system; m_star (m,): its fixed point; thresholds (g,): m_k*/2, the switch-on
    thresholds; defect, init_defect: how far the data matrices and M(0) are from diagonal in
    the mode basis; applies: squared loss and defect <= LV_DEFECT_TOLERANCE.
    """

    lv: LotkaVolterra
    m_star: np.ndarray
    thresholds: np.ndarray
    defect: float
    init_defect: float
    applies: bool


def lv_system(
    modes: ModeBasis, data: AbstractDataMatrices, W0, log_m0, config: PredictConfig, notes: list[str]
) -> LVStage:
    """The LV system in the mode basis from the data matrices, W0 (d, n) and ln m_k(0) (m,)."""
    g = modes.num_growing
    W0 = np.asarray(W0)
    M0 = W0 @ W0.T
    # from W0 itself, not from M0 = W0 W0^T (whose rounding, ~u |M0|, would hide a tiny m_k(0))
    m0 = np.exp(log_m0)
    host = isinstance(data, HostMoments)
    loss0 = float(data.loss(np.zeros((data.dim, data.dim), dtype=data.dtype)) if host else _loss_at_zero(data))
    lv = modes.lotka_volterra(m0, config.lr, loss0)
    m_star = fixed_point(lv)
    thresholds = 0.5 * m_star[:g]
    defect, init_defect = modes.defect, modes.init_defect(M0)
    applies = config.loss == "squared" and defect <= LV_DEFECT_TOLERANCE
    if config.loss != "squared":
        notes.append("cross-entropy loss: G(M) is not affine in M, the LV reduction is only its linearisation")
    elif not applies:
        notes.append(
            f"the data matrices do not share an eigenbasis (defect {defect:.2e}): predictions come from the M-flow; "
            "LV numbers are an approximation in the eigenbasis of C"
        )
    note = init_defect_note(init_defect)
    if note:
        notes.append(note)
    return LVStage(lv, m_star, thresholds, defect, init_defect, applies)


def init_defect_note(init_defect: float) -> str | None:
    """The note on an M(0) that is not diagonal in the mode basis (init defect above 1e-3), else None."""
    if init_defect > 1e-3:
        return f"M(0) is not diagonal in the mode basis (init defect {init_defect:.2e}): LV uses its diagonal"
    return None


def stability(data: AbstractDataMatrices, modes: ModeBasis, m_star, config: PredictConfig) -> LearningRateBound:
    """The linear-stability bound at M = 0 and at the LV fixed point; NqfError if ``config.lr`` is
    at or above it (unless ``config.check_lr`` is off)."""
    judged = closed_optimizer(closed_optimizer(config.optimizer).mean_flow)  # SGD by the full-batch bound
    stable = stable_lr_bound(
        data,
        points=(modes.basis * m_star) @ modes.basis.T,
        beta=judged.beta_of(config.beta),
        optimizer=judged.name,
    )
    if config.check_lr and config.lr >= stable.bound:
        raise NqfError(
            f"learning rate {config.lr:g} is unstable for these data: {judged.label} on M is linearly stable only "
            f"for lr < {stable.bound:.4g}"
        )
    return stable


def mflow(
    data: AbstractDataMatrices,
    config: PredictConfig,
    modes: ModeBasis,
    W0,
    dtype,
    record,
    thresholds,
    stable: LearningRateBound,
    notes: list[str],
) -> FlowResult:
    """The optimizer's exact map on M from W0 (d, n), observed at the steps ``record`` in the
    growing modes; NqfError if it diverges (``stable`` gives the bound for the message)."""
    factor = square_factor(W0=np.asarray(W0))
    if isinstance(data, HostMoments):  # engine "numpy": every step, nothing compiled
        flow = host_map(
            data,
            closed_optimizer(config.optimizer),
            config.lr,
            config.steps,
            factor,
            modes.basis[:, : modes.num_growing],
            config.beta,
        )
        _check_finite(flow, config, stable)
        return flow
    basis = to_device(modes.basis[:, : modes.num_growing], dtype=dtype)
    optimizer = closed_optimizer(config.optimizer)  # its map on M: replaying minibatches, or of M alone
    if optimizer.minibatches:
        assert config.batch_size is not None  # PredictConfig requires it for sgd
        if not isinstance(data, AbstractSampleDataMatrices):
            raise NqfError(
                f"optimizer {optimizer.name} replays minibatches: it needs sample data matrices, "
                f"got {type(data).__name__}"
            )
        key = training_keys(config.seed)[1]
        flow = sgd_map(
            data,
            None,
            config.lr,
            config.steps,
            config.batch_size,
            key=key,
            checkpoints=record,
            basis=basis,
            factor=factor,
        )
        notes.append(
            f"{optimizer.label}: the M-flow replays the training minibatches; the LV numbers are its full-batch "
            f"({optimizer_record(optimizer.mean_flow).label}) mean"
        )
    else:
        flow = optimizer_map(
            data,
            None,
            config.lr,
            config.steps,
            optimizer,
            beta=config.beta,
            checkpoints=record,
            basis=basis,
            factor=factor,
            stepping=config.stepping,
            jump_from=thresholds,
            jump_groups=mode_groups(np.asarray(modes.growth)[: len(thresholds)]),
        )
    _check_finite(flow, config, stable)
    return flow


def _check_finite(flow: FlowResult, config: PredictConfig, stable: LearningRateBound) -> None:
    if not np.all(np.isfinite(np.asarray(flow.loss))):
        raise NqfError(
            f"the M-flow diverged (non-finite loss) although lr {config.lr:g} is below the linear-stability bound "
            f"{stable.bound:.4g} at M = 0 and at the fixed point: lower the learning rate (an intermediate plateau "
            "may be less stable)"
        )


def lv_map(system: LVStage, config: PredictConfig, record, never, g: int, engine: str = "compiled"):
    """The LV map at the M-flow's recorded steps (its switch-ons exact to the step) and the LV
    gradient flow's switch times.

    Returns (occupations (R, m), switch steps (g,), continuous switch times (g,), stats). Modes
    in ``never`` stay at m_k = 0: the LV of the others is solved alone (NaN for them).
    """
    lv, m_star, thresholds = system.lv, system.m_star, system.thresholds
    lv_optimizer = closed_optimizer(config.optimizer).mean_flow  # predict's optimizers all close on M
    horizon = float(config.steps)
    if not never.any():
        lv_occ, lv_switch, lv_stats = lv_map_records(
            lv, config.steps, record, thresholds, optimizer=lv_optimizer, beta=config.beta, engine=engine
        )
        continuous = flow_switch_times(lv, horizon, m_star)[:g]
        return lv_occ, lv_switch, continuous, lv_stats
    # the LV of the modes that are there; the others stay at m_k = 0
    lv_occ, lv_switch, continuous = np.zeros((record.size, lv.num_modes)), np.full(g, np.nan), np.full(g, np.nan)
    lv_stats = {"stepped": 0, "extrapolated": 0}
    live = np.flatnonzero(~never)
    live_g = live[live < g]
    if live_g.size:
        sub = _subsystem(lv, live)
        occ, switch, lv_stats = lv_map_records(
            sub, config.steps, record, thresholds[live_g], optimizer=lv_optimizer, beta=config.beta, engine=engine
        )
        lv_occ[:, live], lv_switch[live_g] = occ, switch
        continuous[live_g] = flow_switch_times(sub, horizon, m_star[live])[: live_g.size]
    return lv_occ, lv_switch, continuous, lv_stats


def mflow_switches(flow: FlowResult, thresholds, record, lv_occ, lv_switch, never, dtype, notes: list[str]):
    """(M-flow switch steps (g,), resolution r_k / u (g,)); NaN for the modes the M-flow cannot
    resolve (resolution below MFLOW_RESOLUTION), with a note naming them."""
    g = thresholds.size
    mflow_switch = first_crossing(flow.steps, flow.occupations, thresholds)
    resolution = mflow_resolution(record, lv_occ, lv_switch, g, dtype)
    unresolved = np.flatnonzero((resolution < MFLOW_RESOLUTION) & ~never[:g])
    if unresolved.size:
        notes.append(unresolved_note(unresolved, mflow_switch, resolution, dtype))
        mflow_switch = mflow_switch.copy()
        mflow_switch[unresolved] = np.nan
    return mflow_switch, resolution


def unresolved_note(unresolved, mflow_switch, resolution, dtype) -> str:
    """The note naming the modes ``unresolved`` (indices) the M-flow cannot resolve, with the
    steps it would have given (mflow_switch (g,)) and their resolution r_k / u (g,)."""
    listed = ", ".join(f"{k + 1} (at {mflow_switch[k]:g})" for k in unresolved)
    return (
        f"the M-flow cannot resolve mode(s) {listed}: before switching on, the mode's weight share "
        f"sqrt(m_k / tr M) falls to {resolution[unresolved].min():.2g} u ({np.dtype(dtype).name} rounding unit u), "
        f"below {MFLOW_RESOLUTION:g} u, so rounding of the leading modes seeds it and it switches early; its "
        "M-flow switch step is left out (null); the LV map (log occupations) and the singular limit stand"
    )


def closed_form(modes: ModeBasis, m0, lr, never=None) -> np.ndarray:
    """(..., g) the logistic closed-form switch steps of the growing modes (c_k, diagonal K_kk) from
    the LV system's m0 (..., m) at lr (a number, or (..., 1)); NaN for the modes in ``never`` (m,)."""
    g = modes.num_growing
    with np.errstate(divide="ignore", invalid="ignore"):
        diag_k = np.diag(modes.interactions)[:g]
        closed = np.asarray(logistic_switch_time(modes.growth[:g], diag_k, m0[..., :g], lr), dtype=np.float64)
    if never is not None:
        closed[..., never[:g]] = np.nan
    return closed


def vanishing_init(
    lv: LotkaVolterra, never, g: int, notes: list[str] | None = None, sigma0: float | None = None
) -> tuple[SingularLimit, np.ndarray, np.ndarray]:
    """(the singular limit, its switch steps (g,), the plateau loss reached as each growing mode
    first activates (g,), NaN for modes that never do).

    An init that is not small (eps = -mean ln m_k(0) <= 0) has no vanishing-init limit: then
    ``no_limit`` (NaN steps and plateau losses) and a note in ``notes`` saying why and, for an
    init drawn at scale ``sigma0``, below which sigma0 the limit exists (m_k(0) ~ sigma0^2)."""
    eps = limit_eps(lv, never)
    if not eps > 0:  # NaN too
        if notes is not None:
            notes.append(no_limit_note(eps, sigma0))
        return no_limit(lv), np.full(g, np.nan), np.full(g, np.nan)
    limit = singular_limit(lv, never=never)
    singular_switch = limit.switch_steps()[:g]
    plateau = np.full(g, np.nan)
    for step_index, mode in enumerate(limit.activation_order):
        if mode < g and np.isnan(plateau[mode]):
            plateau[mode] = limit.plateau_losses[step_index]
    return limit, singular_switch, plateau


def no_limit_note(eps: float, sigma0: float | None) -> str:
    """Why a prediction has no vanishing-init limit (eps = -mean ln m_k(0) <= 0) and the init
    that has one: m_k(0) scales with sigma0^2 (or with W0's scale squared), so eps > 0 below
    sigma0 exp(eps / 2) (W0 scaled down by more than exp(-eps / 2))."""
    start = f"{math.exp(-eps):.3g}" if math.isfinite(eps) else "?"
    if sigma0 is None:
        remedy = f"scale W0 down by more than {math.exp(-eps / 2):.3g}" if math.isfinite(eps) else "scale W0 down"
    else:
        remedy = f"take sigma0 below {sigma0 * math.exp(eps / 2):.3g} (this draw)" if math.isfinite(eps) else ""
    return (
        f"no vanishing-init limit: it describes small inits (eps = -mean ln m_k(0) > 0), and here the modes start "
        f"at m_k(0) ~ {start} (geometric mean; eps = {eps:.3g}); its switch-on steps and plateau losses are left "
        f"empty, the M-flow and the LV stand{'; for the limit, ' + remedy if remedy else ''}"
    )


def power_law(steps, loss, system: LVStage, g: int, notes: list[str]) -> PowerLawFit | None:
    """The power-law fit of the M-flow's loss curve (steps (R,), loss (R,)) above the LV fixed
    point's loss, with at least MIN_MODES_FOR_POWER_LAW growing modes (else None; a note when
    the fit fails)."""
    if g < MIN_MODES_FOR_POWER_LAW:
        return None
    loss_inf = float(system.lv.loss(system.m_star))
    try:
        return fit_power_law(np.asarray(steps), np.asarray(loss), loss_inf=loss_inf)
    except NqfError as err:
        notes.append(f"power-law fit not possible: {err}")
        return None


def degenerate_note(modes: ModeBasis, notes: list[str]) -> None:
    """The note naming the degenerate groups of the growing modes (equal c_k), if any: W0 decides
    how a group's occupation splits among its modes, so the groups are what is timed."""
    groups = [group for group in mode_groups(modes.growth[: modes.num_growing]) if len(group) > 1]
    if groups:
        listed = ", ".join(group_label(group) for group in groups)
        notes.append(
            f"modes {listed} are degenerate (equal c_k): W0 decides how each group's occupation splits among its "
            "modes, so each group is timed as one: it switches on when its total occupation reaches half its "
            'total fixed point (docs/theory.md 5.1; the JSON\'s "groups"); per-mode steps inside a group '
            "depend on the draw"
        )
