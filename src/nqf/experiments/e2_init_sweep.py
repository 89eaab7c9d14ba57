r"""E2, init sweep: the switch-on step of each mode is linear in ln(1/sigma0), with the slope
of the discrete GD escape (THEORY.md sections 2 and 3).

Task: the staircase (s = 3, 2, 1, 0.5, K = 4, D = 8, N = 256 whitened samples) learned by
the tanh perceptron (``mlp``, width n = 32) and by its quadratic model, plain full-batch GD
with lr 0.05, float64, init W0 ~ N(0, sigma0^2) for sigma0 from 1e-2 down to 1e-12 (the
same init draw rescaled, ``training_keys(seed)[0]``). Optimizers other than GD are E6's.

Near M = 0, G(M) = -C: the weight component along a mode q_k (C q_k = c_k q_k) grows by
(1 + 2 lr c_k) per GD step and the occupation m_k = q_k^T M q_k by its square, while
m_k(0) is proportional to sigma0^2. The switch-on step t_k (first step with
m_k >= m_k*/2, m_k* the LV fixed point, THEORY.md section 5) is therefore

    t_k = a_k + b_k ln(1/sigma0),   b_k = 1 / ln(1 + 2 lr c_k)   (GD, discrete steps),

where gradient flow would give b_k = 1/(2 lr c_k): 7% larger at 2 lr c_1 = 0.15.

Measured: one compiled ``train_sweep`` per model (vmapped over sigma0 and seeds) records
the occupations at every step; ``fit_switch_slope`` fits t_k against ln(1/sigma0) with a
standard error. Predicted: ``predict`` at every (sigma0, seed) gives the M-flow's and the
LV discrete map's switch-on steps (the LV gradient flow, closed form and singular limit
are recorded too), and the slope formulas above.

Claims (tolerances stated in advance, deliberately not config fields):

* slope of every mode within 3% of 1/ln(1 + 2 lr c_k), for the quadratic model and for
  the tanh network (the network's later modes were measured elsewhere to move at about
  mode 1's rate instead; they are claimed all the same and the verdict says what it says);
* linearity: the largest residual of the linear fit is at most one step per mode and
  model (switch-on steps are integers: rounding alone leaves residuals up to a step);
* the M-flow's switch-on steps equal the quadratic model's at every scale, to a step;
* the discrete-time correction is resolved: the quadratic model's mode-1 slope differs
  from the gradient-flow slope 1/(2 lr c_1) by more than the 3% tolerance.

Findings (data seed 0, seed 0): the quadratic model's slopes are within 0.3% of
1/ln(1 + 2 lr c_k) and linear to half a step; the tanh network's mode 1 too, but its later
modes bend towards mode 1's rate below sigma0 ~ 1e-4 (slopes 9.4, 11.8, 14.1 for modes
2-4 over 1e-2..1e-12, residuals 9-76 steps). The float64 M-flow of ``predict`` diverges
at sigma0 = 1e-12 and is 31 steps off for mode 4 at 1e-11 (rounding of M in the standard
basis once mode 1 is learned); the LV map stays within a step of the quadratic model.

Cost (measured alone, 2 CPU cores shared with other jobs at load ~6-7): quick (5 scales,
1 seed) 62 s wall, 25 s CPU; full (11 scales) 80 s wall, 34 s CPU. Each train sweep takes
about 3 s; most of the rest is ``predict`` (about 13 s to compile, then about 1.5 s per
scale and seed). Run after E1 in the same process, E2 reuses part of predict's compilation.
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
from ._common import as_array, check_gd_run, check_seeds, check_sigma0s, fmt_fit, switch_fit_problem
from ._staircase import basis_overlap, check_staircase, setup, task_dict

MODELS = ("quadratic", "network")
SOURCES = {"quadratic": "quadratic model", "network": "tanh network"}
PREDICTED_SOURCES = ("mflow", "lv", "lv_continuous", "closed_form", "singular")

# Stated in advance (THEORY.md sections 2 and 4); deliberately not config fields.
SLOPE_TOLERANCE = 0.03  # relative, fitted slope versus 1/ln(1 + 2 lr c_k)
LINEARITY_STEPS = 1.0  # largest residual of the linear fit, in steps (integer switch-on steps)
MFLOW_STEPS = 1.0  # M-flow versus quadratic model switch-on steps, in steps


@dataclass(frozen=True)
class InitSweepConfig:
    """E2's settings; see the module docstring."""

    sigma0s: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12)
    seeds: tuple[int, ...] = (0,)
    inputs: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    data_seed: int = 0
    width: int = 32
    lr: float = 0.05
    steps: int = 1400

    def __post_init__(self) -> None:
        check_staircase("E2", self.singular_values, self.inputs, self.outputs, self.samples)
        check_sigma0s("E2", self.sigma0s)
        check_seeds("E2", "seeds", self.seeds)
        check_gd_run("E2", self.width, self.steps, self.lr)

    @classmethod
    def quick(cls) -> "InitSweepConfig":
        return cls(sigma0s=(1e-2, 1e-4, 1e-6, 1e-9, 1e-12))

    @classmethod
    def full(cls) -> "InitSweepConfig":
        return cls()


# -- runs ------------------------------------------------------------------------------


def sweep_run(run: dict[str, Any]) -> dict[str, Any]:
    """GD on one model for every (sigma0, seed) in one compiled call: switch-on steps (S, seeds, m)."""
    from nqf.core.measure import switch_steps
    from nqf.training.runs import TrainConfig, train_sweep

    with jax.enable_x64(True):
        s = setup(run["task"])
        config = TrainConfig(
            optimizer="gd", lr=run["lr"], steps=run["steps"], width=run["width"], dtype="float64", model=run["model"]
        )
        result = train_sweep(s.arch, s.X, s.Y, config, run["sigma0s"], run["seeds"], basis=s.Q)
        return {
            "switch_steps": switch_steps(result.steps, result.occupations, s.thresholds),
            "thresholds": s.thresholds,
            "c": s.c,
            "final_occupations": result.occupations[:, :, -1, :],
            "final_loss": result.loss[:, :, -1],
            "diverged_at": result.diverged_at,
        }


def predict_run(run: dict[str, Any]) -> dict[str, Any]:
    """``predict`` (GD) at every (sigma0, seed): the theory's switch-on steps, each (S, seeds, m)."""
    from nqf.theory.predict import PredictConfig, predict

    with jax.enable_x64(True):
        s = setup(run["task"])
        out: dict[str, list] = {name: [] for name in PREDICTED_SOURCES}
        overlap = math.inf
        growth = None
        failures = []
        m = s.Q.shape[1]
        for sigma0 in run["sigma0s"]:
            rows: dict[str, list] = {name: [] for name in PREDICTED_SOURCES}
            for seed in run["seeds"]:
                config = PredictConfig(width=run["width"], lr=run["lr"], steps=run["steps"], sigma0=sigma0, seed=seed)
                try:
                    p = predict(s.arch, s.X, s.Y, config)
                except NqfError as err:
                    # e.g. the float64 M-flow diverging at tiny sigma0: a finding to report, not a crash
                    failures.append({"sigma0": sigma0, "seed": seed, "error": str(err)})
                    for name in PREDICTED_SOURCES:
                        rows[name].append(np.full(m, np.nan))
                    continue
                g = p.num_growing
                if g != s.Q.shape[1]:
                    raise NqfError(f"E2: predict found {g} growing modes, the staircase has {s.Q.shape[1]}")
                overlap = min(overlap, basis_overlap(p.modes.basis[:, :g], s.Q))
                growth = p.modes.growth[:g]
                rows["mflow"].append(p.mflow_switch_steps)
                rows["lv"].append(p.lv_switch_steps)
                rows["lv_continuous"].append(p.lv_continuous_switch_steps)
                rows["closed_form"].append(p.closed_form_switch_steps)
                rows["singular"].append(p.singular_switch_steps)
            for name in PREDICTED_SOURCES:
                out[name].append(rows[name])
        if growth is None:
            raise NqfError(f"E2: predict failed at every init scale, e.g. {failures[0]['error']}")
        return {
            **{name: np.asarray(v, dtype=np.float64) for name, v in out.items()},
            "growth": growth,
            "basis_overlap": overlap,
            "failures": failures,
        }


def runs(c: InitSweepConfig) -> list[RunSpec]:
    base = {
        "task": task_dict(c.inputs, c.outputs, c.singular_values, c.samples, c.data_seed),
        "width": c.width,
        "lr": c.lr,
        "steps": c.steps,
        "sigma0s": list(c.sigma0s),
        "seeds": list(c.seeds),
    }
    specs = [RunSpec(f"sweep-{model}", {**base, "model": model}, sweep_run) for model in MODELS]
    specs.append(RunSpec("predict", base, predict_run))
    return specs


# -- summary ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModeFit:
    """t = intercept + slope ln(1/sigma0) for one mode; residuals (S, seeds) (NaN where no step)."""

    slope: float
    stderr: float
    intercept: float
    residuals: np.ndarray
    max_residual: float
    problem: str  # why the fit is not a resolved measurement ("" when it is)


def fit_mode(sigma0s, steps, what: str) -> ModeFit:
    """Fit the switch-on steps (S, seeds) of one mode against ln(1/sigma0).

    Resolved when the mode switched on at every scale and seed, later than step 1 (a
    switch at step 0 or 1 says the init was already near the threshold).
    """
    from nqf.core.measure import fit_switch_slope

    sigma0s = np.asarray(sigma0s, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64).reshape(sigma0s.size, -1)
    finite = np.isfinite(steps)
    problem = switch_fit_problem(sigma0s, steps, what)
    rows = finite.any(axis=1)
    if finite.sum() < 3 or np.ptp(np.log(sigma0s[rows])) == 0:
        nan = np.full(steps.shape, np.nan)
        return ModeFit(math.nan, math.nan, math.nan, nan, math.nan, problem or f"{what}: too few switch-on steps to fit")
    fit = fit_switch_slope(sigma0s, steps)
    residuals = steps - (fit.intercept + fit.slope * np.log(1.0 / sigma0s))[:, None]
    return ModeFit(fit.slope, fit.stderr, fit.intercept, residuals, float(np.nanmax(np.abs(residuals))), problem)


def summarise(config: InitSweepConfig, records: dict[str, dict]) -> ExperimentResult:
    from nqf.theory.lotka_volterra import switch_slope_continuous, switch_slope_gd

    sigma0s = np.asarray(config.sigma0s, dtype=np.float64)
    x = np.log(1.0 / sigma0s)
    pred = records["predict"]
    c = as_array(pred["growth"])
    modes = c.size
    discrete = np.asarray(switch_slope_gd(c, config.lr), dtype=np.float64)
    continuous = np.asarray(switch_slope_continuous(c, config.lr), dtype=np.float64)
    scales = f"{sigma0s.size} scales sigma0 = {sigma0s.max():g}..{sigma0s.min():g} x {len(config.seeds)} seed(s)"

    measured = {model: as_array(records[f"sweep-{model}"]["switch_steps"]) for model in MODELS}  # (S, seeds, m)
    predicted = {name: as_array(pred[name]) for name in PREDICTED_SOURCES}
    fits = {
        name: [fit_mode(sigma0s, steps[:, :, k], f"mode {k + 1} ({label})") for k in range(modes)]
        for name, steps, label in [
            *((m, measured[m], SOURCES[m]) for m in MODELS),
            ("mflow", predicted["mflow"], "M-flow"),
            ("lv", predicted["lv"], "LV discrete map"),
            ("lv_continuous", predicted["lv_continuous"], "LV gradient flow"),
        ]
    }

    claims: list[Claim] = []
    for model in MODELS:
        for k in range(modes):
            fit = fits[model][k]
            resolved = not fit.problem and math.isfinite(fit.slope)
            claims.append(
                Claim(
                    claim=f"GD: mode {k + 1}'s switch-on step moves by 1/ln(1 + 2 lr c_k) per unit ln(1/sigma0) "
                    f"({SOURCES[model]})",
                    measured_what=f"fitted slope of the switch-on step versus ln(1/sigma0), {SOURCES[model]}, {scales}"
                    + (f", ± {fit.stderr:.2g} (standard error)" if resolved and math.isfinite(fit.stderr) else ""),
                    predicted=float(discrete[k]),
                    measured=fit.slope if resolved else None,
                    tolerance=Tolerance("relative", SLOPE_TOLERANCE),
                    unit="steps",
                    why_missing="" if resolved else fit.problem,
                )
            )
    for model in MODELS:
        for k in range(modes):
            fit = fits[model][k]
            resolved = not fit.problem and math.isfinite(fit.max_residual)
            claims.append(
                Claim(
                    claim=f"mode {k + 1}'s switch-on step is linear in ln(1/sigma0) ({SOURCES[model]})",
                    measured_what=f"largest |residual| of the linear fit, {SOURCES[model]}, {scales}",
                    predicted=0.0,
                    measured=fit.max_residual if resolved else None,
                    tolerance=Tolerance("at_most", LINEARITY_STEPS),
                    unit="steps",
                    why_missing="" if resolved else fit.problem,
                )
            )
    failures = list(pred.get("failures") or [])
    failed = sorted({float(f["sigma0"]) for f in failures}, reverse=True)
    ran = np.array([sigma0 not in failed for sigma0 in sigma0s])
    gap = np.abs(predicted["mflow"] - measured["quadratic"])[ran]
    resolved = gap.size > 0 and bool(np.all(np.isfinite(gap)))
    where = f"the {int(ran.sum())} of {sigma0s.size} scales where predict ran"
    if failed:
        where += f" (at sigma0 = {', '.join(f'{v:g}' for v in failed)} predict failed: {failures[0]['error']})"
    claims.append(
        Claim(
            claim="the M-flow predicts the quadratic model's switch-on steps at every init scale where the float64 "
            "M-flow stays finite, to a step",
            measured_what=f"max over seeds and modes of |t_M-flow - t_quadratic|, {where}",
            predicted=0.0,
            measured=float(np.max(gap)) if resolved else None,
            tolerance=Tolerance("at_most", MFLOW_STEPS),
            unit="steps",
            why_missing="" if resolved else "a mode does not switch on within the horizon (M-flow or quadratic model)",
        )
    )
    fit = fits["quadratic"][0]
    resolved = not fit.problem and math.isfinite(fit.slope)
    claims.append(
        Claim(
            claim=f"the discrete-step correction is resolved: gradient flow's 1/(2 lr c_1) = {continuous[0]:.3f} misses "
            f"GD's mode-1 slope by more than {SLOPE_TOLERANCE:.0%} (2 lr c_1 = {2 * config.lr * c[0]:.3g})",
            measured_what="|measured - 1/(2 lr c_1)| / (1/(2 lr c_1)), mode-1 slope of the quadratic model",
            predicted=SLOPE_TOLERANCE,
            measured=abs(fit.slope - continuous[0]) / continuous[0] if resolved else None,
            tolerance=Tolerance("at_least", 0.0),
            why_missing="" if resolved else fit.problem,
        )
    )

    text = _text(config, c, discrete, continuous, fits, predicted, measured, float(pred["basis_overlap"]), failures)
    data = {
        "sigma0s": sigma0s,
        "log_inv_sigma0": x,
        "c": c,
        "lr": config.lr,
        "seeds": list(config.seeds),
        "measured": {m: measured[m] for m in MODELS},
        "predicted": predicted,
        "fits": {name: [(f.slope, f.stderr, f.intercept) for f in fs] for name, fs in fits.items()},
        "residuals": {m: [f.residuals for f in fits[m]] for m in MODELS},
        "slope_discrete": discrete,
        "slope_continuous": continuous,
        "slope_tolerance": SLOPE_TOLERANCE,
        "linearity_steps": LINEARITY_STEPS,
        "predict_failed": failed,
    }
    return ExperimentResult(claims=tuple(claims), text=text, data=data)


def _text(config, c, discrete, continuous, fits, predicted, measured, overlap, failures) -> str:
    def row(name: str) -> str:
        return "; ".join(f"mode {k + 1} {fmt_fit(f)}" for k, f in enumerate(fits[name]))

    def ratio(name: str, reference: np.ndarray) -> str:
        return ", ".join(f"{f.slope / r:.3f}" for f, r in zip(fits[name], reference))

    def residuals(name: str) -> str:
        return ", ".join("n/a" if not math.isfinite(f.max_residual) else f"{f.max_residual:.2f}" for f in fits[name])

    order = np.argsort(np.log(1.0 / np.asarray(config.sigma0s)))
    xs = np.log(1.0 / np.asarray(config.sigma0s))[order]
    net_mean = np.nanmean(measured["network"], axis=1)[order]  # (S, m)
    local = np.diff(net_mean, axis=0) / np.diff(xs)[:, None]
    local_text = "; ".join(
        f"sigma0 {config.sigma0s[order[i]]:g} to {config.sigma0s[order[i + 1]]:g}: "
        + ", ".join("n/a" if not np.isfinite(v) else f"{v:.2f}" for v in local[i])
        for i in range(local.shape[0])
    )
    first, last = 0, len(config.sigma0s) - 1
    net_steps = measured["network"][:, 0, :]
    quad_steps = measured["quadratic"][:, 0, :]

    def steps_at(steps: np.ndarray, i: int) -> str:
        return ", ".join("n/a" if not np.isfinite(v) else f"{v:.0f}" for v in steps[i])

    paragraphs = [
        f"Staircase s = {', '.join(f'{s:g}' for s in config.singular_values)} (D = {config.inputs}, K = {config.outputs}, "
        f"N = {config.samples}, data seed {config.data_seed}), tanh network of width {config.width} and its quadratic "
        f"model, GD with lr {config.lr:g}, float64, {config.steps} steps, init scales sigma0 = "
        f"{', '.join(f'{s:g}' for s in config.sigma0s)}, seeds {', '.join(str(s) for s in config.seeds)}. Growth "
        f"c_k = {', '.join(f'{v:.4g}' for v in c)} (predict's modes are the task's: overlap {overlap:.6f}). Slopes are in "
        "steps per unit ln(1/sigma0) with the standard error of the fit.",
        f"Predicted slopes: GD 1/ln(1 + 2 lr c_k) = {', '.join(f'{v:.3f}' for v in discrete)}; gradient flow "
        f"1/(2 lr c_k) = {', '.join(f'{v:.3f}' for v in continuous)} "
        f"({', '.join(f'{v / d - 1:+.1%}' for v, d in zip(continuous, discrete))} "
        f"off). Fitted: quadratic model {row('quadratic')}; tanh network {row('network')}; M-flow {row('mflow')}; LV "
        f"discrete map {row('lv')}; LV gradient flow {row('lv_continuous')}.",
        f"Measured / predicted GD slope per mode: quadratic model {ratio('quadratic', discrete)}; tanh network "
        f"{ratio('network', discrete)}. Largest residual of the linear fits (steps): quadratic model "
        f"{residuals('quadratic')}; tanh network {residuals('network')}. Local slopes of the tanh network between "
        f"neighbouring scales, per mode: {local_text}, against the predicted {', '.join(f'{v:.2f}' for v in discrete)} "
        f"and mode 1's {discrete[0]:.2f}. Where a later mode's local slope falls from its own rate towards mode 1's, "
        "its switch-on is no longer set by its own escape from sigma0: the tanh network's higher-order terms feed it "
        "once the earlier modes are learned (visible in E1's occupations as a jump of the later modes at mode 1's "
        "switch-on), and its step is not linear in ln(1/sigma0).",
        f"Switch-on steps at sigma0 = {config.sigma0s[first]:g} and {config.sigma0s[last]:g} (seed {config.seeds[0]}): "
        f"quadratic model {steps_at(quad_steps, first)} and {steps_at(quad_steps, last)}; tanh network "
        f"{steps_at(net_steps, first)} and {steps_at(net_steps, last)}; M-flow {steps_at(predicted['mflow'][:, 0, :], first)} "
        f"and {steps_at(predicted['mflow'][:, 0, :], last)}.",
    ]
    def worst(source: str) -> np.ndarray:
        """Largest |t_source - t_quadratic| over seeds and modes, per scale (NaN where nothing to compare)."""
        diff = np.abs(predicted[source] - measured["quadratic"]).reshape(len(config.sigma0s), -1)
        ok = np.isfinite(diff).any(axis=1)
        return np.where(ok, np.max(np.where(np.isfinite(diff), diff, -np.inf), axis=1), np.nan)

    def per_scale(values: np.ndarray) -> str:
        return ", ".join(f"{s:g}: " + ("n/a" if not np.isfinite(v) else f"{v:.0f}") for s, v in zip(config.sigma0s, values))

    mflow_gap, lv_gap = worst("mflow"), worst("lv")
    paragraph = (
        "Largest |difference| of the switch-on steps from the quadratic model's over the modes, per scale: M-flow "
        f"{per_scale(mflow_gap)}; LV discrete map {per_scale(lv_gap)}."
    )
    off = [sigma0 for sigma0, a, b in zip(config.sigma0s, mflow_gap, lv_gap) if a > MFLOW_STEPS and b <= MFLOW_STEPS]
    if off:
        paragraph += (
            f" At sigma0 = {', '.join(f'{v:g}' for v in off)} the M-flow is off while the LV map (log occupations, no "
            "rounding floor) is not: the float64 M-flow, which stores M in the standard basis, loses occupations far below "
            "the rounding of the learned modes' O(1) entries; the theory is not at fault."
        )
    paragraphs.append(paragraph)
    if failures:
        scales = ", ".join(sorted({f"{f['sigma0']:g}" for f in failures}, key=float, reverse=True))
        paragraphs.append(
            f"predict failed at sigma0 = {scales} ({failures[0]['error']}); its M-flow and LV fits use the other "
            "scales. The cause is float64, not the learning rate: the M-flow stores M = W W^T in the standard basis, so "
            "once mode 1 is learned (entries O(1)) every occupation carries an absolute rounding of about 1e-16. An "
            "occupation n sigma0^2 far below that (mode 4 at the smallest scales) is lost to rounding and can turn "
            "negative, and a negative occupation along a growing mode grows geometrically until the flow diverges. "
            "The quadratic model and the network keep W and do not have this floor."
        )
    return "\n\n".join(paragraphs)


E2 = Experiment(
    "E2",
    "init sweep",
    InitSweepConfig,
    runs,
    summarise,
    figures="nqf.report.figures_e2:plot",
    description="Switch-on step of each staircase mode versus ln(1/sigma0) under GD: tanh network, quadratic model, "
    "M-flow and LV, against the discrete escape slope 1/ln(1 + 2 lr c_k).",
)
