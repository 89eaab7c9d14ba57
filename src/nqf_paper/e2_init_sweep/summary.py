r"""E2's summary: the linear fit of every mode's switch-on step against ln(1/sigma0), the claims in
groups (GD slopes, linearity, the M-flow's steps, the discrete-step correction), the figures' data."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nqf_paper.verdict import Claim, Tolerance

from .._base import ExperimentResult
from .._common import as_array, switch_fit_problem
from .config import (
    LINEARITY_STEPS,
    MFLOW_STEPS,
    MODELS,
    PREDICTED_SOURCES,
    SLOPE_TOLERANCE,
    SOURCES,
    InitSweepConfig,
)
from .text import _text


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
        return ModeFit(
            math.nan, math.nan, math.nan, nan, math.nan, problem or f"{what}: too few switch-on steps to fit"
        )
    fit = fit_switch_slope(sigma0s, steps)
    residuals = steps - (fit.intercept + fit.slope * np.log(1.0 / sigma0s))[:, None]
    return ModeFit(fit.slope, fit.stderr, fit.intercept, residuals, float(np.nanmax(np.abs(residuals))), problem)


def summarise(config: InitSweepConfig, records: dict[str, dict]) -> ExperimentResult:
    from nqf.optimizers import closed_optimizer
    from nqf.theory.lotka_volterra.system import switch_slope_continuous

    sigma0s = np.asarray(config.sigma0s, dtype=np.float64)
    x = np.log(1.0 / sigma0s)
    pred = records["predict"]
    c = as_array(pred["growth"])
    modes = c.size
    discrete = np.asarray(closed_optimizer("gd").switch_slope(c, config.lr), dtype=np.float64)
    continuous = np.asarray(switch_slope_continuous(c, config.lr), dtype=np.float64)
    scales = f"{sigma0s.size} scales sigma0 = {sigma0s.max():g}..{sigma0s.min():g} x {len(config.seeds)} seed(s)"

    measured = {model: as_array(records[f"sweep-{model}"]["switch_steps"]) for model in MODELS}  # (S, seeds, m)
    predicted = {name: as_array(pred[name]) for name in PREDICTED_SOURCES}
    fits = _fits(sigma0s, measured, predicted, modes)
    network_flow = pred.get("network_flow")
    network_fits = (
        [fit_mode(sigma0s, as_array(network_flow)[:, :, k], f"mode {k + 1} (mean field)") for k in range(modes)]
        if network_flow is not None
        else None
    )
    why_no_network = "; ".join(pred.get("network_notes") or ()) or "the run recorded no mean-field flow"
    claims = _slope_claims(fits, discrete, scales, modes, network_fits, why_no_network)
    claims += _linearity_claims(fits, scales, modes)
    failures = list(pred.get("failures") or [])
    failed = sorted({float(f["sigma0"]) for f in failures}, reverse=True)
    claims.append(_mflow_claim(sigma0s, measured, predicted, failures, failed))
    claims.append(_discrete_correction_claim(config, fits, continuous, c))

    over_inits = _init_seed_fits(sigma0s, records["init-seeds"], modes)
    text = _text(
        config,
        c,
        discrete,
        continuous,
        fits,
        predicted,
        measured,
        float(pred["basis_overlap"]),
        failures,
        network_fits,
        over_inits,
    )
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
        "init_seeds": over_inits["seeds"],
        "init_seed_slopes": {name: over_inits[name] for name in ("trained", "predicted")},
    }
    return ExperimentResult(claims=tuple(claims), text=text, data=data)


def _init_seed_fits(sigma0s: np.ndarray, record: dict, modes: int) -> dict:
    """The tanh network's slope per init seed and mode, trained and by its own prediction, (seeds, m)
    each (NaN where a seed's fit is not a resolved measurement), and the slopes of the steps pooled
    over the seeds, (m,) each (one line through all; NaN where a seed has no fit)."""
    trained, predicted = as_array(record["trained"]), as_array(record["predicted"])  # (S, seeds, m)
    seeds = [int(s) for s in record["seeds"]]
    out: dict = {"seeds": seeds, "notes": list(record.get("network_notes") or ())}
    for name, steps in (("trained", trained), ("predicted", predicted)):
        per_seed = np.full((len(seeds), modes), np.nan)
        for j, seed in enumerate(seeds):
            for k in range(modes):
                fit = fit_mode(sigma0s, steps[:, j, k], f"mode {k + 1}, init seed {seed}")
                per_seed[j, k] = np.nan if fit.problem else fit.slope
        pooled = [fit_mode(sigma0s, steps[:, :, k], f"mode {k + 1}") for k in range(modes)]
        resolved = np.all(np.isfinite(per_seed), axis=0)
        out[name] = per_seed
        out[f"{name}_pooled"] = np.array([f.slope if ok else np.nan for f, ok in zip(pooled, resolved, strict=True)])
    return out


def _fits(sigma0s: np.ndarray, measured: dict, predicted: dict, modes: int) -> dict[str, list[ModeFit]]:
    """The linear fit of every mode's switch-on steps, for the trained models, the M-flow and both LVs."""
    return {
        name: [fit_mode(sigma0s, steps[:, :, k], f"mode {k + 1} ({label})") for k in range(modes)]
        for name, steps, label in [
            *((m, measured[m], SOURCES[m]) for m in MODELS),
            ("mflow", predicted["mflow"], "M-flow"),
            ("lv", predicted["lv"], "LV discrete map"),
            ("lv_continuous", predicted["lv_continuous"], "LV gradient flow"),
        ]
    }


def _slope_claims(
    fits: dict, discrete: np.ndarray, scales: str, modes: int, network_fits=None, why_no_network: str = ""
) -> list[Claim]:
    """Each trained model's mode k moves by the GD escape slope 1/ln(1 + 2 lr c_k). The tanh
    network's claims also carry the network's own prediction: the slope fitted to the mean-field
    flow's switch-on steps at the same scales (``network_fits``)."""
    claims: list[Claim] = []
    for model in MODELS:
        for k in range(modes):
            fit = fits[model][k]
            resolved = not fit.problem and math.isfinite(fit.slope)
            second: dict = {}
            if model == "network":
                own = None if network_fits is None else network_fits[k]
                if own is not None and not own.problem and math.isfinite(own.slope):
                    second = {"network_predicted": own.slope}
                else:
                    second = {"network_why_missing": own.problem if own is not None else why_no_network}
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
                    **second,
                )
            )
    return claims


def _linearity_claims(fits: dict, scales: str, modes: int) -> list[Claim]:
    """Each trained model's switch-on steps lie on a line in ln(1/sigma0), to a step."""
    claims: list[Claim] = []
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
    return claims


def _mflow_claim(sigma0s: np.ndarray, measured: dict, predicted: dict, failures: list, failed: list) -> Claim:
    """The M-flow predicts the quadratic model's switch-on steps, to a step, where predict ran."""
    ran = np.array([sigma0 not in failed for sigma0 in sigma0s])
    gap = np.abs(predicted["mflow"] - measured["quadratic"])[ran]
    resolved = gap.size > 0 and bool(np.all(np.isfinite(gap)))
    where = f"the {int(ran.sum())} of {sigma0s.size} scales where predict ran"
    if failed:
        where += f" (at sigma0 = {', '.join(f'{v:g}' for v in failed)} predict failed: {failures[0]['error']})"
    return Claim(
        claim="the M-flow predicts the quadratic model's switch-on steps at every init scale where the float64 "
        "M-flow stays finite, to a step",
        measured_what=f"max over seeds and modes of |t_M-flow - t_quadratic|, {where}",
        predicted=0.0,
        measured=float(np.max(gap)) if resolved else None,
        tolerance=Tolerance("at_most", MFLOW_STEPS),
        unit="steps",
        why_missing="" if resolved else "a mode does not switch on within the horizon (M-flow or quadratic model)",
    )


def _discrete_correction_claim(config: InitSweepConfig, fits: dict, continuous: np.ndarray, c: np.ndarray) -> Claim:
    """Gradient flow's slope 1/(2 lr c_1) misses GD's mode-1 slope: the discrete-step correction is resolved."""
    fit = fits["quadratic"][0]
    resolved = not fit.problem and math.isfinite(fit.slope)
    return Claim(
        claim=f"the discrete-step correction is resolved: gradient flow's 1/(2 lr c_1) = {continuous[0]:.3f} misses "
        f"GD's mode-1 slope by more than {SLOPE_TOLERANCE:.0%} (2 lr c_1 = {2 * config.lr * c[0]:.3g})",
        measured_what="|measured - 1/(2 lr c_1)| / (1/(2 lr c_1)), mode-1 slope of the quadratic model",
        predicted=SLOPE_TOLERANCE,
        measured=abs(fit.slope - continuous[0]) / continuous[0] if resolved else None,
        tolerance=Tolerance("at_least", 0.0),
        why_missing="" if resolved else fit.problem,
    )
