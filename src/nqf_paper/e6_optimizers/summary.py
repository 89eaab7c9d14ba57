r"""E6's summary: the slope of each mode's switch-on step against ln(1/sigma0) per optimizer and model,
the claims in groups (GD and momentum slopes, the effective-lr rule, closure on M), and the figures' data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nqf_paper.verdict import Claim, Tolerance

from .._base import ExperimentResult
from .._common import as_array, switch_fit_problem
from .config import (
    ADAM_BOUND,
    EQUIVARIANT,
    EQUIVARIANT_BOUND,
    MODELS,
    NAIVE_OFF_BY,
    OPTIMIZER_NAMES,
    OPTIMIZER_ORDER,
    SLOPE_TOLERANCE,
    OptimizersConfig,
)
from .text import _text


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
    from nqf.optimizers import closed_optimizer

    return {
        "gd": closed_optimizer("gd").switch_slope(c, config.lr),
        "momentum": closed_optimizer("momentum").switch_slope(c, config.lr, config.beta),
        "momentum_naive": closed_optimizer("gd").switch_slope(c, config.lr / (1.0 - config.beta)),
    }


def summarise(config: OptimizersConfig, records: dict[str, dict]) -> ExperimentResult:
    sigma0s = np.asarray(config.sigma0s, dtype=np.float64)
    optimizers = [o for o in OPTIMIZER_ORDER if o in config.optimizers]
    first = records[f"sweep-{optimizers[0]}-quadratic"]
    c = as_array(first["c"])
    predicted = _predictions(c, config)
    switch, fits = _switch_fits(records, optimizers, sigma0s, c.size)
    own = _own_fits(records, optimizers, sigma0s)
    claims = _slope_claims(config, fits, predicted, sigma0s, c.size, own)
    if "momentum" in fits:
        claims.append(_naive_rule_claim(config, fits, predicted, c))
    # closure: the plateau window ends at the last switch-on of the same optimizer's quadratic run
    closure_index = int(np.nonzero(sigma0s == config.closure_sigma0)[0][0])
    closure = {
        optimizer: _closure_info(records[f"closure-{optimizer}"], switch[optimizer]["quadratic"][closure_index, 0, :])
        for optimizer in optimizers
    }
    claims += _closure_claims(config, closure)
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
        "fits": {
            o: {m: [(f.slope, f.stderr, f.intercept) for f in fs] for m, fs in v.items()} for o, v in fits.items()
        },
        "predicted": predicted,
        "closure": closure,
        "network_closure": network_closure,
        "bounds": {"equivariant": EQUIVARIANT_BOUND, "adam": ADAM_BOUND},
    }
    return ExperimentResult(claims=tuple(claims), text=text, data=data)


def _switch_fits(records: dict[str, dict], optimizers: list[str], sigma0s: np.ndarray, modes: int):
    """Switch-on steps (S, seeds, m) and the fitted slope of each mode, {optimizer: {model: ...}}."""
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
    return switch, fits


def _own_fits(records: dict[str, dict], optimizers: list[str], sigma0s: np.ndarray) -> dict[str, tuple[_Fit, str]]:
    """{optimizer: (the fitted mode-1 slope of the network's own prediction, why a step is missing)} for
    the optimizers with a ``network-own`` run (the mean-field flow's switch-on steps at every sigma0, seed)."""
    out = {}
    for optimizer in optimizers:
        record = records.get(f"network-own-{optimizer}")
        if record is not None:
            steps = as_array(record["switch_steps"])  # (S, seeds, m)
            what = f"mode 1 ({OPTIMIZER_NAMES[optimizer]}, the network's own prediction)"
            out[optimizer] = (_fit_mode(sigma0s, steps[:, :, 0], what), "; ".join(record["notes"]))
    return out


def _slope_claims(
    config: OptimizersConfig,
    fits: dict,
    predicted: dict[str, np.ndarray],
    sigma0s: np.ndarray,
    modes: int,
    own: dict[str, tuple[_Fit, str]] | None = None,
) -> list[Claim]:
    """GD and momentum: every mode's slope for the quadratic model, mode 1's for the tanh network; the
    network's also carries its own prediction's slope (``own``, :func:`_own_fits`), a second verdict."""
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
                second: dict = {}
                if model == "network" and own and optimizer in own:
                    own_fit, notes = own[optimizer]
                    value = own_fit.slope if not own_fit.problem and math.isfinite(own_fit.slope) else None
                    why = "" if value is not None else "; ".join(x for x in (own_fit.problem, notes) if x)
                    second = {"network_predicted": value, "network_why_missing": why}
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
                        **second,
                    )
                )
    return claims


def _naive_rule_claim(config: OptimizersConfig, fits: dict, predicted: dict[str, np.ndarray], c: np.ndarray) -> Claim:
    """The effective-lr rule lr/(1 - beta) misses heavy-ball escape (mode 1, quadratic model)."""
    fit = fits["momentum"]["quadratic"][0]
    naive = float(predicted["momentum_naive"][0])
    resolved = not fit.problem and math.isfinite(fit.slope)
    return Claim(
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


def _closure_info(record: dict, last: np.ndarray) -> dict[str, Any]:
    """One optimizer's closure defects, with the plateau window through ``last``, the switch-on steps of its
    quadratic run at closure_sigma0 (all steps when a mode never switched on)."""
    m_defect, update_defect = as_array(record["m_defect"]), as_array(record["update_defect"])
    window = int(math.ceil(np.max(last))) if np.all(np.isfinite(last)) else update_defect.size
    window = min(window, update_defect.size)
    return {
        "m_defect": m_defect,
        "update_defect": update_defect,
        "window": window,
        "max_m_window": float(np.max(m_defect[: window + 1])),
        "max_m_all": float(np.max(m_defect)),
        "max_update_all": float(np.max(update_defect)),
        "window_complete": bool(np.all(np.isfinite(last))),
    }


def _closure_claims(config: OptimizersConfig, closure: dict[str, dict[str, Any]]) -> list[Claim]:
    """Equivariant optimizers keep the quadratic model closed on M, Adam does not; Muon's update is equivariant."""
    claims = []
    for optimizer, info in closure.items():
        window = info["window"]
        where = (
            f"steps 0..{window} (through the last switch-on at sigma0 = {config.closure_sigma0:g})"
            if info["window_complete"]
            else f"all {window} steps (a mode never switched on)"
        )
        if optimizer in EQUIVARIANT:
            claims.append(
                Claim(
                    claim=f"{OPTIMIZER_NAMES[optimizer]} keeps the quadratic model closed on M "
                    "(W0 and W0 O give the same M)",
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
    return claims
