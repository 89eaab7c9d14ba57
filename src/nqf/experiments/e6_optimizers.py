r"""E6, training methods: how GD, SGD, heavy-ball momentum, Adam and Muon escape from small init, and
which of them keep the quadratic model closed on M = W W^T (THEORY.md sections 2 and 5).

Task: the staircase (K = 4 outputs, D = 8 whitened inputs, s = 3, 2, 1, 0.5, N = 256),
learned by the tanh perceptron (``mlp``, width n = 32) and by its quadratic model
f = <W W^T, A(x)>, both trained in float64.

**Switch-on steps versus init scale.** Near M = 0, G(M) = -C, so the weight component
along a mode q_k (C q_k = c_k q_k) grows geometrically and the switch-on step t_k (first
step with m_k = q_k^T M q_k >= m_k*/2, m_k* the LV fixed point of the task's modes,
THEORY.md section 5) is linear in ln(1/sigma0) with slope

* GD, lr eta:               1 / ln(1 + 2 eta c_k);
* heavy ball, beta:         1 / ln z, z the larger root of z^2 - (1 + beta + 2 eta c_k) z + beta = 0;
* the "effective lr" rule:  1 / ln(1 + 2 eta c_k / (1 - beta)) (valid only for 2 eta c_k << (1 - beta)^2;
  shown to be far off here).

For each optimizer one compiled ``train_sweep`` per model (vmapped over sigma0 and seeds)
records m_k at every step; ``fit_switch_slope`` fits t_k = a + b ln(1/sigma0) with a
standard error. Claims (relative tolerance 3%, THEORY.md section 4's "linear with slope
within 3%"): GD and momentum slopes of the quadratic model for every mode, and of the
tanh network for mode 1. The network's later modes are known to move at about mode 1's
rate instead; they are shown as measured findings, not claims. SGD (minibatch
``batch_size``, same lr) is compared with the GD formula as a finding; Adam (lr 1e-3) and
Muon (lr 0.01) have no prediction: their slopes are measured and shown (near zero: their
normalised steps grow the weights linearly, not geometrically).

**Closure.** ``closure_diagnostic`` trains the quadratic model from W0 and W0 O (O random
orthogonal) and records the relative M defect ||M - M'||_F / ||M||_F per step and the
per-step update defect of the optimizer. Claims: the equivariant optimizers (GD, SGD with
the same batches, momentum, Muon) stay below 1e-8 over the plateaus, i.e. up to the last
switch-on of the same optimizer's quadratic run at ``closure_sigma0`` (constant-lr Muon
oscillates after convergence and amplifies rounding, THEORY.md section 2, so it is judged
there and by its per-step update defect over the whole run); Adam's defect is at least
1e-2. The tanh network under GD is shown for contrast (the rotation is not a symmetry of
the network).

Learning rates: eta = 0.05 for GD, SGD and momentum (beta = 0.9), Adam 1e-3 (optax
defaults b1 = 0.9, b2 = 0.999, eps = 1e-8), Muon 0.01 (optax.contrib.muon, beta 0.95,
Nesterov, eps 1e-8, W declared one d x n matrix; at lr 0.01 optax's momentum
normalisation delays switch-ons by at most a step, see ``nqf.training.runs``).

Float64: the compute functions run under ``jax.enable_x64(True)`` (a scoped context, not
a global switch): closure defects of 1e-14 and sigma0 down to 1e-12 need it.

Cost (measured on 2 CPU cores shared with other jobs, compile time included; 16 runs, one
compiled call each): quick (4 scales 1e-3 ... 1e-12, 1 seed) 40-65 s; full (7 scales
1e-2 ... 1e-12, 3 seeds) about 90 s. Most of it is compilation, so more scales or seeds
cost little.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from nqf.core.errors import NqfError
from nqf.store.verdict import Claim, Tolerance
from ._base import Experiment, ExperimentResult, RunSpec
from ._common import as_array, check_sigma0s, fmt_fit, switch_fit_problem
from ._staircase import setup, task_dict

OPTIMIZER_ORDER = ("gd", "sgd", "momentum", "adam", "muon")
OPTIMIZER_NAMES = {"gd": "GD", "sgd": "SGD", "momentum": "momentum", "adam": "Adam", "muon": "Muon"}
EQUIVARIANT = ("gd", "sgd", "momentum", "muon")
MODELS = ("network", "quadratic")

# Stated in advance (THEORY.md sections 2, 4, 5); deliberately not config fields.
SLOPE_TOLERANCE = 0.03  # relative, slope of switch step versus ln(1/sigma0)
EQUIVARIANT_BOUND = 1e-8  # closure defect of an equivariant optimizer (float64 rounding is ~1e-14)
ADAM_BOUND = 1e-2  # Adam's closure defect is order one
NAIVE_OFF_BY = 0.2  # the lr/(1 - beta) rule misses heavy-ball escape by more than this (relative)


@dataclass(frozen=True)
class OptimizersConfig:
    """E6's settings; see the module docstring. ``sigma0s`` must hold ``closure_sigma0``."""

    sigma0s: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12)
    seeds: tuple[int, ...] = (0, 1, 2)
    optimizers: tuple[str, ...] = OPTIMIZER_ORDER
    inputs: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    data_seed: int = 0
    width: int = 32
    lr: float = 0.05
    beta: float = 0.9
    batch_size: int = 32
    adam_lr: float = 1e-3
    muon_lr: float = 0.01
    gd_steps: int = 1400
    sgd_steps: int = 1400
    momentum_steps: int = 400
    adam_steps: int = 600
    muon_steps: int = 400
    closure_sigma0: float = 1e-6
    rotation_seed: int = 1
    network_closure: bool = True

    def __post_init__(self) -> None:
        check_sigma0s("E6", self.sigma0s)
        if self.closure_sigma0 not in self.sigma0s:
            raise NqfError(
                f"E6: closure_sigma0 = {self.closure_sigma0:g} must be one of sigma0s "
                "(its switch steps end the plateau window)"
            )
        if not self.seeds or any(s < 0 for s in self.seeds):
            raise NqfError(f"E6: seeds must be a non-empty tuple of integers >= 0, got {self.seeds!r}")
        unknown = [o for o in self.optimizers if o not in OPTIMIZER_ORDER]
        if unknown or not self.optimizers or len(set(self.optimizers)) != len(self.optimizers):
            raise NqfError(
                f"E6: optimizers must be distinct names from {', '.join(OPTIMIZER_ORDER)}, got {self.optimizers!r}"
            )
        for name in ("gd_steps", "sgd_steps", "momentum_steps", "adam_steps", "muon_steps", "width", "samples"):
            if getattr(self, name) < 1:
                raise NqfError(f"E6: {name} must be a positive integer, got {getattr(self, name)!r}")
        if not 0 <= self.beta < 1:
            raise NqfError(f"E6: beta must lie in [0, 1), got {self.beta!r}")

    @classmethod
    def quick(cls) -> "OptimizersConfig":
        return cls(sigma0s=(1e-3, 1e-6, 1e-9, 1e-12), seeds=(0,))

    @classmethod
    def full(cls) -> "OptimizersConfig":
        return cls()


# -- runs ------------------------------------------------------------------------------


def _task_dict(c: OptimizersConfig) -> dict[str, Any]:
    return task_dict(c.inputs, c.outputs, c.singular_values, c.samples, c.data_seed)


def _optimizer_dict(c: OptimizersConfig, optimizer: str) -> dict[str, Any]:
    """lr, beta (None: optax's default), batch size and steps of one optimizer."""
    lr = {"adam": c.adam_lr, "muon": c.muon_lr}.get(optimizer, c.lr)
    return {
        "optimizer": optimizer,
        "lr": lr,
        "beta": c.beta if optimizer == "momentum" else None,
        "batch_size": c.batch_size if optimizer == "sgd" else None,
        "steps": getattr(c, f"{optimizer}_steps"),
    }


def _setup(task: dict[str, Any]):
    """Data, architecture and the theory's modes of the staircase (call under float64).

    Returns (arch, X (N, D), Y (N, K), Q (d, m) mode basis, c (m,) = q_k^T C q_k,
    K (m, m) = E[(q_k^T A q_k)(q_j^T A q_j)], m* (m,) LV fixed point, closed-form c).
    """
    s = setup(task)
    return s.arch, s.X, s.Y, s.Q, s.c, s.K, s.m_star, np.asarray(s.task.spectrum(task["data_seed"]))


def _train_config(run: dict[str, Any], **extra):
    from nqf.training.runs import TrainConfig

    return TrainConfig(
        optimizer=run["optimizer"],
        lr=run["lr"],
        steps=run["steps"],
        batch_size=run["batch_size"],
        beta=run["beta"],
        width=run["width"],
        model=run["model"],
        dtype="float64",
        **extra,
    )


def sweep_run(run: dict[str, Any]) -> dict[str, Any]:
    """One optimizer and model, every (sigma0, seed): switch-on steps of each mode (one compiled call)."""
    from nqf.core.measure import half_fixed_point, switch_steps
    from nqf.training.runs import train_sweep

    with jax.enable_x64(True):
        arch, X, Y, Q, c, K, m_star, closed_c = _setup(run["task"])
        thresholds = half_fixed_point(m_star)
        result = train_sweep(arch, X, Y, _train_config(run), run["sigma0s"], run["seeds"], basis=Q)
        switch = switch_steps(result.steps, result.occupations, thresholds)  # (S, seeds, m)
        return {
            "switch_steps": switch,
            "final_occupations": result.occupations[:, :, -1, :],
            "final_loss": result.loss[:, :, -1],
            "diverged_at": result.diverged_at,
            "thresholds": thresholds,
            "fixed_point": m_star,
            "c": c,
            "K": K,
            "closed_form_c": closed_c,
        }


def closure_run(run: dict[str, Any]) -> dict[str, Any]:
    """W0 versus W0 O for one optimizer: per-step M defect and update defect."""
    from nqf.training.closure import closure_diagnostic

    with jax.enable_x64(True):
        arch, X, Y, *_ = _setup(run["task"])
        config = _train_config(run, sigma0=run["sigma0"], seed=run["seed"])
        result = closure_diagnostic(arch, X, Y, config, rotation_seed=run["rotation_seed"])
        return {"m_defect": result.m_defect, "update_defect": result.update_defect}


def runs(c: OptimizersConfig) -> list[RunSpec]:
    task = _task_dict(c)
    specs = []
    for optimizer in c.optimizers:
        base = {"task": task, "width": c.width, **_optimizer_dict(c, optimizer)}
        for model in MODELS:
            config = {**base, "model": model, "sigma0s": list(c.sigma0s), "seeds": list(c.seeds)}
            specs.append(RunSpec(f"sweep-{optimizer}-{model}", config, sweep_run))
        closure = {**base, "model": "quadratic", "sigma0": c.closure_sigma0, "seed": c.seeds[0]}
        specs.append(RunSpec(f"closure-{optimizer}", {**closure, "rotation_seed": c.rotation_seed}, closure_run))
    if c.network_closure:
        base = {"task": task, "width": c.width, **_optimizer_dict(c, "gd")}
        closure = {**base, "model": "network", "sigma0": c.closure_sigma0, "seed": c.seeds[0]}
        specs.append(RunSpec("closure-gd-network", {**closure, "rotation_seed": c.rotation_seed}, closure_run))
    return specs


# -- summary ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fit:
    slope: float
    stderr: float
    intercept: float
    points: int
    problem: str  # why the fit is not a resolved measurement ("" when it is)


def _fit_mode(sigma0s: np.ndarray, steps: np.ndarray, what: str) -> _Fit:
    """Fit t = a + b ln(1/sigma0) over the scales (rows) and seeds (columns) of one mode.

    Resolved when the mode switched on at every scale and seed, later than step 1 (a
    switch at step 0 or 1 says the init was already near the threshold).
    """
    from nqf.core.measure import fit_switch_slope

    finite = np.isfinite(steps)
    problem = switch_fit_problem(sigma0s, steps, what)
    if finite.sum() < 2 or np.ptp(np.log(sigma0s[finite.any(axis=1)])) == 0:
        return _Fit(math.nan, math.nan, math.nan, int(finite.sum()), problem or f"{what}: too few switch steps to fit")
    fit = fit_switch_slope(sigma0s, steps)
    return _Fit(fit.slope, fit.stderr, fit.intercept, fit.points, problem)


def _predictions(c: np.ndarray, config: OptimizersConfig) -> dict[str, np.ndarray]:
    from nqf.theory.lotka_volterra import switch_slope_gd, switch_slope_momentum

    return {
        "gd": switch_slope_gd(c, config.lr),
        "momentum": switch_slope_momentum(c, config.lr, config.beta),
        "momentum_naive": switch_slope_gd(c, config.lr / (1.0 - config.beta)),
    }


def summarise(config: OptimizersConfig, records: dict[str, dict]) -> ExperimentResult:
    sigma0s = np.asarray(config.sigma0s, dtype=np.float64)
    optimizers = [o for o in OPTIMIZER_ORDER if o in config.optimizers]
    first = records[f"sweep-{optimizers[0]}-quadratic"]
    c = as_array(first["c"])
    modes = c.size
    predicted = _predictions(c, config)

    switch: dict[str, dict[str, np.ndarray]] = {}
    fits: dict[str, dict[str, list[_Fit]]] = {}
    for optimizer in optimizers:
        switch[optimizer], fits[optimizer] = {}, {}
        for model in MODELS:
            steps = as_array(records[f"sweep-{optimizer}-{model}"]["switch_steps"])  # (S, seeds, m)
            switch[optimizer][model] = steps
            fits[optimizer][model] = [
                _fit_mode(sigma0s, steps[:, :, k], f"mode {k + 1} ({OPTIMIZER_NAMES[optimizer]}, {model})")
                for k in range(modes)
            ]

    claims: list[Claim] = []
    formulas = (("gd", "1/ln(1 + 2 lr c_k)"), ("momentum", "1/ln z, z^2 - (1 + beta + 2 lr c_k) z + beta = 0"))
    for optimizer, formula in formulas:
        if optimizer not in fits:
            continue
        for model, mode_range in (("quadratic", range(modes)), ("network", range(1))):
            for k in mode_range:
                fit = fits[optimizer][model][k]
                measured = fit.slope if not fit.problem and math.isfinite(fit.slope) else None
                source = "quadratic model" if model == "quadratic" else "tanh network"
                error = ""
                if measured is not None and math.isfinite(fit.stderr):
                    error = f", ± {fit.stderr:.2g} (standard error)"
                claims.append(
                    Claim(
                        claim=f"{OPTIMIZER_NAMES[optimizer]}: mode {k + 1}'s switch-on step moves by {formula} "
                        "per unit ln(1/sigma0)",
                        measured_what=f"fitted slope of the switch-on step versus ln(1/sigma0), {source}, "
                        f"{sigma0s.size} scales x {len(config.seeds)} seed(s){error}",
                        predicted=float(predicted[optimizer][k]),
                        measured=measured,
                        tolerance=Tolerance("relative", SLOPE_TOLERANCE),
                        unit="steps",
                        why_missing="" if measured is not None else fit.problem,
                    )
                )
    if "momentum" in fits:
        fit = fits["momentum"]["quadratic"][0]
        naive = float(predicted["momentum_naive"][0])
        resolved = not fit.problem and math.isfinite(fit.slope)
        claims.append(
            Claim(
                claim="the effective-lr rule lr/(1 - beta) misses heavy-ball escape "
                f"(2 lr c_1 = {2 * config.lr * c[0]:.3g} is not << (1 - beta)^2 = {(1 - config.beta) ** 2:.3g}): "
                f"off by more than {NAIVE_OFF_BY:.0%}",
                measured_what="|measured - naive| / naive, mode 1 slope of the quadratic model "
                f"(naive 1/ln(1 + 2 lr c_1/(1 - beta)) = {naive:.3f})",
                predicted=NAIVE_OFF_BY,
                measured=abs(fit.slope - naive) / naive if resolved else None,
                tolerance=Tolerance("at_least", 0.0),
                why_missing="" if resolved else fit.problem,
            )
        )

    # closure: the plateau window ends at the last switch-on of the same optimizer's quadratic run
    closure_index = int(np.nonzero(sigma0s == config.closure_sigma0)[0][0])
    closure: dict[str, dict[str, Any]] = {}
    for optimizer in optimizers:
        record = records[f"closure-{optimizer}"]
        m_defect, update_defect = as_array(record["m_defect"]), as_array(record["update_defect"])
        last = switch[optimizer]["quadratic"][closure_index, 0, :]
        window = int(math.ceil(np.max(last))) if np.all(np.isfinite(last)) else update_defect.size
        window = min(window, update_defect.size)
        closure[optimizer] = {
            "m_defect": m_defect,
            "update_defect": update_defect,
            "window": window,
            "max_m_window": float(np.max(m_defect[: window + 1])),
            "max_m_all": float(np.max(m_defect)),
            "max_update_all": float(np.max(update_defect)),
            "window_complete": bool(np.all(np.isfinite(last))),
        }
        info = closure[optimizer]
        where = (
            f"steps 0..{window} (through the last switch-on at sigma0 = {config.closure_sigma0:g})"
            if info["window_complete"]
            else f"all {window} steps (a mode never switched on)"
        )
        if optimizer in EQUIVARIANT:
            claims.append(
                Claim(
                    claim=f"{OPTIMIZER_NAMES[optimizer]} keeps the quadratic model closed on M (W0 and W0 O give the same M)",
                    measured_what=f"max relative M defect ||M - M'||/||M||, quadratic model, {where}",
                    predicted=0.0,
                    measured=info["max_m_window"],
                    tolerance=Tolerance("at_most", EQUIVARIANT_BOUND),
                )
            )
        else:
            claims.append(
                Claim(
                    claim="Adam's per-coordinate scaling breaks closure on M: order-one defect",
                    measured_what=f"max relative M defect ||M - M'||/||M||, quadratic model, {where}",
                    predicted=ADAM_BOUND,
                    measured=info["max_m_window"],
                    tolerance=Tolerance("at_least", 0.0),
                )
            )
    if "muon" in closure:
        claims.append(
            Claim(
                claim="Muon's orthogonalised update is equivariant at every step, W -> W O",
                measured_what="max per-step update defect ||U(G O) - U(G) O||/||U(G)||, quadratic model, all steps",
                predicted=0.0,
                measured=closure["muon"]["max_update_all"],
                tolerance=Tolerance("at_most", EQUIVARIANT_BOUND),
            )
        )
    network_closure = None
    if "closure-gd-network" in records:
        network_closure = {
            "m_defect": as_array(records["closure-gd-network"]["m_defect"]),
            "update_defect": as_array(records["closure-gd-network"]["update_defect"]),
        }

    text = _text(config, c, first, predicted, switch, fits, closure, network_closure, closure_index)
    data = {
        "optimizers": optimizers,
        "names": OPTIMIZER_NAMES,
        "sigma0s": sigma0s,
        "log_inv_sigma0": np.log(1.0 / sigma0s),
        "c": c,
        "lr": config.lr,
        "beta": config.beta,
        "switch": switch,
        "fits": {o: {m: [(f.slope, f.stderr, f.intercept) for f in fs] for m, fs in v.items()} for o, v in fits.items()},
        "predicted": predicted,
        "closure": closure,
        "network_closure": network_closure,
        "bounds": {"equivariant": EQUIVARIANT_BOUND, "adam": ADAM_BOUND},
    }
    return ExperimentResult(claims=tuple(claims), text=text, data=data)


def _text(config, c, first, predicted, switch, fits, closure, network_closure, closure_index) -> str:
    names = OPTIMIZER_NAMES
    m_star = as_array(first["fixed_point"])
    scales = ", ".join(f"{s:g}" for s in config.sigma0s)
    paragraphs = [
        f"Staircase (s = {', '.join(f'{s:g}' for s in config.singular_values)}, D = {config.inputs}, K = {config.outputs}, "
        f"N = {config.samples} whitened samples), tanh network of width {config.width} and its quadratic model, float64. "
        f"Growth coefficients c_k = q_k^T C q_k = {', '.join(f'{v:.4g}' for v in c)}; switch-on thresholds are half the LV "
        f"fixed point m_k* = {', '.join(f'{v:.4g}' for v in m_star)} for every model and optimizer. Init scales sigma0 = "
        f"{scales}, seeds {', '.join(str(s) for s in config.seeds)}. Learning rates: GD, SGD (batch {config.batch_size}) and "
        f"momentum (beta {config.beta:g}) {config.lr:g}; Adam {config.adam_lr:g}; Muon {config.muon_lr:g}. Slopes are "
        "in steps per unit ln(1/sigma0), with standard errors of the fit; switch-on steps are whole steps, so over "
        f"a span of {np.ptp(np.log(np.asarray(config.sigma0s))):.3g} in ln(1/sigma0) a slope is resolved to about "
        f"{1.0 / np.ptp(np.log(np.asarray(config.sigma0s))):.2g} steps per unit, even where the fit's standard error is smaller."
    ]

    def row(optimizer: str, model: str) -> str:
        return "; ".join(f"mode {k + 1} {fmt_fit(f)}" for k, f in enumerate(fits[optimizer][model]))

    def ratio(optimizer: str, model: str, key: str) -> str:
        return ", ".join(f"{f.slope / p:.3f}" for f, p in zip(fits[optimizer][model], predicted[key]))

    def pred(key: str) -> str:
        return ", ".join(f"{v:.3f}" for v in predicted[key])

    if "gd" in fits:
        paragraphs.append(
            f"GD, predicted 1/ln(1 + 2 lr c_k) = {pred('gd')}. Quadratic model: {row('gd', 'quadratic')}. "
            f"Tanh network: {row('gd', 'network')}. Network slope / predicted slope per mode: {ratio('gd', 'network', 'gd')} "
            f"(mode 1's slope is {fits['gd']['network'][0].slope:.3f}); only mode 1 is a claim for the network: its later "
            "modes are a measured finding (beyond the quadratic order the tanh network couples them to the modes already learned)."
        )
    if "momentum" in fits:
        paragraphs.append(
            f"Heavy-ball momentum, predicted 1/ln z = {pred('momentum')}; the effective-lr rule lr/(1 - beta) would give "
            f"{pred('momentum_naive')}, far off because 2 lr c_k is not small against (1 - beta)^2 = {(1 - config.beta) ** 2:.3g}. "
            f"Quadratic model: {row('momentum', 'quadratic')}. Tanh network: {row('momentum', 'network')}; network slope / "
            f"predicted per mode: {ratio('momentum', 'network', 'momentum')}."
        )
    if "sgd" in fits:
        paragraphs.append(
            f"SGD (batch {config.batch_size}, same batches for every scale), no claim; GD's formula gives {pred('gd')}. "
            f"Quadratic model: {row('sgd', 'quadratic')}. Tanh network: {row('sgd', 'network')}. Quadratic-model slope / "
            f"GD formula per mode: {ratio('sgd', 'quadratic', 'gd')}."
        )
    for optimizer in ("adam", "muon"):
        if optimizer not in fits:
            continue
        steps = switch[optimizer]["network"]
        spread = ", ".join(
            f"{np.nanmin(col):.0f}-{np.nanmax(col):.0f}" + ("" if np.isfinite(col).all() else " (not always reached)")
            if np.isfinite(col).any()
            else "never reached"
            for col in steps.reshape(-1, steps.shape[-1]).T
        )
        order = np.argsort(switch[optimizer]["quadratic"][closure_index, 0, :])
        comparison = ""
        if "gd" in switch:
            gd = switch["gd"]["network"][:, :, 0]
            comparison = f" (GD's mode 1 moves from {np.nanmin(gd):.0f} to {np.nanmax(gd):.0f} over the same scales)"
        paragraphs.append(
            f"{names[optimizer]} (lr {config.adam_lr if optimizer == 'adam' else config.muon_lr:g}), no prediction: "
            f"measured slopes, quadratic model: {row(optimizer, 'quadratic')}; tanh network: {row(optimizer, 'network')}. "
            f"Network switch-on steps over all scales and seeds (per mode, min-max): {spread}{comparison}: a weak or no "
            "dependence on sigma0, as expected of normalised updates, which grow the weights linearly rather than "
            f"geometrically. Switch-on order at sigma0 = {config.closure_sigma0:g} (quadratic model, seed "
            f"{config.seeds[0]}): modes {', '.join(str(i + 1) for i in order)}."
        )
    if closure:
        parts = []
        for optimizer, info in closure.items():
            parts.append(
                f"{names[optimizer]} {info['max_m_window']:.2g} through step {info['window']} "
                f"({info['max_m_all']:.2g} over all steps; update defect {info['max_update_all']:.2g})"
            )
        extra = ""
        if network_closure is not None:
            extra = (
                f" For contrast, the tanh network under GD reaches an M defect of {np.nanmax(network_closure['m_defect']):.2g} "
                f"(update defect {np.nanmax(network_closure['update_defect']):.2g}): the rotation is not a symmetry of the network."
            )
        paragraphs.append(
            f"Closure on M (quadratic model, W0 versus W0 O, sigma0 = {config.closure_sigma0:g}, seed {config.seeds[0]}), "
            "maximum relative M defect over the plateaus, i.e. through the last switch-on: "
            + "; ".join(parts)
            + f". Bounds: equivariant optimizers at most {EQUIVARIANT_BOUND:g}, Adam at least {ADAM_BOUND:g}."
            + extra
        )
    return "\n\n".join(paragraphs)


E6 = Experiment(
    "E6",
    "training methods",
    OptimizersConfig,
    runs,
    summarise,
    figures="nqf.report.figures_e6:plot",
    description="Switch-on steps versus init scale and closure on M for GD, SGD, heavy-ball momentum, Adam and Muon "
    "on the staircase.",
)
